"""Sums whose terms pass the float range where the sum does not.  KL(Beta(p1, p0) || Beta(q1, q0)) as torch writes
it, a sum of loggammas and digammas weighted by differences of the parameters, was inf in float32 at
(p1, p0, q1, q0) = (10.96, 1.71e26, 5.9e36, 1.88e38), where it is 3.16e38: (p1 - q1) digamma(p1) and
(q1 + q0 - p1 - p0) digamma(p1 + p0) are each past float32's largest float, and their sum is not.  No rewriting of
the terms mends that; the sum computed with its terms scaled by a power of two does, where it is not finite and
nowhere else.  The gate's points had no row where such a term passes the range: drawn over the bit patterns, a
weight lands within a binade of the largest float once in hundreds, and the other inputs must make the rest of the
sum cancel it."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
import sympy as sp
from sympy.codegen.cfunctions import log1p

from rulegen.derive.functions import where_finite
from rulegen.derive.stabilise import Sampling
from rulegen.derive.stabilise.families import _sum_scaled, outermost_sums
from rulegen.derive.stabilise.gate import as_computed, inadmissible_points, not_finite_at, past_the_range
from rulegen.derive.stabilise.points import _numpy_function
from rulegen.spec.rules import Domain

p1, p0, q1, q0 = sp.symbols("p1 p0 q1 q0", positive=True)
VARIABLES = (p1, p0, q1, q0)
#: The KL's weighted digammas (its loggammas overflow there too, and the search joins them into differences).
WEIGHTED = (p1 - q1) * sp.digamma(p1) + (p0 - q0) * sp.digamma(p0) + (q1 + q0 - p1 - p0) * sp.digamma(p1 + p0)
POINT = (10.96, 1.71e26, 4.0e36, 1.88e38)


def evaluated(expr: sp.Expr, point: tuple[float, ...], dtype: type) -> float:
    fn = _numpy_function(as_computed(expr), VARIABLES)
    assert fn is not None
    with np.errstate(all="ignore"):
        return float(np.asarray(fn(*(np.asarray([v], dtype=dtype) for v in point))).reshape(-1)[0])


def exact_weighted(point: tuple[float, ...]) -> float:
    with mpmath.workprec(300):
        a, b, c, d = (mpmath.mpf(float(np.float32(v))) for v in point)
        psi = mpmath.digamma
        return float((a - c) * psi(a) + (b - d) * psi(b) + (c + d - a - b) * psi(a + b))


def test_a_sum_whose_terms_overflow_is_computed_scaled_where_it_is_not_finite():
    scaled = _sum_scaled(WEIGHTED)
    assert np.isnan(evaluated(WEIGHTED, POINT, np.float32))
    exact = exact_weighted(POINT)
    assert exact == pytest.approx(2.32e38, rel=1e-2)
    assert evaluated(scaled, POINT, np.float32) == pytest.approx(exact, rel=1e-5)
    # Bit for bit the sum as written wherever that is finite: at ordinary points, and at large and tiny ones.
    rng = np.random.default_rng(0)
    for dtype in (np.float64, np.float32):
        for _ in range(40):
            point = tuple(float(v) for v in 2.0 ** rng.uniform(-60, 60, size=4))
            written = evaluated(WEIGHTED, point, dtype)
            if np.isfinite(written):
                assert evaluated(scaled, point, dtype) == written, point


def test_a_scaled_sum_past_the_range_is_the_infinity_it_is():
    # Where the sum itself passes float32's range, the scaled sum scaled back overflows to +inf, as the sum does.
    point = (10.96, 1.71e26, 7.0e36, 1.88e38)
    assert exact_weighted(point) > float(np.finfo(np.float32).max)
    assert np.isnan(evaluated(WEIGHTED, point, np.float32))
    assert evaluated(_sum_scaled(WEIGHTED), point, np.float32) == np.inf


def test_a_sum_in_a_function_s_argument_or_a_product_is_left_as_it_is():
    x, y = sp.symbols("x y", positive=True)
    assert _sum_scaled(sp.log(x + y)) == sp.log(x + y)
    assert _sum_scaled(x * (x + y)) == x * (x + y)
    assert _sum_scaled(x * sp.log(y) - y).has(where_finite)


def test_the_gate_has_rows_where_a_weighted_digamma_passes_the_range():
    # The gate's rows put each weighted term of a sum a little past the largest float: the sum as written is inf or
    # nan at some of them where its exact value is a float, which the gate's draws over the bit patterns never showed.
    sampling = Sampling(tuple((v, Domain(gt=0)) for v in VARIABLES))
    broken = inadmissible_points(WEIGHTED, WEIGHTED, sampling)
    assert broken > 0
    assert inadmissible_points(_sum_scaled(WEIGHTED), WEIGHTED, sampling) < broken


def test_a_float32_form_of_a_digamma_is_measured_in_float32():
    # scipy's polygamma is float64 whatever its argument: the gate measured (p0 - q0) digamma(p0) in float32 as
    # -1.1e40 rounded once at the end (inf), but a sum of two such terms as a float64 number in range, where the
    # generated code's float32 products overflow.  The registry's numpy functions give their arguments' float.
    from rulegen.derive.stabilise.points import _evaluated

    columns = [np.asarray([v], np.float32) for v in POINT]
    value = _evaluated(WEIGHTED, VARIABLES, columns, np.float32)
    assert value.dtype == np.float32 and np.isnan(value[0])
    term = _evaluated((p0 - q0) * sp.digamma(p0), VARIABLES, columns, np.float32)
    assert term[0] == -np.inf
    assert _evaluated(WEIGHTED, VARIABLES, [c.astype(np.float64) for c in columns], np.float64)[0] == pytest.approx(
        exact_weighted(POINT), rel=1e-6
    )


def test_a_sum_holding_a_where_is_scaled_without_folding_the_where_into_a_condition():
    # sympy folds a `where` inside a condition into if-then-elses over every branch each time the pair is built (a
    # negative binomial's search spent two thirds of its time so); the test of the sum is a `where_finite`, a
    # function of it, and the `where`'s branches are scaled inside the scaled sum.
    x, y = sp.symbols("x y", positive=True)
    holding = x * sp.log(y) - sp.Piecewise((y, x > 1), (x, True))
    scaled = _sum_scaled(holding)
    assert isinstance(scaled, where_finite) and scaled.args[:2] == (holding, holding)
    assert not scaled.args[0].has(sp.ITE)
    at = (3.0e37, 1.0e3)  # x log(y) = 2.1e38, in range; x 10 log(y) = 2.1e39 is not
    fn = _numpy_function(as_computed(scaled), (x, y))
    with np.errstate(all="ignore"):
        value = fn(*(np.asarray([v], np.float32) for v in at))[0]
    assert value == pytest.approx(3.0e37 * np.log(1.0e3) - 1.0e3, rel=1e-6)
    branches = _sum_scaled(sp.Piecewise((x * sp.log(y) - y, x > 1), (x - y, True)))
    assert isinstance(branches, sp.Piecewise)
    assert all(isinstance(branch, where_finite) for branch, _ in branches.args)


def _own_terms_case() -> tuple[sp.Expr, sp.Expr, Sampling, tuple[sp.Symbol, ...]]:
    """A derived form finite everywhere, x (log(y) - log(y + 1)) = -x log1p(1/y), and a form of it whose own sum
    holds a `where` and weighs log(y) by x: inf - inf where x log(y) passes the range and the value does not.  The
    derived form's terms give the gate no row there (none of them is linear in an input)."""
    x, y = sp.symbols("x y", positive=True)
    derived = x * (sp.log(y) - sp.log(y + 1))
    form = sp.Piecewise((x * sp.log(y), y > 1), (x * log1p(y - 1), True)) - x * sp.log(y + 1)
    return derived, form, Sampling(((x, Domain(gt=0)), (y, Domain(gt=0)))), (x, y)


def test_a_form_s_own_terms_past_the_range_are_the_sum_scaled_repair_s_targets():
    derived, form, sampling, variables = _own_terms_case()
    assert inadmissible_points(form, derived, sampling) == 0
    points = past_the_range(form, tuple(outermost_sums(form)), derived, sampling)
    assert not_finite_at(form, variables, points) > 0
    assert all(len(columns[0]) for _, columns in points)  # float64 as well as float32
    assert not_finite_at(_sum_scaled(form), variables, points) == 0
