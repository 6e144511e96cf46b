"""The gamma family's high-precision reference on the negative axis: bounded in time, right to the last digit."""

from __future__ import annotations

import time

import mpmath
import numpy as np
import pytest
import sympy as sp

from rulegen.derive.functions import MPMATH_IMPLEMENTATIONS, NUMPY_IMPLEMENTATIONS
from rulegen.derive.measure import exact_value
from rulegen.derive.stabilise import Sampling, searchable
from rulegen.derive.stabilise.points import _numpy_implementations
from rulegen.spec.rules import Domain

x = sp.Symbol("x", real=True)
a = sp.Symbol("a", real=True)
b = sp.Symbol("b", real=True)
polygamma = MPMATH_IMPLEMENTATIONS["polygamma"]
loggamma = MPMATH_IMPLEMENTATIONS["loggamma"]


def reflected(order: int, t: float) -> mpmath.mpf:
    """psi_n(t) for t < 0 by the reflection formula, written out for orders 0 to 2, at 1,000 bits."""
    with mpmath.workprec(1000):
        u = mpmath.mpf(t)
        s, c = mpmath.sinpi(u), mpmath.cospi(u)
        pi = mpmath.pi
        value = {
            0: mpmath.digamma(1 - u) - pi * c / s,
            1: -mpmath.polygamma(1, 1 - u) + pi**2 / s**2,
            2: mpmath.polygamma(2, 1 - u) - 2 * pi**3 * c / s**3,
        }[order]
        return +value


@pytest.mark.parametrize("order", [0, 1, 2])
def test_polygamma_far_out_on_the_negative_axis_takes_well_under_a_second_and_is_the_reflection(order):
    # mpmath's polygamma(1, x) sums about |x| terms there: 4 s at x = -1e6 + 0.5, minutes past -1e10, and it never
    # returns at a pole such as -1e300; the search refused every gamma-family expression off the positive axis.
    for point in (-1e6 + 0.5, -1.5e10 + 0.25, -4.5e15 + 0.5, -10000.3):
        started = time.perf_counter()
        got = exact_value(lambda t: polygamma(order, t), [point])
        assert time.perf_counter() - started < 0.5, point
        assert got is not None
        assert got[0] == float(reflected(order, point)), (order, point)
    for pole in (-1e300, -3.0, 0.0):
        started = time.perf_counter()
        assert exact_value(lambda t: polygamma(order, t), [pole]) is None
        assert time.perf_counter() - started < 0.5, pole


def test_polygamma_near_a_root_on_the_negative_axis_keeps_every_digit():
    # digamma's root near -0.504 and trigamma's second derivative's near -2.5: the reflection's two terms agree
    # to as many bits as the float is close to the root; the difference is taken with as many more guard bits.
    for order, point in ((0, -0.5040830082644554), (2, -2.4570247), (0, -1e6 + 0.0000001)):
        with mpmath.workprec(120):
            got = polygamma(order, mpmath.mpf(point))
        with mpmath.workprec(2000):
            exact = mpmath.polygamma(order, mpmath.mpf(point)) if abs(point) < 1e4 else reflected(order, point)
        assert abs(got - exact) <= abs(exact) * mpmath.mpf(2) ** -110, (order, point)


def test_log_abs_gamma_on_the_negative_axis_is_the_frameworks_gammaln():
    # torch's and JAX's gammaln are log|Gamma(x)|: real where mpmath's loggamma is complex.
    for point in (-0.3, -2.5, -2.4570247, -10000.3, -1.5e10 + 0.25, -4.5e15 + 0.5):
        with mpmath.workprec(1000):
            u = mpmath.mpf(point)
            exact = mpmath.log(abs(mpmath.gamma(u))) if abs(point) < 1e5 else mpmath.re(mpmath.loggamma(u))
        with mpmath.workprec(120):
            got = loggamma(mpmath.mpf(point))
        assert abs(got - exact) <= abs(exact) * mpmath.mpf(2) ** -110, point
    assert exact_value(loggamma, [-7.0]) is None  # a pole


def test_the_search_s_numpy_polygamma_is_the_reflection_on_the_negative_axis():
    # scipy's polygamma(n, x), n >= 1, sums |x| terms there too (minutes at -1.5e10): the search's is the
    # reflection the generated code computes.
    assert NUMPY_IMPLEMENTATIONS["polygamma"] != "scipy.special.polygamma"
    numpy_polygamma = _numpy_implementations()["polygamma"]
    points = np.array([-1.5e10 + 0.25, -1e6 + 0.5, -10000.3, -2.5, -0.3, 0.7, 3e15])
    for order in (0, 1, 2, 3):
        started = time.perf_counter()
        got = numpy_polygamma(order, points)
        assert time.perf_counter() - started < 0.5
        exact = [float(polygamma(order, mpmath.mpf(p))) for p in points]
        # cot(pi t) of the float t = x - round(x), in float64 as the generated code computes it: a few ulps of the
        # terms (psi_2 at a half-integer is -1e-12, where cos(pi / 2) rounds to 6e-17, not 0).
        np.testing.assert_allclose(got, exact, rtol=1e-12, atol=1e-13)


def test_the_search_refuses_no_gamma_family_expression_off_the_positive_axis():
    whole = Sampling(((a, Domain()), (b, Domain(gt=0))))
    for expr in (
        sp.digamma(a) - sp.digamma(a + b),
        sp.loggamma(a + b) - sp.loggamma(a + 1) - sp.loggamma(b),
        sp.polygamma(1, a) + sp.digamma(a),
        sp.polygamma(2, a - b),
        sp.gamma(a) * sp.digamma(b),
    ):
        assert searchable(expr, whole), expr


def _beta_precisions(monkeypatch) -> list[int]:
    """The working precision of each call of mpmath's beta from here on, as the references make them."""
    seen: list[int] = []
    beta = mpmath.beta

    def recorded(*args):
        seen.append(mpmath.mp.prec)
        return beta(*args)

    monkeypatch.setattr(mpmath, "beta", recorded)
    return seen


@pytest.mark.parametrize("name", ["beta", "beta_slope"])
def test_the_beta_references_round_their_spanning_precision_up_to_a_step_and_keep_their_value(monkeypatch, name):
    # Digits that follow each point's scales made a working precision of its own at almost every point, and mpmath
    # computed its Bernoulli numbers and gamma's Taylor coefficients afresh at each.
    from rulegen.derive import functions

    reference = MPMATH_IMPLEMENTATIONS[name]
    points = [(0.5, 1e200), (3.0, 7.0), (2.5e-20, 4.0), (1e5, 3e-3), (6.5, 1e30)]
    seen = _beta_precisions(monkeypatch)
    values = [exact_value(reference, point) for point in points]
    stepped, seen[:] = seen[:], []
    monkeypatch.setattr(functions, "SPANNING_PRECISION_STEP", 1)  # each point's own precision
    assert [exact_value(reference, point) for point in points] == values
    assert all(p % 256 == 0 and p >= own for p, own in zip(stepped, seen, strict=True))
    assert len(set(stepped)) < len(set(seen))


def test_the_beta_references_take_the_larger_of_the_working_and_the_spanning_precision(monkeypatch):
    # The digits that span a and b were added on top of the working precision, which `exact_value` already sets to
    # span the inputs' scales: beta_slope's digammas ran at 4,600 bits where 2,300 give the same value, 3x slower.
    seen = _beta_precisions(monkeypatch)
    reference = MPMATH_IMPLEMENTATIONS["beta"]
    with mpmath.workprec(3000):
        wide = reference(mpmath.mpf(0.5), mpmath.mpf(1e200))
    with mpmath.workprec(53):
        narrow = reference(mpmath.mpf(0.5), mpmath.mpf(1e200))
    assert seen == [3072, 1024]  # the working 3,000 bits; 200 digits (665 bits) and the guard bits over 53
    assert mpmath.almosteq(wide, narrow, rel_eps=mpmath.mpf(2) ** -100)


def test_the_beta_slope_reference_takes_trigamma_at_a_negative_argument_by_reflection(monkeypatch):
    # mpmath's polygamma of order 1 sums |x| terms at a negative x (5 s a call at a = -1e6, unbounded further out):
    # where b is below a + b's precision the slope is -b trigamma(a + b/2), and a search of beta(x0, x1) ran past
    # its 600 s there.
    reference = MPMATH_IMPLEMENTATIONS["beta_slope"]
    points = [(-50.25, 1e-40), (-50.25, 0.0), (-1e6 - 0.25, 1e-40), (-1e12 - 0.75, 0.0)]
    with mpmath.workprec(200):
        before = [reference(mpmath.mpf(a), mpmath.mpf(b)) for a, b in points[:2]]
    psi = mpmath.psi

    def by_reflection_only(order, x):
        assert order == 0 or x > 0, f"mpmath's polygamma({order}, {x}) sums |x| terms"
        return psi(order, x)

    monkeypatch.setattr(mpmath, "psi", by_reflection_only)
    with mpmath.workprec(200):
        after = [reference(mpmath.mpf(a), mpmath.mpf(b)) for a, b in points]
    assert all(mpmath.almosteq(x, y, rel_eps=mpmath.mpf(2) ** -150) for x, y in zip(before, after, strict=False))
    # -trigamma(a) = trigamma(1 - a) - pi**2 / sin(pi a)**2, and sin(pi a)**2 = 1/2 a quarter past an integer.
    assert mpmath.almosteq(after[2], mpmath.psi(1, 1 - mpmath.mpf(points[2][0])) - 2 * mpmath.pi**2, 1e-14)
    assert mpmath.almosteq(after[3], mpmath.psi(1, 1 - mpmath.mpf(points[3][0])) - 2 * mpmath.pi**2, 1e-14)


def test_the_beta_slope_reference_has_no_value_where_a_or_a_plus_b_is_a_pole_of_gamma():
    # b's expansion, -b trigamma(a + b/2), has a value at a pole a of Gamma where beta has none: with the digits
    # that span a and b no longer on top of the working precision it was taken at (a, b) = (-3.4e38, -1.4e-45), a
    # float32's largest integer, and the special-value cells held the generated code to an "exact" inf there.
    reference = MPMATH_IMPLEMENTATIONS["beta_slope"]
    for a, b in [(-3.4028234663852886e38, -1.401298464324817e-45), (-3.0, 1e-30), (-2.5, -0.5), (-7.0, 2.0)]:
        with mpmath.workdps(40), pytest.raises(ValueError):  # the special-value cells' precision
            reference(mpmath.mpf(a), mpmath.mpf(b))
        assert exact_value(reference, (a, b)) is None, (a, b)
    assert exact_value(reference, (-3.25, 1e-30)) is not None


def test_the_search_s_numpy_zeta_returns_on_the_negative_axis():
    # scipy's (cephes') zeta(s, q) sums from q up to 9 one term at a time: 6 s at q = -1e8 - 0.5, and it never
    # returns at q = -1e300 (q + 1 == q), which hung a build whose input q has no sign assumed.
    numpy_zeta = _numpy_implementations()["zeta"]
    points = np.array([-1e8 - 0.5, -1e6 - 0.5, -2.5, -0.3, 0.7, 3e15])
    for s in (2.0, 3.0):
        started = time.perf_counter()
        got = numpy_zeta(s, points)
        assert time.perf_counter() - started < 0.5
        # For an integer s and q < 0, the sum over k of (k + q)**-s is (-1)**s polygamma(s - 1, q) / (s - 1)!.
        n = int(s) - 1
        exact = [float((-1) ** (n + 1) * polygamma(n, mpmath.mpf(p)) / mpmath.factorial(n)) for p in points]
        # The reflection's cot(pi t) at a half-integer is 6e-17, not 0 (as `polygamma_of` computes it).
        np.testing.assert_allclose(got, exact, rtol=1e-12, atol=1e-13)
    assert np.isinf(numpy_zeta(2.0, np.array([-1e300, -3.0]))).all()  # poles
    assert np.isnan(numpy_zeta(2.5, np.array([-2.5]))).all()  # (k + q)**-2.5 is not real
