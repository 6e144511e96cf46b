"""Every bundled rule, built and imported, against the frameworks' own autodiff of its forward.

First and second order, forward and reverse mode, and the transforms users
reach for: jit, vmap, jacfwd, jacrev, hessian in JAX; torch.func's grad, jvp,
jacrev, jacfwd, hessian, vmap; gradcheck (second-order finite differences are the
second_order check's, in the sweeps of tests/package/test_check.py).
"""

from __future__ import annotations

import ast
import math
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from rulegen.check import flat_call
from rulegen.derive.partials import has_snippets
from rulegen.spec.rules import read_rules, rule_files
from tests.conftest import RULES, built_package
from tests.oracles import jax_reference, sample_inputs, torch_reference

jax.config.update("jax_enable_x64", True)

# Snippet rules have no sympy forward to take the reference from; their own
# tests are in test_snippet_rules.py and the check battery.
# Real rules: tests/package/test_complex.py holds the complex ones to each framework's complex autodiff.
RULE_NAMES = sorted(r.name for r in read_rules(rule_files([RULES])) if not has_snippets(r) and not r.complex)
# Rules whose given derivative is written differently from sympy's; checked
# against the reference at points where both are well conditioned.
STATICS = {"softplus_beta": {"beta": 1.5}}
TOL = {"rtol": 1e-8, "atol": 1e-10}
# Finite differences of second order (jax's check_grads, torch's gradgradcheck) are the second_order
# check's, which the sweeps of tests/package/test_check.py run on every bundled rule: not repeated here.


def _close(a, b, **tol) -> None:
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), **{**TOL, **tol})


def _tree_close(a, b) -> None:
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        _close(x, y)


def _case(built, name: str, shape=(5,)):
    jax_pkg, torch_pkg, rules = built
    rule = rules[name]
    args = sample_inputs(rule, shape, seed=zlib.crc32(name.encode()) % 1000, statics=STATICS.get(name))
    diff = [k for k, i in enumerate(rule.inputs) if i.differentiable]
    # A structured rule's function, called with its inputs and returning its outputs in order.
    return rule, flat_call(rule, getattr(jax_pkg, name)), flat_call(rule, getattr(torch_pkg, name)), args, diff


def _bind(f, args, diff):
    """f as a function of its differentiable arguments only."""

    def bound(*xs):
        full = list(args)
        for k, x in zip(diff, xs, strict=True):
            full[k] = x
        return f(*full)

    return bound


def _total(f):
    def total(*xs):
        out = f(*xs)
        outs = out if isinstance(out, tuple) else (out,)
        return sum(o.sum() for o in outs)

    return total


@pytest.mark.parametrize("name", RULE_NAMES)
def test_jax_matches_autodiff_of_the_forward(built, name):
    rule, gen, _, args, diff = _case(built, name)
    ref = jax_reference(rule)
    jargs = [jnp.asarray(a) if isinstance(a, np.ndarray) else a for a in args]
    g, r = _bind(gen, jargs, diff), _bind(ref, jargs, diff)
    xs = [jargs[k] for k in diff]
    tangents = [jnp.cos(x) + 0.5 for x in xs]

    argnums = tuple(range(len(xs)))
    _tree_close(jax.jit(g)(*xs), r(*xs))
    _tree_close(jax.grad(_total(g), argnums)(*xs), jax.grad(_total(r), argnums)(*xs))
    _tree_close(jax.jacrev(g, argnums)(*xs), jax.jacrev(r, argnums)(*xs))
    batched = [jnp.stack([x, x * 0.9]) for x in xs]
    _tree_close(
        jax.vmap(jax.grad(_total(g), argnums))(*batched),
        jax.vmap(jax.grad(_total(r), argnums))(*batched),
    )
    hessian = jax.hessian(_total(r), argnums)(*xs)
    if rule.mode == "vjp":
        # A custom_vjp function has no forward mode in JAX: reverse over reverse only.
        _tree_close(jax.jacrev(jax.grad(_total(g), argnums), argnums)(*xs), hessian)
        return
    _tree_close(jax.jvp(g, xs, tangents), jax.jvp(r, xs, tangents))
    _tree_close(jax.jacfwd(g, argnums)(*xs), jax.jacrev(r, argnums)(*xs))
    _tree_close(jax.hessian(_total(g), argnums)(*xs), hessian)


@pytest.mark.parametrize("name", RULE_NAMES)
def test_torch_matches_autodiff_of_the_forward(built, name):
    rule, _, gen, args, diff = _case(built, name)
    ref = torch_reference(rule)
    targs = [torch.from_numpy(a) if isinstance(a, np.ndarray) else a for a in args]
    g, r = _bind(gen, targs, diff), _bind(ref, targs, diff)
    xs = tuple(targs[k] for k in diff)
    tangents = tuple(torch.cos(x) + 0.5 for x in xs)
    argnums = tuple(range(len(xs)))

    def close(a, b):
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
            _close(x.detach().numpy(force=True), y.detach().numpy(force=True))

    close(g(*xs), r(*xs))
    close(torch.func.jvp(g, xs, tangents), torch.func.jvp(r, xs, tangents))
    close(torch.func.grad(_total(g), argnums)(*xs), torch.func.grad(_total(r), argnums)(*xs))
    close(torch.func.jacfwd(g, argnums)(*xs), torch.func.jacrev(r, argnums)(*xs))
    close(torch.func.jacrev(g, argnums)(*xs), torch.func.jacrev(r, argnums)(*xs))
    close(torch.func.hessian(_total(g), argnums)(*xs), torch.func.hessian(_total(r), argnums)(*xs))
    close(
        torch.func.jacrev(torch.func.grad(_total(g), argnums), argnums)(*xs),
        torch.func.hessian(_total(r), argnums)(*xs),
    )
    batched = tuple(torch.stack([x, x * 0.9]) for x in xs)
    close(
        torch.func.vmap(torch.func.grad(_total(g), argnums))(*batched),
        torch.func.vmap(torch.func.grad(_total(r), argnums))(*batched),
    )
    leaves = tuple(x.clone().requires_grad_() for x in xs)
    assert torch.autograd.gradcheck(g, leaves, check_forward_ad=True, check_batched_grad=True)


@pytest.mark.parametrize("name", RULE_NAMES)
def test_backends_agree_on_value_and_gradient(built, name):
    _, jgen, tgen, args, diff = _case(built, name, shape=(3, 4))
    jargs = [jnp.asarray(a) if isinstance(a, np.ndarray) else a for a in args]
    targs = [
        torch.from_numpy(a).requires_grad_(k in diff) if isinstance(a, np.ndarray) else a for k, a in enumerate(args)
    ]
    jout = jgen(*jargs)
    tout = tgen(*targs)
    for a, b in zip(jax.tree.leaves(jout), jax.tree.leaves(tout), strict=True):
        _close(a, b.detach().numpy())
    _total(lambda *xs: tgen(*xs))(*targs).backward()
    jgrads = jax.grad(_total(_bind(jgen, jargs, diff)), tuple(range(len(diff))))(*[jargs[k] for k in diff])
    for k, jg in zip(diff, jgrads, strict=True):
        _close(jg, targs[k].grad.numpy())


@pytest.mark.parametrize("name", RULE_NAMES)
def test_rule_points_hold_in_both_backends(built, name):
    _, _, rules = built
    rule = rules[name]
    jax_pkg, torch_pkg, _ = built
    for point in rule.checks.points:
        values = [point.at.get(i.name, i.default) for i in rule.inputs]
        jargs = [v if i.static else jnp.asarray(v, dtype=jnp.float64) for i, v in zip(rule.inputs, values, strict=True)]
        targs = [
            v if i.static else torch.tensor(v, dtype=torch.float64, requires_grad=i.differentiable)
            for i, v in zip(rule.inputs, values, strict=True)
        ]
        jax_f, torch_f = flat_call(rule, getattr(jax_pkg, name)), flat_call(rule, getattr(torch_pkg, name))
        jout = jax_f(*jargs)
        tout = torch_f(*targs)
        if point.value is not None:
            _close(np.asarray(jax.tree.leaves(jout)).ravel(), np.ravel(point.value), rtol=1e-12)
            _close([t.detach().numpy() for t in jax.tree.leaves(tout)], np.ravel(point.value), rtol=1e-12)
        if point.grad is not None:
            diff = [k for k, i in enumerate(rule.inputs) if i.name in point.grad]
            grads = jax.grad(_total(_bind(jax_f, jargs, diff)), tuple(range(len(diff))))(*[jargs[k] for k in diff])
            _total(torch_f)(*targs).backward()
            for k, jg in zip(diff, grads, strict=True):
                expected = point.grad[rule.inputs[k].name]
                assert np.isfinite(np.asarray(jg)).all()
                _close(jg, expected, rtol=1e-12)
                _close(targs[k].grad.numpy(), expected, rtol=1e-12)


def test_grad_of_log1pexp_at_100_is_exactly_one(built):
    jax_pkg, torch_pkg, _ = built
    assert float(jax.grad(jax_pkg.log1pexp)(100.0)) == 1.0
    x = torch.tensor(100.0, dtype=torch.float64, requires_grad=True)
    torch_pkg.log1pexp(x).backward()
    assert x.grad.item() == 1.0


def test_second_derivative_of_my_cube_is_6x_through_its_residual(built):
    jax_pkg, torch_pkg, _ = built
    xs = np.array([-1.5, 0.5, 2.0])
    expected = 6 * xs
    _close(jax.vmap(jax.grad(jax.grad(jax_pkg.my_cube)))(jnp.asarray(xs)), expected)
    t = torch.from_numpy(xs)
    second = torch.func.vmap(torch.func.grad(torch.func.grad(torch_pkg.my_cube)))(t)
    _close(second.numpy(), expected)
    # Double backward through the saved residual dx = 3x^2 (the MyCube trap).
    leaf = t.clone().requires_grad_()
    (g,) = torch.autograd.grad(torch_pkg.my_cube(leaf).sum(), leaf, create_graph=True)
    (gg,) = torch.autograd.grad(g.sum(), leaf)
    _close(gg.numpy(), expected)
    # torch.func.hessian is jacfwd(jacrev): forward mode over the backward needs the residual's tangent.
    _close(torch.func.hessian(lambda x: torch_pkg.my_cube(x).sum())(t).diagonal().numpy(), expected)


def test_broadcast_inputs_get_cotangents_of_their_own_shapes(built):
    jax_pkg, torch_pkg, _ = built
    x = np.linspace(-1, 1, 4).reshape(4, 1)
    y = np.linspace(0.5, 2, 3).reshape(1, 3)
    gx, gy = jax.grad(lambda x, y: jax_pkg.sin_mul(x, y).sum(), (0, 1))(jnp.asarray(x), jnp.asarray(y))
    assert gx.shape == (4, 1) and gy.shape == (1, 3)
    _close(gx, (np.cos(x) * y).sum(axis=1, keepdims=True))
    _close(gy, np.sin(x).sum(axis=0, keepdims=True) * np.ones_like(y))
    tx = torch.from_numpy(x).requires_grad_()
    ty = torch.from_numpy(y).requires_grad_()
    torch_pkg.sin_mul(tx, ty).sum().backward()
    assert tx.grad.shape == (4, 1) and ty.grad.shape == (1, 3)
    _close(tx.grad.numpy(), gx)
    _close(ty.grad.numpy(), gy)


@pytest.mark.slow
def test_torch_compile_fullgraph_keeps_the_rule(built):
    _, torch_pkg, _ = built
    x = torch.linspace(-2, 2, 7, dtype=torch.float64, requires_grad=True)
    compiled = torch.compile(lambda x: torch.sin(torch_pkg.log1pexp(x)).sum(), fullgraph=True)
    compiled(x).backward()
    expected = torch.cos(torch.nn.functional.softplus(x)) * torch.sigmoid(x)
    _close(x.grad.numpy(), expected.detach().numpy())
    # Forward mode still uses the full class outside compilation.
    _, tangent = torch.func.jvp(torch_pkg.my_cube, (x.detach(),), (torch.ones(7, dtype=torch.float64),))
    _close(tangent.numpy(), 3 * x.detach().numpy() ** 2)


FUSED = """
rules:
  - {name: mish, inputs: [x], forward: x * tanh(softplus(x)), fuse: true}
  - {name: sin_exp_mul, inputs: [x, y], forward: sin(x) * exp(-x**2) * y, fuse: true}
"""


@pytest.mark.slow
def test_fused_rule_compiles_its_bodies_and_keeps_every_transform(tmp_path):
    import importlib
    import sys
    import warnings

    from rulegen.render.build import build

    (tmp_path / "fused.yaml").write_text(FUSED)
    build([tmp_path / "fused.yaml"], tmp_path / "rg_fused")
    sys.path.insert(0, str(tmp_path))
    try:
        pkg = importlib.import_module("rg_fused.torch")
    finally:
        sys.path.remove(str(tmp_path))
    x = torch.linspace(-3, 3, 9, dtype=torch.float64)
    y = torch.linspace(0.5, 2, 9, dtype=torch.float64)

    def mish(x):
        return x * torch.tanh(torch.nn.functional.softplus(x))

    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*torch.compile failed")  # a fallback to eager warns
        leaf = x.clone().requires_grad_()
        pkg.mish(leaf).sum().backward()
    frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    assert frames >= 2, "the forward and the backward body were compiled"
    _close(leaf.grad.numpy(), torch.func.grad(lambda x: mish(x).sum())(x).numpy())
    _close(torch.func.hessian(lambda x: pkg.mish(x).sum())(x).numpy(), torch.func.hessian(lambda x: mish(x).sum())(x))
    _close(torch.func.vmap(pkg.mish)(x[:, None]).numpy(), mish(x[:, None]).numpy())
    leaves = (x.clone().requires_grad_(), y.clone().requires_grad_())
    assert torch.autograd.gradcheck(pkg.sin_exp_mul, leaves, check_forward_ad=True, check_batched_grad=True)
    assert torch.autograd.gradgradcheck(pkg.sin_exp_mul, leaves)
    compiled = torch.compile(lambda x: pkg.mish(x).sum(), fullgraph=True)
    _close(compiled(x).numpy(), mish(x).sum().numpy())


def _calls(node: ast.AST) -> set[str]:
    """The dotted names of the functions `node` calls."""
    return {ast.unparse(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)}


def test_compiled_bodies_tanh_is_tanh_to_a_few_ulps(tmp_path):
    import importlib

    with built_package(tmp_path, FUSED, "rg_tanh") as folder:
        source = (folder / "torch" / "mish.py").read_text()
        tanh_expm1 = importlib.import_module("rg_tanh.torch._fuse").tanh_expm1
    # Only the bodies torch.compile runs use it: autograd differentiates the eager ones.
    tree = ast.parse(source)
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert "tanh_expm1" in _calls(functions["_forward_compiled"].body[0])
    assert "torch.tanh" in _calls(functions["_forward"].body[0])
    assert "tanh_expm1" not in _calls(functions["_forward"])
    (mish,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Mish"]
    assert "tanh_expm1" not in ast.unparse(mish)
    for dtype, ulps in ((torch.float64, 4), (torch.float32, 4)):
        u = torch.cat([torch.linspace(-25, 25, 100_001, dtype=dtype), torch.logspace(-30, 1, 1000, dtype=dtype)])
        u = torch.cat([u, -u])
        want = torch.tanh(u.double())
        got = tanh_expm1(u).double()
        tolerance = ulps * torch.finfo(dtype).eps * want.abs() + torch.finfo(dtype).tiny
        assert ((got - want).abs() <= tolerance).all(), (got - want).abs().max()
    specials = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan], dtype=torch.float64)
    got = tanh_expm1(specials)
    assert got[:4].tolist() == [0.0, -0.0, 1.0, -1.0] and torch.signbit(got[1]) and got[4].isnan()
