"""hypot's and atan2's partials in the runtime, `hypot_slope` and `atan2_slope`: differentiated by the registry's
partials at every order, right at zeros, subnormals and infinities.

Autodiff of the scaled quotients was inf * 0 where a partial overflows beside a zero input (atan2's second
derivative at (0, 5e-324): nan, where it is 0) and inf / inf at an infinite input (hypot's at (0, inf)).
"""

import math

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
import torch
import torch.autograd.forward_ad as forward_ad

from rulegen.derive import functions as fn

jax.config.update("jax_enable_x64", True)

TINY = 5e-324
#: (x, y) pairs: a subnormal beside a zero, an infinity beside a zero, the smallest normals, ordinary ones.
PAIRS = [(0.0, TINY), (TINY, 0.0), (0.0, math.inf), (math.inf, 0.0), (2.2e-308, TINY), (0.6, -1.7), (3e200, 1e199)]
#: The same in JAX without the subnormals, which XLA on the CPU reads as zeros: a zero beside the smallest normal.
NORMAL_PAIRS = [(0.0, 2.2250738585072014e-308), (2.2250738585072014e-308, 0.0), *PAIRS[2:4], *PAIRS[5:]]


def _exact(f, x: float, y: float) -> float:
    """f's value at (x, y) in mpmath, the registry's partials at an infinite input (their limits there)."""
    with mpmath.workdps(60):
        return float(f(mpmath.mpf(x), mpmath.mpf(y)))


def _hypot_xx(x, y):
    # d/dx (x / h) = y**2 / h**3, via the registry's statement: hypot_slope(y, x) * atan2_slope(y, x).
    return fn._mp_hypot_slope(y, x) * fn._mp_atan2_slope(y, x)


def _atan2_uv(u, v):
    return -2 * fn._mp_atan2_slope(u, v) * fn._mp_atan2_slope(v, u)


def _atan2_uu(u, v):
    return fn._mp_atan2_slope(v, u) ** 2 - fn._mp_atan2_slope(u, v) ** 2


def _close(got: float, exact: float) -> bool:
    if math.isinf(exact) or exact == 0:
        return got == exact
    return abs(got - exact) <= 1e-14 * abs(exact)


@pytest.mark.parametrize(
    ("name", "argnum", "exact"),
    [("hypot_slope", 0, _hypot_xx), ("atan2_slope", 0, _atan2_uu), ("atan2_slope", 1, _atan2_uv)],
)
def test_jax_partials_are_differentiated_by_the_registry(name, argnum, exact):
    from rulegen.runtime.jax import _special

    f = getattr(_special, name)
    for x, y in NORMAL_PAIRS:
        args = (jnp.float64(x), jnp.float64(y))
        got = float(jax.grad(f, argnums=argnum)(*args))
        want = _exact(exact, x, y)
        assert _close(got, want), (name, argnum, x, y, got, want)


@pytest.mark.parametrize(
    ("name", "argnum", "exact"),
    [("hypot_slope", 0, _hypot_xx), ("atan2_slope", 0, _atan2_uu), ("atan2_slope", 1, _atan2_uv)],
)
def test_torch_partials_are_differentiated_by_the_registry(name, argnum, exact):
    from rulegen.runtime.torch import _special

    f = getattr(_special, name)
    for x, y in PAIRS:
        args = [torch.tensor(x, dtype=torch.float64), torch.tensor(y, dtype=torch.float64)]
        args[argnum].requires_grad_(True)
        (got,) = torch.autograd.grad(f(*args), args[argnum])
        want = _exact(exact, x, y)
        assert _close(float(got), want), (name, argnum, x, y, float(got), want)
        # Forward mode: only the varied input has a tangent, and the held one adds no 0 * inf.
        with forward_ad.dual_level():
            duals = [
                forward_ad.make_dual(a.detach(), torch.ones(())) if k == argnum else a.detach()
                for k, a in enumerate(args)
            ]
            tangent = forward_ad.unpack_dual(f(*duals)).tangent
        assert _close(float(tangent), want), (name, argnum, x, y, float(tangent), want)


def test_the_atan2_second_derivative_was_nan_beside_a_subnormal():
    # d2/dy2 atan2(y, x) at (0, 5e-324): -2 x y / (x**2 + y**2)**2 = 0, where the partial x / (x**2 + y**2) is inf.
    from rulegen.runtime.torch._special import atan2_slope

    y = torch.tensor(0.0, dtype=torch.float64, requires_grad=True)
    x = torch.tensor(TINY, dtype=torch.float64)
    (got,) = torch.autograd.grad(atan2_slope(x, y), y)
    assert float(got) == 0.0
    # hypot's second derivative at (0, 0): y**2 / h**3's limit, inf; at (0, inf), 0.
    from rulegen.runtime.jax._special import hypot_slope

    assert float(jax.grad(hypot_slope)(0.0, 0.0)) == math.inf
    assert float(jax.grad(hypot_slope)(0.0, math.inf)) == 0.0


def test_the_value_where_nothing_differentiates_it_is_the_functions():
    from rulegen.runtime.torch._special import atan2_slope, hypot_slope

    x = torch.tensor([0.0, 3.0, -math.inf, 1e-310], dtype=torch.float64)
    y = torch.tensor([0.0, 4.0, 2.0, 1e-310], dtype=torch.float64)
    with torch.no_grad():
        h, q = hypot_slope(x, y), atan2_slope(x, y)
    np.testing.assert_allclose(h.numpy(), [0.0, 0.6, -1.0, math.sqrt(0.5)], rtol=1e-15)
    np.testing.assert_allclose(q.numpy()[1:3], [3 / 25, 0.0], rtol=1e-15)
    assert math.isnan(q[0]) and q[3] == pytest.approx(0.5 / 1e-310, rel=1e-12)


@pytest.mark.parametrize("joint", ["plane_slopes", "hypot_slopes", "atan2_slopes"])
@pytest.mark.parametrize("varied", [0, 1])
def test_the_slopes_of_a_point_together_are_differentiated_as_each_alone(joint, varied):
    # plane_slopes(x, y): hypot_slope(x, y), hypot_slope(y, x), atan2_slope(x, y), atan2_slope(y, x) on one
    # scaling (hypot_slopes the first two, atan2_slopes the last two), each output's derivatives the registry's.
    from rulegen.runtime.torch import _special
    from rulegen.runtime.torch._special import atan2_slope, hypot_slope

    f = getattr(_special, joint)
    x = torch.tensor([p[0] for p in PAIRS] + [0.0, -1e4], dtype=torch.float64)
    y = torch.tensor([p[1] for p in PAIRS] + [0.0, 0.7], dtype=torch.float64)
    every = (hypot_slope, lambda a, b: hypot_slope(b, a), atan2_slope, lambda a, b: atan2_slope(b, a))
    alone = {"plane_slopes": every, "hypot_slopes": every[:2], "atan2_slopes": every[2:]}[joint]
    # Differentiated, each output is the function's own, at an infinite input too (its limit).
    values = f(x.clone().requires_grad_(), y)
    for value, g in zip(values, alone, strict=True):
        torch.testing.assert_close(value.detach(), g(x, y), rtol=1e-15, atol=0, equal_nan=True)
    # Where nothing differentiates them, the same quotients on one scaling, inline: at an infinite input, inf / inf
    # where the function's own is its limit.
    with torch.no_grad():
        for value, g in zip(f(x, y), alone, strict=True):
            own = g(x, y)
            same = (value == own) | (torch.isnan(value) & torch.isnan(own))
            assert (same | (torch.isnan(value) & ~(torch.isfinite(x) & torch.isfinite(y)))).all()
            torch.testing.assert_close(value[~torch.isnan(value)], own[~torch.isnan(value)], rtol=1e-15, atol=0)
    for k, g in enumerate(alone):
        got = [x.clone().requires_grad_(varied == 0), y.clone().requires_grad_(varied == 1)]
        want = [x.clone().requires_grad_(varied == 0), y.clone().requires_grad_(varied == 1)]
        (reverse,) = torch.autograd.grad(f(*got)[k].sum(), got[varied])
        (expected,) = torch.autograd.grad(g(*want).sum(), want[varied])
        torch.testing.assert_close(reverse, expected, rtol=1e-15, atol=0, equal_nan=True)

        def along(a, k=k):
            return f(*((a, y) if varied == 0 else (x, a)))[k]

        (_, forward) = torch.func.jvp(along, ((x, y)[varied],), (torch.ones_like(x),))
        torch.testing.assert_close(forward, expected, rtol=1e-15, atol=0, equal_nan=True)


@pytest.mark.parametrize("joint", ["plane_slopes", "hypot_slopes", "atan2_slopes"])
def test_jax_slopes_of_a_point_together_are_each_alone(joint):
    # One custom_jvp for a point's partials: eager JAX computed each call's scaling anew (polar's gradient 1.95 times
    # main's CPU time); the outputs and their derivatives are those of the functions one by one.
    from rulegen.runtime.jax import _special

    f = getattr(_special, joint)
    x = jnp.array([p[0] for p in NORMAL_PAIRS] + [0.0, -1e4])
    y = jnp.array([p[1] for p in NORMAL_PAIRS] + [0.0, 0.7])
    h, q = _special.hypot_slope, _special.atan2_slope
    every = (h, lambda a, b: h(b, a), q, lambda a, b: q(b, a))
    alone = {"plane_slopes": every, "hypot_slopes": every[:2], "atan2_slopes": every[2:]}[joint]
    for k, g in enumerate(alone):
        assert jnp.array_equal(f(x, y)[k], g(x, y), equal_nan=True)
        for varied in (0, 1):
            got = jax.vmap(jax.grad(lambda a, b, k=k: f(a, b)[k], argnums=varied))(x, y)
            want = jax.vmap(jax.grad(g, argnums=varied))(x, y)
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-15, atol=0)


# -------------------------------------------------------------------- the generated rules: one scaling, both orders


def _backward_kernels(f, *args):
    from tests.dispatch import AtenOps

    leaves = [a.clone().requires_grad_() for a in args]
    outs = f(*leaves)
    outs = (outs,) if isinstance(outs, torch.Tensor) else tuple(outs)
    with AtenOps() as recorded:
        torch.autograd.backward(outs, [torch.ones_like(o) for o in outs])
    return recorded.kernels


@pytest.mark.parametrize("name", ["polar", "f_hypot", "f_atan2"])
def test_a_first_order_backward_scales_its_inputs_once(name):
    # The partials of one point share one binade and one hypot of the scaled inputs where nothing differentiates
    # them: with each partial the runtime's call, scaling on its own, polar's backward ran 4 binades (log2 each)
    # and 127 aten ops where the inline quotients ran 35.
    import generated.torch as gen

    x = torch.linspace(0.5, 2.0, 16)
    kernels = _backward_kernels(getattr(gen, name), x, x.flip(0))
    assert kernels.count("log2") == 1 and kernels.count("hypot") == 1
    if name == "polar":
        assert len(kernels) <= 35


def test_a_differentiated_backward_is_the_runtime_functions_right_at_special_values():
    # create_graph: the backward's partials are differentiated, by the registry's derivatives of hypot_slope and
    # atan2_slope: d2/dy2 atan2(y, x) at (0, 5e-324) is 0 (autodiff of the scaled quotient: inf * 0, nan), and
    # d2/dx2 hypot at (0, inf) is 0 (inf / inf, nan).
    import generated.torch as gen

    def second(f, args, varied):
        leaves = [torch.tensor(a, dtype=torch.float64, requires_grad=k == varied) for k, a in enumerate(args)]
        (first,) = torch.autograd.grad(f(*leaves), leaves[varied], create_graph=True)
        (got,) = torch.autograd.grad(first, leaves[varied])
        return float(got)

    assert second(gen.f_atan2, (0.0, TINY), 0) == 0.0
    assert second(gen.f_hypot, (0.0, math.inf), 0) == 0.0
    assert second(gen.f_hypot, (0.6, -1.7), 0) == pytest.approx(1.7**2 / math.hypot(0.6, 1.7) ** 3, rel=1e-14)
    # Where nothing differentiates it, the first derivative is the same as where something does.
    x = torch.tensor([0.0, 0.6, TINY, 3e200], dtype=torch.float64)
    y = torch.tensor([TINY, -1.7, TINY, 1e199], dtype=torch.float64)
    leaves = [x.clone().requires_grad_(), y.clone().requires_grad_()]
    for output in (0, 1):
        plain = torch.autograd.grad(gen.polar(*leaves)[output].sum(), leaves)
        recorded = torch.autograd.grad(gen.polar(*leaves)[output].sum(), leaves, create_graph=True)
        for a, b in zip(plain, recorded, strict=True):
            torch.testing.assert_close(a, b.detach(), rtol=1e-15, atol=0)
