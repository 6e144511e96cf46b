"""Snippet, host and torch-only rules, as users call them: the acceptance behaviours of each route."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from tests.conftest import built_package

jax.config.update("jax_enable_x64", True)


def _newton(fixed_point, a):
    return fixed_point(lambda a, x: 0.5 * (x + a / x), a, a)


def test_clip_gradient_clips_the_gradient_in_both_backends(built):
    jax_pkg, torch_pkg, _ = built
    t = np.linspace(-3.0, 3.0, 13)
    expected = np.clip(np.cos(t), -0.75, 0.75)
    got = jax.vmap(jax.grad(lambda t: jnp.sin(jax_pkg.clip_gradient(-0.75, 0.75, t))))(jnp.asarray(t))
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    leaf = torch.tensor(t, requires_grad=True)
    lo, hi = torch.tensor(-0.75, dtype=torch.float64), torch.tensor(0.75, dtype=torch.float64)
    torch.sin(torch_pkg.clip_gradient(lo, hi, leaf)).sum().backward()
    np.testing.assert_allclose(leaf.grad.numpy(), expected, rtol=1e-12)


def test_clip_gradient_refuses_forward_mode_by_name(built):
    _, torch_pkg, _ = built
    x = torch.ones(3, dtype=torch.float64)
    lo, hi = torch.tensor(-0.5, dtype=torch.float64), torch.tensor(0.5, dtype=torch.float64)
    with pytest.raises(NotImplementedError, match="clip_gradient has no forward mode"):
        torch.func.jvp(lambda x: torch_pkg.clip_gradient(lo, hi, x), (x,), (x,))


def test_numpy_sort_gradient_is_ones_and_vmap_sorts_rows(built):
    jax_pkg, torch_pkg, _ = built
    x = np.array([[3.0, 1.0, 2.0], [0.5, -1.0, 4.0]])
    np.testing.assert_array_equal(jax.grad(lambda x: jax_pkg.numpy_sort(x).sum())(jnp.asarray(x)), np.ones_like(x))
    np.testing.assert_array_equal(jax.vmap(jax_pkg.numpy_sort)(jnp.asarray(x)), np.sort(x, axis=-1))
    np.testing.assert_array_equal(jax.jit(jax.vmap(jax_pkg.numpy_sort))(jnp.asarray(x)), np.sort(x, axis=-1))
    xt = torch.from_numpy(x)
    np.testing.assert_array_equal(torch.func.grad(lambda x: torch_pkg.numpy_sort(x).sum())(xt), np.ones_like(x))
    np.testing.assert_array_equal(torch.func.vmap(torch_pkg.numpy_sort)(xt), np.sort(x, axis=-1))


def test_numpy_sort_forward_mode_and_jacobians_are_the_permutation(built):
    jax_pkg, torch_pkg, _ = built
    x = np.array([3.0, 1.0, 2.0])
    permutation = np.eye(3)[np.argsort(x)]
    for jac in (jax.jacfwd, jax.jacrev):
        np.testing.assert_array_equal(jac(jax_pkg.numpy_sort)(jnp.asarray(x)), permutation)
    for jac in (torch.func.jacfwd, torch.func.jacrev):
        np.testing.assert_array_equal(jac(torch_pkg.numpy_sort)(torch.from_numpy(x)).numpy(), permutation)
    t = np.array([0.1, 0.2, 0.3])
    _, tangent = jax.jvp(jax_pkg.numpy_sort, (jnp.asarray(x),), (jnp.asarray(t),))
    np.testing.assert_array_equal(tangent, t[np.argsort(x)])
    _, tangent = torch.func.jvp(torch_pkg.numpy_sort, (torch.from_numpy(x),), (torch.from_numpy(t),))
    np.testing.assert_array_equal(tangent.numpy(), t[np.argsort(x)])


def test_newton_sqrt_through_fixed_point_to_second_order(built):
    jax_pkg, torch_pkg, _ = built
    value, first, second = 1.41421356, 0.35355339, -0.08838835
    newton = lambda a: _newton(jax_pkg.fixed_point, a)  # noqa: E731
    np.testing.assert_allclose(newton(2.0), value, atol=1e-8)
    np.testing.assert_allclose(jax.grad(newton)(2.0), first, atol=1e-8)
    np.testing.assert_allclose(jax.grad(jax.grad(newton))(2.0), second, atol=1e-8)
    a = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    y = _newton(torch_pkg.fixed_point, a)
    (g,) = torch.autograd.grad(y, a, create_graph=True)
    (h,) = torch.autograd.grad(g, a)
    np.testing.assert_allclose([y.item(), g.item(), h.item()], [value, first, second], atol=1e-8)


@pytest.mark.parametrize("name", ["softmax", "logsumexp"])
def test_snippet_vjp_rules_match_autodiff_to_second_order(built, name):
    jax_pkg, torch_pkg, _ = built
    reference = {"softmax": jax.nn.softmax, "logsumexp": jax.nn.logsumexp}[name]
    x = np.random.default_rng(0).normal(size=(2, 5))
    f = getattr(jax_pkg, name)

    def total(g):
        return lambda x: (g(x) ** 2).sum()

    for transform in (jax.grad, lambda h: jax.hessian(h), lambda h: jax.jacfwd(jax.grad(h))):
        np.testing.assert_allclose(transform(total(f))(x[0]), transform(total(reference))(x[0]), rtol=1e-10)
    np.testing.assert_allclose(jax.vmap(jax.grad(total(f)))(x), jax.vmap(jax.grad(total(reference)))(x), rtol=1e-10)
    g = getattr(torch_pkg, name)
    torch_reference = {"softmax": lambda x: torch.softmax(x, -1), "logsumexp": lambda x: torch.logsumexp(x, -1)}[name]
    xt = torch.from_numpy(x[0])
    for transform in (torch.func.grad, torch.func.hessian):
        got = transform(lambda x: (g(x) ** 2).sum())(xt)
        np.testing.assert_allclose(got, transform(lambda x: (torch_reference(x) ** 2).sum())(xt), rtol=1e-10)
    leaf = torch.from_numpy(x).requires_grad_()
    assert torch.autograd.gradgradcheck(g, (leaf,))


@pytest.mark.parametrize("shift", [0.0, -3e2, 1e4, -1e6])
def test_logsumexp_derivatives_are_as_accurate_as_autodiff_at_large_logits(built, shift):
    """float32 errors in eps against float64, logits near `shift`: `exp(x - out)` (torch's own backward)
    carries the output's rounding error, ulp(out) in the exponent, where autodiff's `exp(x - m) / s` does not."""
    jax_pkg, torch_pkg, _ = built
    rng = np.random.default_rng(7)
    x = (shift + 3 * rng.standard_normal((200, 64))).astype(np.float32)
    dx = rng.standard_normal((200, 64)).astype(np.float32)
    exact = np.asarray(jax.grad(lambda x: jax.nn.logsumexp(x, -1).sum())(jnp.asarray(x, jnp.float64)))

    def grad_eps(got):
        got = np.asarray(got, np.float64)
        kept = exact > np.finfo(np.float32).tiny
        return float(np.max(np.abs(got - exact)[kept] / exact[kept]) / np.finfo(np.float32).eps)

    def jvp_eps(got):
        # Against the sum of the terms' magnitudes: a tangent that cancels has no relative error to speak of.
        error = np.abs(np.asarray(got, np.float64) - (exact * dx).sum(-1)) / (exact * np.abs(dx)).sum(-1)
        return float(np.max(error) / np.finfo(np.float32).eps)

    def composite(x):
        m = jax.lax.stop_gradient(jnp.max(x, -1, keepdims=True))
        return jnp.squeeze(m, -1) + jnp.log(jnp.sum(jnp.exp(x - m), -1))

    leaf = torch.from_numpy(x).requires_grad_()
    torch_pkg.logsumexp(leaf).sum().backward()
    errors = {
        "jax grad": grad_eps(jax.grad(lambda x: jax_pkg.logsumexp(x).sum())(jnp.asarray(x))),
        "torch grad": grad_eps(leaf.grad),
        "jax jvp": jvp_eps(jax.jvp(jax_pkg.logsumexp, (jnp.asarray(x),), (jnp.asarray(dx),))[1]),
        "torch jvp": jvp_eps(torch.func.jvp(torch_pkg.logsumexp, (torch.from_numpy(x),), (torch.from_numpy(dx),))[1]),
    }
    bars = {
        "grad": grad_eps(jax.grad(lambda x: composite(x).sum())(jnp.asarray(x))) + 2,
        "jvp": jvp_eps(jax.jvp(composite, (jnp.asarray(x),), (jnp.asarray(dx),))[1]) + 2,
    }
    assert {k: v for k, v in errors.items() if v > bars[k.split()[1]]} == {}, (errors, bars)


def test_static_callable_is_passed_through_both_backends(built):
    jax_pkg, torch_pkg, _ = built

    def cube(x):
        return x * x * x

    def dcube(x):
        return 3 * x * x

    x = np.array([0.5, -1.5, 2.0])
    np.testing.assert_allclose(jax.grad(lambda x: jax_pkg.pointwise(cube, dcube, x).sum())(x), 3 * x**2)
    np.testing.assert_allclose(jax.jit(jax.grad(lambda x: jax_pkg.pointwise(cube, dcube, x).sum()))(x), 3 * x**2)
    np.testing.assert_allclose(jax.hessian(lambda x: jax_pkg.pointwise(cube, dcube, x).sum())(x), np.diag(6 * x))
    grad = torch.func.grad(lambda x: torch_pkg.pointwise(cube, dcube, x).sum())(torch.from_numpy(x))
    np.testing.assert_allclose(grad.numpy(), 3 * x**2)


def test_host_elementwise_rule_batches_once_and_differentiates(built):
    import scipy.special

    jax_pkg, torch_pkg, _ = built
    x = np.linspace(-2.0, 2.0, 6).reshape(2, 3)
    derivative = 2 * x * scipy.special.erfcx(x) - 2 / np.sqrt(np.pi)
    np.testing.assert_allclose(jax.vmap(jax_pkg.scipy_erfcx)(x), scipy.special.erfcx(x), rtol=1e-14)
    np.testing.assert_allclose(jax.grad(lambda x: jax_pkg.scipy_erfcx(x).sum())(x), derivative, rtol=1e-12)
    grad = torch.func.vmap(torch.func.grad(torch_pkg.scipy_erfcx))(torch.from_numpy(x.ravel()))
    np.testing.assert_allclose(grad.numpy(), derivative.ravel(), rtol=1e-12)


def test_torch_only_rule_from_jax_twice_differentiable_and_no_more(built):
    jax_pkg, _, _ = built

    def f(x):
        return jax_pkg.torch_mish(x).sum()

    x = np.array([0.3, -1.2, 2.0])
    xt = torch.from_numpy(x)
    mish = lambda x: torch.nn.functional.mish(x).sum()  # noqa: E731
    np.testing.assert_allclose(jax.grad(f)(x), torch.func.grad(mish)(xt).numpy(), rtol=1e-12)
    second = jax.grad(lambda x: jax.grad(f)(x).sum())(x)
    np.testing.assert_allclose(second, torch.func.grad(lambda x: torch.func.grad(mish)(x).sum())(xt), rtol=1e-12)
    np.testing.assert_allclose(jax.jit(jax.vmap(jax.grad(f)))(x[:, None]).ravel(), jax.grad(f)(x), rtol=1e-12)
    with pytest.raises(TypeError, match="differentiable 2 time"):
        jax.grad(jax.grad(jax.grad(lambda x: jax_pkg.torch_mish(x))))(0.3)


BOTH_BODIES = """
name: both_bodies
doc: A rule whose JVP and VJP differ on purpose, to see which one each mode runs.
inputs: [x, y]
forward:
  python: return x * y
jvp:
  python: return 2.0 * (x_dot * y + x * y_dot)
vjp:
  python: return 3.0 * out_bar * y, 3.0 * out_bar * x
checks:
  true_derivative: false
"""


@pytest.fixture(scope="module")
def both_bodies(tmp_path_factory):
    import importlib

    with built_package(tmp_path_factory.mktemp("both"), BOTH_BODIES, "rg_both"):
        yield importlib.import_module("rg_both.jax"), importlib.import_module("rg_both.torch")


def test_rule_with_both_bodies_runs_each_for_its_own_mode(both_bodies):
    jax_pkg, torch_pkg = both_bodies
    x, y = np.array([0.5, -1.0, 2.0]), np.array([[1.5], [-0.5]])
    jvp_x = 2.0 * np.broadcast_to(y, (2, 3))
    grad_x, grad_y = 3.0 * y.sum() * np.ones(3), 3.0 * x.sum() * np.ones((2, 1))

    def f_jax(x, y):
        return jax_pkg.both_bodies(x, y).sum()

    np.testing.assert_allclose(jax.jvp(jax_pkg.both_bodies, (x, y), (np.ones(3), np.zeros((2, 1))))[1], jvp_x)
    for grad in (jax.grad(f_jax, argnums=(0, 1)), jax.jit(jax.grad(f_jax, argnums=(0, 1)))):
        got = grad(x, y)
        np.testing.assert_allclose(got[0], grad_x)
        np.testing.assert_allclose(got[1], grad_y)
    np.testing.assert_allclose(jax.jacfwd(jax_pkg.both_bodies)(x, y).sum(axis=(0, 1)), 2.0 * y.sum() * np.ones(3))
    np.testing.assert_allclose(jax.jacrev(jax_pkg.both_bodies)(x, y).sum(axis=(0, 1)), grad_x)
    batched = jax.vmap(jax.grad(f_jax), in_axes=(0, None))(np.stack([x, 2 * x]), y)
    np.testing.assert_allclose(batched, np.stack([grad_x, grad_x]))
    # d/dy of the VJP body's x-cotangent 3 * out_bar * y.
    mixed = jax.jacfwd(jax.grad(f_jax), argnums=1)(x, y)
    np.testing.assert_allclose(mixed, 3.0 * np.ones((3, 2, 1)))

    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    _, tangent = torch.func.jvp(torch_pkg.both_bodies, (xt, yt), (torch.ones(3, dtype=torch.float64), 0 * yt))
    np.testing.assert_allclose(tangent.numpy(), jvp_x)
    got = torch.func.grad(lambda x, y: torch_pkg.both_bodies(x, y).sum(), argnums=(0, 1))(xt, yt)
    np.testing.assert_allclose(got[0].numpy(), grad_x)
    np.testing.assert_allclose(got[1].numpy(), grad_y)
    jacobian = torch.func.jacfwd(torch_pkg.both_bodies)(xt, yt)
    np.testing.assert_allclose(jacobian.sum((0, 1)).numpy(), 2.0 * y.sum() * np.ones(3))


def test_l2_normalize_with_both_bodies_matches_autodiff_under_every_transform(built):
    jax_pkg, torch_pkg, _ = built
    x = np.random.default_rng(1).uniform(0.5, 2.0, size=(3, 4))
    weights = np.arange(4.0)

    def reference(x):
        return x / jnp.sqrt(jnp.sum(x * x, axis=-1, keepdims=True))

    def loss(f):
        return lambda x: jnp.sum(jnp.sin(f(x)) * weights)

    transforms = {
        "jvp": lambda f: jax.jvp(f, (x,), (0.3 * np.ones_like(x),))[1],
        "jit(grad)": lambda f: jax.jit(jax.grad(loss(f)))(x),
        "vmap(grad)": lambda f: jax.vmap(jax.grad(loss(f)))(x),
        "jacfwd(vmap)": lambda f: jax.jacfwd(jax.vmap(f))(x),
        "jacrev(vmap)": lambda f: jax.jacrev(jax.vmap(f))(x),
        "vmap(hessian)": lambda f: jax.vmap(jax.hessian(loss(f)))(x),
        "jacrev(jacrev)": lambda f: jax.jacrev(jax.jacrev(f))(x[0]),
        "grad(grad)": lambda f: jax.grad(lambda x: jnp.sum(jax.grad(loss(f))(x) ** 2))(x),
    }
    for name, transform in transforms.items():
        np.testing.assert_allclose(transform(jax_pkg.l2_normalize), transform(reference), rtol=1e-10, err_msg=name)
    leaf = torch.from_numpy(x).requires_grad_()
    assert torch.autograd.gradcheck(torch_pkg.l2_normalize, (leaf,), check_forward_ad=True, check_batched_grad=True)
    assert torch.autograd.gradgradcheck(torch_pkg.l2_normalize, (leaf,))


DAMPED = """
name: damped
doc: A snippet forward with a symbolic VJP in which a static input sits inside a function.
inputs:
  x: {}
  rate: {static: true, default: 0.5}
forward:
  python: return x * math.exp(-rate)
vjp: out_bar * exp(-rate)
"""


def test_symbolic_body_of_a_snippet_rule_reads_a_static_inside_a_function(tmp_path):
    from rulegen.check import run_checks
    from rulegen.spec.rules import read_rules

    path = tmp_path / "damped.yaml"
    path.write_text(DAMPED)
    outcomes = run_checks(read_rules([path]), jobs=1)
    failed = [(o.check, o.detail) for o in outcomes if o.status == "fail"]
    assert not failed, failed
    assert {o.check for o in outcomes if o.status == "pass"} >= {"forward", "jvp_fd", "cross_backend", "vjp_dot"}


@pytest.mark.parametrize("shape", [(3, 0), (), (0, 3)])
def test_softmax_and_logsumexp_take_the_shapes_the_frameworks_own_take(built, shape):
    # An empty last axis raised IndexError (no maximum to shift by), and logsumexp of a 0-d
    # tensor indexed past its shape; torch's own take both, a 0-d tensor as one entry.
    jax_pkg, torch_pkg, _ = built
    x = np.linspace(-1.0, 2.0, int(np.prod(shape))).reshape(shape)
    expected = {
        "softmax": torch.softmax(torch.tensor(x), -1),
        "logsumexp": torch.logsumexp(torch.tensor(x), -1),
    }
    for name, value in expected.items():
        leaf = torch.tensor(x, requires_grad=True)
        got = getattr(torch_pkg, name)(leaf)
        torch.testing.assert_close(got, value)
        got.sum().backward()
        assert leaf.grad.shape == leaf.shape
        got_jax = getattr(jax_pkg, name)(jnp.asarray(x))
        np.testing.assert_allclose(np.asarray(got_jax), value.numpy(), rtol=1e-12)
        grad = jax.grad(lambda x, name=name: getattr(jax_pkg, name)(x).sum())(jnp.asarray(x))
        assert grad.shape == shape


def test_fixed_point_takes_arrays_in_both_backends(built):
    # JAX's while_loop condition was `|x_prev - x| > 1e-6`, a scalar only: an array of
    # `a` raised where the torch body (`torch.any`) took it.
    jax_pkg, torch_pkg, _ = built
    a = np.array([[0.5, 2.0], [3.0, 4.0]])
    np.testing.assert_allclose(np.asarray(_newton(jax_pkg.fixed_point, jnp.asarray(a))), np.sqrt(a))
    grad = jax.grad(lambda a: _newton(jax_pkg.fixed_point, a).sum())(jnp.asarray(a))
    np.testing.assert_allclose(np.asarray(grad), 0.5 / np.sqrt(a), rtol=1e-6)
    np.testing.assert_allclose(_newton(torch_pkg.fixed_point, torch.tensor(a)).numpy(), np.sqrt(a))


def test_torch_clip_gradient_returns_a_tensor_of_its_own(built):
    # The forward returned its input as it is, which torch hands back as a view of it.
    _, torch_pkg, _ = built
    x = torch.linspace(-1.0, 1.0, 5, requires_grad=True)
    out = torch_pkg.clip_gradient(-0.5, 0.5, x)
    assert not out._is_view() and out.data_ptr() != x.data_ptr()
