"""x**y's partials in the runtime, `power_slope` (y x**(y - 1)) and `power_log` (xlogy(x**y, x)): differentiated by
the registry's partials, each computed whole, right at zeros, subnormals and where a power overflows.

Autodiff of the partials as expressions was 0 * inf at y = 0 beside a tiny x (x**0's second derivative, 0),
y (y - 1) times an overflowed x**(y - 2) at (1e-160, 1e-20) (-inf for -1e300), y (y - 1) = inf times
0.5**1e200 = 0, and log(x) times x**y log(x), -inf * 0, at x = 0 beside y > 0.
"""

import math

import jax
import mpmath
import pytest
import sympy as sp
import torch

from rulegen.derive import functions as fn
from rulegen.derive.forms import canonical

jax.config.update("jax_enable_x64", True)


def _in_x(x: mpmath.mpf, y: mpmath.mpf) -> mpmath.mpf:
    """d2/dx2 x**y = y (y - 1) x**(y - 2), 0 where y is 0 (x**0 is 1), its limit at x = 0."""
    if y == 0:
        return mpmath.mpf(0)
    if x == 0 and y < 2:
        return mpmath.inf * mpmath.sign(y * (y - 1))
    return y * (y - 1) * x ** (y - 2)


def _in_y(x: mpmath.mpf, y: mpmath.mpf) -> mpmath.mpf:
    """d2/dy2 x**y = x**y log(x)**2, its limit at x = 0: 0 beside y > 0, inf beside y <= 0."""
    if x == 0:
        return mpmath.mpf(0) if y > 0 else mpmath.inf
    return x**y * mpmath.log(x) ** 2


def _mixed(x: mpmath.mpf, y: mpmath.mpf) -> mpmath.mpf:
    """d2/dxdy x**y = x**(y - 1) (1 + y log(x)), its limit at x = 0 (0 beside y > 1)."""
    if x == 0:
        return mpmath.mpf(0) if y > 1 else (-mpmath.inf if y > 0 else mpmath.inf)
    return x ** (y - 1) * (1 + y * mpmath.log(x))


#: (x, y) where autodiff of the partials was wrong (see above), and ordinary points; no subnormal (XLA reads one
#: as 0 on the CPU).
POINTS = [(1e-200, 0.0), (1e-160, 1e-20), (0.5, 1e200), (0.0, 2.0), (0.0, 0.0), (0.0, -1.5), (3.0, 2.5), (-2.0, 3.0)]


def _undefined(order: str, x: float, y: float) -> bool:
    """Where a second derivative has no value to compare with: in y below x = 0 ((-2)**y is real at integers y
    alone), and in x at (0, 0), x**0's 0 times 0**-2, nan to the runtime as to the frameworks' own."""
    return (order != "in x" and x < 0) or (order == "in x" and x == 0 and y == 0)


def _exact(f, x: float, y: float) -> float:
    with mpmath.workdps(60):
        return float(f(mpmath.mpf(x), mpmath.mpf(y)))


def _agrees(got: float, exact: float) -> bool:
    if math.isinf(exact) or exact == 0:
        return got == exact
    return abs(got - exact) <= 1e-14 * abs(exact)


#: Each second derivative as a derivative of one partial: (the partial, the input it is differentiated in).
SECOND = {"in x": ("power_slope", 0, _in_x), "in y": ("power_log", 1, _in_y), "mixed": ("power_slope", 1, _mixed)}


@pytest.mark.parametrize("order", sorted(SECOND))
@pytest.mark.parametrize(("x", "y"), POINTS)
def test_jax_second_derivatives_of_a_power_are_the_registry_s(order, x, y):
    from rulegen.runtime.jax import _special

    name, argnum, exact = SECOND[order]
    if _undefined(order, x, y):
        pytest.skip("no value there: no derivative in y below x = 0, 0 * inf at x = 0, y = 0")
    got = float(jax.grad(getattr(_special, name), argnums=argnum)(x, y))
    assert _agrees(got, _exact(exact, x, y)), (order, x, y, got)


@pytest.mark.parametrize("order", sorted(SECOND))
@pytest.mark.parametrize(("x", "y"), [*POINTS, (5e-324, 0.0), (5e-324, 2.2250738585072014e-308)])
def test_torch_second_derivatives_of_a_power_are_the_registry_s(order, x, y):
    from rulegen.runtime.torch import _special

    name, argnum, exact = SECOND[order]
    if _undefined(order, x, y):
        pytest.skip("no value there: no derivative in y below x = 0, 0 * inf at x = 0, y = 0")
    args = [torch.tensor(v, dtype=torch.float64) for v in (x, y)]
    got = float(torch.func.grad(getattr(_special, name), argnums=argnum)(*args))
    assert _agrees(got, _exact(exact, x, y)), (order, x, y, got)


def test_the_mixed_partial_is_the_same_from_either_partial():
    from rulegen.runtime.jax import _special

    for x, y in [(3.0, 2.5), (0.0, 2.0), (0.7, -1.5)]:
        from_slope = float(jax.grad(_special.power_slope, argnums=1)(x, y))
        from_log = float(jax.grad(_special.power_log, argnums=0)(x, y))
        assert from_slope == from_log


def test_a_power_s_partials_are_written_as_the_runtime_s():
    x, y = sp.symbols("x y", real=True)
    assert canonical(y * x ** (y - 1)) == fn.power_slope(x, y)
    assert canonical(x**y * sp.log(x)) == fn.power_log(x, y)
    # A number's power keeps xlogy: a function of x alone, which autodiff differentiates as it is.
    assert canonical(x**2 * sp.log(x)) == fn.xlogy(x**2, x)


def test_the_stated_partials_are_the_derivatives_of_the_power():
    x, y = sp.symbols("x y", positive=True)
    for f, expr in ((fn.power_slope(x, y), y * x ** (y - 1)), (fn.power_log(x, y), x**y * sp.log(x))):
        for s in (x, y):
            stated = sp.diff(f, s).replace(fn.power_slope, lambda b, p: p * b ** (p - 1))
            stated = stated.replace(fn.power_log, lambda b, p: b**p * sp.log(b))
            assert sp.simplify(stated - sp.diff(expr, s)) == 0
