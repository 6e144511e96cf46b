"""beta's partial in the runtime, `beta_slope` (`_beta.py`): differentiated by the registry's partial in a
(`functions.beta_curvature_by_cases`), computed whole, right where beta over- or underflows.

Autodiff of beta_slope's cases was inf * 0 and inf - inf there: nan at a = 2.2e-308 beside b = 0.5 (2 / a**3,
inf), at a = 1e300 beside b = 0 (-tetragamma(a), 0), and 2e-6 relative off at (1.5, 1e200).
"""

import math

import jax
import mpmath
import pytest
import torch

jax.config.update("jax_enable_x64", True)


def _curvature(a: mpmath.mpf, b: mpmath.mpf) -> mpmath.mpf:
    """d2/da2 beta(a, b) = beta(a, b) (d**2 + t), d = psi(a) - psi(a + b), t = psi1(a) - psi1(a + b); its limit
    -psi2(a) at b = 0."""
    if b == 0:
        return -mpmath.psi(2, a)
    d = mpmath.psi(0, a) - mpmath.psi(0, a + b)
    return mpmath.beta(a, b) * (d * d + mpmath.psi(1, a) - mpmath.psi(1, a + b))


def _mixed(a: mpmath.mpf, b: mpmath.mpf) -> mpmath.mpf:
    """d2/dadb beta(a, b) = beta(a, b) (d e - psi1(a + b)), e = psi(b) - psi(a + b)."""
    d, e = mpmath.psi(0, a) - mpmath.psi(0, a + b), mpmath.psi(0, b) - mpmath.psi(0, a + b)
    return mpmath.beta(a, b) * (d * e - mpmath.psi(1, a + b))


#: (a, b) where autodiff of the cases was wrong (see above), ordinary points, and both reflections (a <= -1/2
#: beside b > 0 with a + b < 0, and the other way about).  No subnormal: XLA reads one as 0 on the CPU.
POINTS = [
    (2.2250738585072014e-308, 0.5),
    (-1e-200, 0.5),
    (1e300, 0.0),
    (1.5, 1e200),
    (2.0, 1.29e20),
    (0.7, 2.5),
    (3.0, -0.4),
    (-2.7, 0.4),
    (0.3, -2.6),
    (1e-60, 1e-60),
    (5.0, 1e-12),
]


def _exact(f, a: float, b: float) -> float:
    from rulegen.derive.functions import _spanning_precision

    with mpmath.workdps(40), _spanning_precision(a, b):
        return float(f(mpmath.mpf(a), mpmath.mpf(b)))


def _agrees(got: float, exact: float, rtol: float = 1e-12) -> bool:
    if math.isinf(exact) or exact == 0:
        return got == exact
    return abs(got - exact) <= rtol * abs(exact)


def _jax_second(argnum: int, points: list[tuple[float, float]]) -> list[float]:
    from rulegen.runtime.jax import _beta

    # Every point in one call: beta_slope's cases are thousands of eager operations, run once for all of them. The
    # code is elementwise, so the gradient of the sum is each point's own.
    columns = [jax.numpy.asarray(column, dtype=jax.numpy.float64) for column in zip(*points, strict=True)]

    def total(value):
        args = [value if k == argnum else column for k, column in enumerate(columns)]
        return _beta.beta_slope(*args).sum()

    return [float(v) for v in jax.grad(total)(columns[argnum])]


def _torch_second(argnum: int, points: list[tuple[float, float]]) -> list[float]:
    from rulegen.runtime.torch import _beta

    columns = [torch.tensor(column, dtype=torch.float64) for column in zip(*points, strict=True)]
    columns[argnum].requires_grad_(True)
    (grad,) = torch.autograd.grad(_beta.beta_slope(*columns).sum(), columns[argnum])
    return grad.tolist()


def _wrong(second, argnum: int, exact, points: list[tuple[float, float]], rtol: float) -> list[tuple[float, ...]]:
    got = second(argnum, points)
    return [
        (a, b, value, want)
        for (a, b), value in zip(points, got, strict=True)
        if not _agrees(value, want := _exact(exact, a, b), rtol)
    ]


@pytest.mark.parametrize("second", [_jax_second, _torch_second], ids=["jax", "torch"])
def test_beta_s_second_derivative_in_a_is_the_registry_s(second):
    assert not _wrong(second, 0, _curvature, POINTS, rtol=1e-12)


@pytest.mark.parametrize("second", [_jax_second, _torch_second], ids=["jax", "torch"])
def test_beta_s_mixed_second_derivative_is_autodiff_of_the_cases(second):
    points = [(0.7, 2.5), (3.0, -0.4), (-2.7, 0.4), (0.3, -2.6), (1.5, 1e5)]
    assert not _wrong(second, 1, _mixed, points, rtol=1e-10)


@pytest.mark.parametrize("second", [_jax_second, _torch_second], ids=["jax", "torch"])
def test_nan_in_gives_nan_out(second):
    assert all(math.isnan(v) for v in second(0, [(math.nan, 0.5), (0.5, math.nan)]))


def test_the_third_derivative_is_autodiff_of_the_stated_curvature():
    from rulegen.runtime.jax import _beta

    # d3/da3 beta(a, b) at an ordinary point, through the stated partial's own cases.
    got = float(jax.grad(jax.grad(_beta.beta_slope))(0.7, 2.5))
    with mpmath.workdps(40):
        exact = mpmath.diff(lambda a: mpmath.beta(a, mpmath.mpf(2.5)), mpmath.mpf(0.7), 3)
    assert _agrees(got, float(exact), rtol=1e-9)


def test_torch_computes_no_partial_in_b_where_b_takes_no_gradient(monkeypatch):
    # The partial in b is forward-mode autodiff of beta's printed cases, a second pass over them: a gradient in a
    # alone (b a constant, as a Beta's parameter often is) computes only the stated curvature.
    from rulegen.runtime.torch import _beta

    a = torch.tensor([0.7, 3.0], dtype=torch.float64, requires_grad=True)
    b = torch.tensor([2.5, -0.4], dtype=torch.float64)

    def refused(*args, **kwargs):
        raise AssertionError("the partial in b was computed")

    monkeypatch.setattr(torch.func, "jvp", refused)
    (got,) = torch.autograd.grad(_beta.beta_slope(a, b).sum(), a)
    for value, (x, y) in zip(got.tolist(), [(0.7, 2.5), (3.0, -0.4)], strict=True):
        assert _agrees(value, _exact(_curvature, x, y))
