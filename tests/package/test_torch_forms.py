"""torch's one-kernel forms in built rules: exact tails, double backward and compiled bodies.

`1 + erf(u)` is `erfc(-u)`: one kernel, and exact where erf(u) nears -1.
silu's derivative times a cotangent or tangent is `silu_backward`, and
`softplus(beta * u) / beta` is softplus with its `beta`.
"""

from __future__ import annotations

import importlib
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.special as sps
import sympy as sp
import torch

from rulegen.derive import functions as fn
from tests.conftest import built_package
from tests.dispatch import AtenOps
from tests.plan.test_torch_forms import D, _derived

jax.config.update("jax_enable_x64", True)

RULES = """
rules:
  - {name: gelu, inputs: [x], forward: x * (1 + erf(x / sqrt(2))) / 2}
  - {name: upper_tail, inputs: [x], forward: (1 - erf(x)) / 2}
  - {name: lower_tail_scaled, inputs: [x, y], forward: y * (3 + 3 * erf(x))}
  - {name: gelu_fused, inputs: [x], forward: x * (1 + erf(x / sqrt(2))) / 2, fuse: true}
  - {name: swish, inputs: [x], forward: x * sigmoid(x)}
  - {name: swish_affine, inputs: [x, y], forward: (2 * x - y) * sigmoid(2 * x - y)}
  - {name: swish_square_sin, inputs: [x], forward: x**2 * sigmoid(x**2) + sin(x)}
  - {name: swish_negated, inputs: [x], forward: -x * sigmoid(-x)}
  - {name: swish_saved, inputs: [x, y], forward: x * sigmoid(x) * tanh(softplus(y))}
  - {name: swish_fused, inputs: [x], forward: x * sigmoid(x), fuse: true}
  - name: softplus_beta
    inputs: {x: {}, beta: {static: true, default: 1.0}}
    forward: softplus(beta * x) / beta
  - name: swish_beta
    inputs: {x: {}, beta: {static: true, default: 1.5}}
    forward: x * sigmoid(beta * x)
  - name: swish_shifted
    inputs: {x: {}, k: {dtype: int}}
    forward: (x + k) * sigmoid(x + k)
"""


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    with built_package(tmp_path_factory.mktemp("torch_forms"), RULES, "rg_torch_forms") as folder:
        yield folder, importlib.import_module("rg_torch_forms.torch")


@pytest.mark.parametrize("name", ["gelu", "upper_tail", "lower_tail_scaled"])
def test_no_erf_then_add_is_left(package, name):
    folder, _ = package
    torch_source = (folder / "torch" / f"{name}.py").read_text()
    assert "torch.special.erfc(" in torch_source
    assert "torch.special.erf(" not in torch_source and "erf_()" not in torch_source
    # XLA's erfc costs twice its erf, and JAX kept the sum, every bit wrong where erf(u) nears -1: now erfc.
    jax_source = (folder / "jax" / f"{name}.py").read_text()
    assert "jax.scipy.special.erfc(" in jax_source and "jax.scipy.special.erf(" not in jax_source


def _relative_error(got: torch.Tensor, exact: np.ndarray, condition: np.ndarray | float = 1.0) -> float:
    """The largest relative error in float32 eps, each point's divided by its condition number."""
    got = got.detach().double().numpy()
    return float(np.max(np.abs(got - exact) / np.abs(exact) / condition) / np.finfo(np.float32).eps)


def test_float32_tails_are_exact(package):
    _, pkg = package
    # Where the exact values are normal float32 numbers, down to 1e-32.
    x = torch.linspace(-12, 4, 1601, dtype=torch.float32, requires_grad=True)
    xd = x.detach().double().numpy()
    pkg.gelu(x).sum().backward()
    # x / sqrt(2) is rounded to float32, a relative error that each function
    # magnifies by its condition number |x f'(x) / f(x)| (about x**2 in the
    # tail; large too where the derivative crosses 0, near x = -0.75).
    pdf = np.exp(-xd * xd / 2) / np.sqrt(2 * np.pi)
    value, slope, curvature = xd * sps.ndtr(xd), sps.ndtr(xd) + xd * pdf, (2 - xd * xd) * pdf
    assert _relative_error(pkg.gelu(x), value, 1 + np.abs(xd * slope / value)) < 4
    assert _relative_error(x.grad, slope, 1 + np.abs(xd * curvature / slope)) < 4

    t = torch.linspace(-3, 9, 1201, dtype=torch.float32, requires_grad=True)
    td = t.detach().double().numpy()
    pkg.upper_tail(t).sum().backward()
    assert _relative_error(pkg.upper_tail(t), sps.erfc(td) / 2) < 8
    assert _relative_error(t.grad, -np.exp(-td * td) / np.sqrt(np.pi), 1 + 2 * td * td) < 4  # t**2 is rounded

    y = torch.full_like(t, 2.0)
    assert _relative_error(pkg.lower_tail_scaled(-t, y), 6 * sps.erfc(td)) < 8

    # The JAX functions too (they computed 1 + erf: every bit wrong below x = -6 for gelu).
    import jax

    jax_pkg = importlib.import_module("rg_torch_forms.jax")
    xs = x.detach().numpy()
    jax_value, jax_slope = jax.vmap(jax.value_and_grad(jax_pkg.gelu))(xs)
    assert _relative_error(torch.from_numpy(np.asarray(jax_value)), value, 1 + np.abs(xd * slope / value)) < 4
    assert _relative_error(torch.from_numpy(np.asarray(jax_slope)), slope, 1 + np.abs(xd * curvature / slope)) < 4
    upper = jax.vmap(jax_pkg.upper_tail)(t.detach().numpy())
    # XLA's own float32 erfc is 32 eps off in its tail (x = 9); the sum was 8.4e6 where erf(x) neared 1.
    assert _relative_error(torch.from_numpy(np.asarray(upper)), sps.erfc(td) / 2) < 64


def test_double_backward_through_the_saved_erfc(package):
    _, pkg = package
    x = torch.linspace(-4, 3, 11, dtype=torch.float64, requires_grad=True)
    y = torch.linspace(0.5, 2, 11, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(pkg.gelu, (x,))
    assert torch.autograd.gradcheck(pkg.lower_tail_scaled, (x, y), check_forward_ad=True)
    assert torch.autograd.gradgradcheck(pkg.lower_tail_scaled, (x, y))


@pytest.mark.slow
def test_compiled_bodies_compute_erfc_too(package):
    """Inductor's erfc is a scalar loop, and the bodies it compiled read `(erf(u) + 1)`: every bit wrong where
    erf(u) nears -1 (since stop 40 they compute erfc, as the eager bodies and JAX do)."""
    import warnings

    folder, pkg = package
    source = (folder / "torch" / "gelu_fused.py").read_text()
    assert "torch.special.erfc(" in source and "torch.special.erf(" not in source

    x = torch.linspace(-5, 3, 33, dtype=torch.float64, requires_grad=True)
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*torch.compile failed")
        value = pkg.gelu_fused(x)
        value.sum().backward()
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 2, (
        "the forward and the backward body were compiled"
    )
    xd = x.detach()
    cdf, pdf = torch.special.ndtr(xd), torch.exp(-xd * xd / 2) / math.sqrt(2 * math.pi)
    torch.testing.assert_close(value.detach(), xd * cdf, rtol=1e-13, atol=1e-15)
    torch.testing.assert_close(x.grad, cdf + xd * pdf, rtol=1e-13, atol=1e-15)


# -- silu's derivative and softplus's beta

X, Y, BETA = sp.symbols("x y beta", real=True)


@pytest.mark.parametrize(
    ("forward", "wrt", "expected"),
    [
        (X * fn.sigmoid(X), X, D(X)),
        (2 * X * fn.sigmoid(2 * X), X, 2 * D(2 * X)),
        (X * Y * fn.sigmoid(X), X, Y * D(X)),
        ((X + Y) * fn.sigmoid(X + Y), Y, D(X + Y)),
        (2 * (X - Y) * fn.sigmoid(X - Y), Y, -2 * D(X - Y)),
        (X**2 * fn.sigmoid(X**2), X, 2 * X * D(X**2)),
        # silu'(u) = 1 - silu'(-u): the form without the constant, which stays a product.
        (-X * fn.sigmoid(-X), X, -D(-X)),
        (X * fn.sigmoid(X) + sp.sin(X), X, sp.cos(X) + D(X)),
    ],
)
def test_silu_derivative_is_recognised_as_sympy_derives_it(forward, wrt, expected):
    got = _derived(forward, wrt)
    assert got == expected
    composite = got.replace(lambda e: isinstance(e, D), lambda e: e.rewrite(fn.sigmoid))
    assert sp.simplify((composite - sp.diff(forward, wrt)).rewrite(sp.exp)) == 0


def test_silu_derivative_differentiates_as_its_composite():
    u = 2 * X**2 - Y
    for v in (X, Y):
        difference = sp.diff(D(u), v) - sp.diff(D(u).rewrite(fn.sigmoid), v)
        assert sp.simplify(difference.rewrite(sp.exp)) == 0


def test_forms_refused_where_static_or_integer(package):
    folder, _ = package
    swish_beta = (folder / "torch" / "swish_beta.py").read_text()
    assert "silu_backward" not in swish_beta and "softplus_backward" in swish_beta
    assert "silu_backward" not in (folder / "torch" / "swish_shifted.py").read_text()
    for name in ("swish_affine", "swish_negated", "swish_saved"):
        assert "silu_backward(" in (folder / "torch" / f"{name}.py").read_text(), name


def test_a_silu_form_nan_where_its_argument_overflows_is_repaired_by_products_scaled(package):
    # d/dx (x**2 sigmoid(x**2) + sin(x)) as silu_backward(2x, x**2) is nan where x**2 overflows (x**2 (1 -
    # sigmoid(x**2)) is inf * 0), from |x| = 1.3e154 in float64 and 1.8e19 in float32, where it is 2x + cos(x):
    # the search's repair takes 2x**3 sigmoid(x**2) sigmoid(-x**2) as a scaled product (`power_product`), 0 there.
    folder, pkg = package
    assert "power_product(" in (folder / "torch" / "swish_square_sin.py").read_text()
    jax_pkg = importlib.import_module("rg_torch_forms.jax")
    for dtype, points in ((torch.float64, [3.0, 1e103, 1e155, 1e300]), (torch.float32, [3.0, 1e10, 1e20, 1e30])):
        x = torch.tensor(points, dtype=dtype, requires_grad=True)
        (grad,) = torch.autograd.grad(pkg.swish_square_sin(x).sum(), x)
        xs = jnp.asarray(points, dtype=jnp.float64 if dtype == torch.float64 else jnp.float32)
        jax_grad = np.asarray(jax.vmap(jax.grad(jax_pkg.swish_square_sin))(xs))
        p = np.asarray(points)
        # 2x**3 sigmoid(x**2) sigmoid(-x**2) is below 1e-300 past |x| = 27.
        near = np.where(p < 27, p, 0)
        with np.errstate(over="ignore"):  # p**2 is inf, sigmoid of it 1
            exact = 2 * p * sps.expit(p**2) + np.cos(p) + 2 * near**3 * sps.expit(near**2) * sps.expit(-(near**2))
        for got in (grad.double().numpy(), jax_grad.astype(np.float64)):
            np.testing.assert_allclose(got, exact, rtol=8 * float(torch.finfo(dtype).eps))


def _composites(beta: float) -> dict:
    """Each rule as torch's autodiff of its composite computes it, and its float64 points."""
    x = torch.linspace(-6, 6, 25, dtype=torch.float64)
    y = torch.linspace(-3, 2.5, 25, dtype=torch.float64)
    return {
        "swish": (lambda x: x * torch.sigmoid(x), (x,)),
        "swish_affine": (lambda x, y: (2 * x - y) * torch.sigmoid(2 * x - y), (x, y)),
        "swish_square_sin": (lambda x: x**2 * torch.sigmoid(x**2) + torch.sin(x), (x / 2,)),
        "swish_negated": (lambda x: -x * torch.sigmoid(-x), (x,)),
        "swish_saved": (lambda x, y: x * torch.sigmoid(x) * torch.tanh(torch.log1p(torch.exp(y))), (x, y)),
        "swish_fused": (lambda x: x * torch.sigmoid(x), (x,)),
        "softplus_beta": (lambda x: torch.log1p(torch.exp(beta * x)) / beta, (x,)),
        "swish_beta": (lambda x: x * torch.sigmoid(beta * x), (x,)),
    }


def _close(got, expected, order: int = 1) -> None:
    # A second order goes through one more rounded partial.
    torch.testing.assert_close(got, expected, rtol=10.0**-14 * 10**order, atol=10.0**-16 * 10**order)


@pytest.mark.parametrize("beta", [1.7, -0.8])
@pytest.mark.parametrize("name", sorted(_composites(1.0)))
def test_agrees_with_autodiff_of_the_composite_at_first_and_second_order(package, name, beta):
    _, pkg = package
    composite, points = _composites(beta)[name]
    static = (beta,) if name in ("softplus_beta", "swish_beta") else ()

    def generated(*xs):
        return getattr(pkg, name)(*xs, *static)

    leaves = [p.clone().requires_grad_() for p in points]
    assert torch.autograd.gradcheck(generated, leaves, check_forward_ad=True, check_batched_grad=True)
    assert torch.autograd.gradgradcheck(generated, leaves, check_fwd_over_rev=True)

    generator = torch.Generator().manual_seed(0)
    cotangent = torch.randn(points[0].shape, dtype=torch.float64, generator=generator)
    tangents = tuple(torch.randn(p.shape, dtype=torch.float64, generator=generator) for p in points)
    ours, theirs = ([p.clone().requires_grad_() for p in points] for _ in range(2))
    values = generated(*ours), composite(*theirs)
    _close(*values)
    # The first order as a backward that nothing records runs it (the one kernel), then again for the second.
    plain = [
        torch.autograd.grad(v, xs, cotangent, retain_graph=True) for v, xs in zip(values, (ours, theirs), strict=True)
    ]
    first = [
        torch.autograd.grad(v, xs, cotangent, create_graph=True) for v, xs in zip(values, (ours, theirs), strict=True)
    ]
    for a, b, c in zip(*plain, first[0], strict=True):
        _close(a, b)
        _close(c, b)
    second = [
        torch.autograd.grad(sum((g * t).sum() for g, t in zip(grads, tangents, strict=True)), xs)
        for grads, xs in zip(first, (ours, theirs), strict=True)
    ]
    for a, b in zip(*second, strict=True):
        _close(a, b, order=2)

    # Forward mode, as torch.func and as forward_ad of plain tensors run it; then forward over reverse.
    jvps = [torch.func.jvp(f, points, tangents)[1] for f in (generated, composite)]
    _close(*jvps)
    with torch.autograd.forward_ad.dual_level():
        duals = [torch.autograd.forward_ad.make_dual(p, t) for p, t in zip(points, tangents, strict=True)]
        _close(torch.autograd.forward_ad.unpack_dual(generated(*duals)).tangent, jvps[1])
    argnums = tuple(range(len(points)))
    hessians = [
        torch.func.hessian(lambda *xs, f=f: f(*xs).sum(), argnums=argnums)(*points) for f in (generated, composite)
    ]
    for a, b in zip(hessians[0], hessians[1], strict=True):
        for c, d in zip(a, b, strict=True):
            _close(c, d, order=2)


def _aten_ops(run) -> list[str]:
    """The aten operators `run()` calls, in order."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        run()
    return [e.name for e in profile.events() if e.name.startswith("aten::")]


def test_swish_backward_and_jvp_are_one_kernel(package):
    _, pkg = package
    x = torch.linspace(-4, 4, 9, requires_grad=True)
    out = pkg.swish(x)
    g = torch.ones_like(out)
    backward = _aten_ops(lambda: torch.autograd.grad(out, x, g))
    assert [op for op in backward if op != "aten::empty_like"] == ["aten::silu_backward"], backward
    with torch.autograd.forward_ad.dual_level():
        dual = torch.autograd.forward_ad.make_dual(x.detach(), torch.ones_like(x))
        forward = _aten_ops(lambda: pkg.swish(dual))
    assert "aten::silu_backward" in forward and "aten::sigmoid" not in forward, forward


def _exact(name: str, x: np.ndarray, beta: float) -> tuple[np.ndarray, np.ndarray]:
    if name == "swish":
        s = sps.expit(x)
        return x * s, s * (1 + x * (1 - s))
    return np.logaddexp(0.0, beta * x) / beta, sps.expit(beta * x)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("name", "beta"), [("swish", None), ("softplus_beta", 1.5), ("softplus_beta", -0.8)])
def test_low_precision_rounds_once(package, name, beta, dtype):
    """Computed in float32 and rounded once: within half an eps of the float64 value, relative to max(|v|, 1)."""
    _, pkg = package
    x = torch.linspace(-6, 6, 4001).to(dtype).requires_grad_()
    out = pkg.swish(x) if beta is None else pkg.softplus_beta(x, beta)
    out.sum().backward()
    value, slope = _exact(name, x.detach().double().numpy(), beta)
    eps = torch.finfo(dtype).eps
    for got, exact in ((out, value), (x.grad, slope)):
        assert got.dtype == dtype
        error = np.abs(got.detach().double().numpy() - exact) / np.maximum(np.abs(exact), 1.0) / eps
        assert error.max() <= 0.5 + 1e-3


def test_an_absent_cotangent_adds_nothing_to_the_gradient():
    # One output of two asked about: the other's cotangent is None.  It was read as the number 0.0 and added,
    # a kernel of its own that also turned autodiff's -0.0 into 0.0 (d cos(x)/dx at 0 is -0.0).
    from generated.torch import sincos

    x = torch.tensor([0.0, 1.0, -2.0], dtype=torch.float64, requires_grad=True)
    for output, derivative in (("sin", torch.cos), ("cos", lambda x: -torch.sin(x))):
        value = sincos(x)[output]
        with AtenOps() as ops:
            (gradient,) = torch.autograd.grad(value, x, torch.ones_like(value))
        expected = derivative(x.detach())
        assert torch.equal(gradient, expected) and torch.equal(torch.signbit(gradient), torch.signbit(expected))
        assert "add" not in ops.kernels and len(ops.kernels) <= 3, ops.kernels


@pytest.mark.parametrize(
    ("name", "composite"),
    [("f_mish", lambda x: x * torch.tanh(torch.nn.functional.softplus(x)))],
)
def test_a_tanh_s_derivative_is_torch_s_tanh_backward(name, composite):
    # `a * (1 - t**2)` with t a tanh was three kernels (the square, the difference, the product): under
    # torch.func mish's tangent ran 11 kernels to autodiff's 8, tanh's 4 to 2; aten's tanh_backward(a, t) is one.
    # (f_tanh's own derivative is 4 sigmoid(2x) sigmoid(-2x) since stop 43: 1 - t**2 loses its tails.)
    function = getattr(importlib.import_module(f"generated.torch.{name}"), name)
    x = torch.linspace(-3, 3, 16, dtype=torch.float64)
    with AtenOps() as generated:
        tangent = torch.func.jvp(function, (x,), (torch.ones_like(x),))[1]
    with AtenOps() as autodiff:
        expected = torch.func.jvp(composite, (x,), (torch.ones_like(x),))[1]
    torch.testing.assert_close(tangent, expected, rtol=1e-13, atol=1e-15)
    assert len(generated.kernels) <= len(autodiff.kernels), (generated.kernels, autodiff.kernels)
    assert "tanh_backward" in generated.kernels


def _eager_cases():
    from benchmarks.torch_eager import CASES

    return [pytest.param(generated, autodiff, arity, id=name) for name, arity, generated, autodiff, _, _ in CASES]


@pytest.mark.parametrize(("generated", "composite", "arity"), _eager_cases())
def test_a_benchmark_case_s_tangent_runs_no_more_kernels_than_autodiff(generated, composite, arity):
    # An output's tangent is taken from the tangents of the intermediates its forward keeps, which jvp returns
    # anyway (torch.func.hessian reads them), as autodiff chains them: mish's tangent ran 9 kernels to
    # autodiff's 8, sin(x)*exp(-x**2)*y's 21 to 19, each kernel a fresh tensor.  One input broadcasts.
    xs = [torch.linspace(-3, 3, 16, dtype=torch.float64).reshape(4, 4)]
    xs += [torch.linspace(-1, 2, 4, dtype=torch.float64)] * (arity - 1)
    tangents = [torch.cos(x) for x in xs]
    with AtenOps() as ours:
        value, tangent = torch.func.jvp(generated, tuple(xs), tuple(tangents))
    with AtenOps() as autodiff:
        expected_value, expected = torch.func.jvp(composite, tuple(xs), tuple(tangents))
    torch.testing.assert_close(value, expected_value, rtol=1e-13, atol=1e-15)
    torch.testing.assert_close(tangent, expected, rtol=1e-13, atol=1e-15)
    assert len(ours.kernels) <= len(autodiff.kernels), (ours.kernels, autodiff.kernels)


@pytest.mark.parametrize(
    ("name", "composite"),
    [
        ("sin_mul", lambda x, y: torch.sin(x) * y),
        ("sin_exp_mul", lambda x, y: torch.sin(x) * torch.exp(-x * x) * y),
        ("f_hypot", torch.hypot),
        ("f_pow", torch.pow),
    ],
)
def test_an_input_held_constant_adds_no_term_to_the_tangent(name, composite):
    # Forward mode in y alone: x's tangent was a zero (materialised by torch, or zeros_like in jvp), and zero times
    # x's partial, infinite where y is, is nan where autodiff, which has no term for x, gives sin(x) (the accuracy
    # check's forward mode found the class: split3's dc/dx, nan where exp(x) overflows).  Both ways round.
    function = getattr(importlib.import_module(f"generated.torch.{name}"), name)
    x = torch.tensor([1.0, 2.0, 0.5], dtype=torch.float64)
    y = torch.tensor([math.inf, 3.0, 1e308], dtype=torch.float64)
    # In x alone at y = inf, sin_exp_mul's tangent chained through its saved exp and sin was (-inf) + inf = nan
    # where each term took y before the sum (autodiff's of `sin(x) * exp(-x**2) * y`: the sum times y, -inf).
    for alone, primal in ((lambda f: lambda y: f(x, y), y), (lambda f: lambda x: f(x, y), x)):
        expected = torch.func.jvp(alone(composite), (primal,), (torch.ones_like(primal),))[1]
        if name == "f_hypot" and primal is y:
            # torch's own d/dy at y = inf is y / hypot(x, y) = inf / inf, nan; the partial's limit there is 1.
            expected = torch.where(torch.isinf(y), 1.0, expected)
        tangent = torch.func.jvp(alone(function), (primal,), (torch.ones_like(primal),))[1]
        torch.testing.assert_close(tangent, expected, rtol=1e-13, atol=0, equal_nan=True)
