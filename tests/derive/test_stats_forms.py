"""Forms statistics code writes: differences of the gamma family at large arguments, sums whose order decides a
cancellation, and regimes on the ratio of two inputs with powers of two for thresholds."""

from __future__ import annotations

import functools
import math

import mpmath
import numpy as np
import pytest
import sympy as sp
from sympy.codegen.cfunctions import log1p

from rulegen.derive.functions import softplus
from rulegen.derive.stabilise import Sampling, searchable, stabilise
from rulegen.derive.stabilise.points import _numpy_function
from rulegen.spec.rules import Domain

a = sp.Symbol("a", real=True)
b = sp.Symbol("b", real=True)
x = sp.Symbol("x", real=True)
scale = sp.Symbol("scale", real=True)
POSITIVE = Domain(gt=0)


# The exact values are computed at 2,000 bits at most: the points' widest spread of scales, a + b at (2.2e-230,
# 3e305), takes 1,780 of them, and every value there agrees with 4,000 bits' to 300 bits past its cancellations
# (mpmath's gamma family at 4,000 bits took seconds of CPU a worker).


def bits(value: float, exact: mpmath.mpf, dtype: type = np.float64) -> float:
    """Bits of error of `value` beside `exact` rounded to `dtype`, as ulps of the exact value (log2(1 + ulps))."""
    target = dtype(float(exact))
    if value == target:
        return 0.0
    ulp = float(np.spacing(np.abs(target)))
    return math.log2(1 + abs(float(value) - float(target)) / ulp)


def evaluated(expr: sp.Expr, variables: tuple[sp.Symbol, ...], point: tuple[float, ...], dtype: type) -> float:
    fn = _numpy_function(expr, variables)
    assert fn is not None
    with np.errstate(all="ignore"):
        return float(np.asarray(fn(*(np.asarray([v], dtype=dtype) for v in point))).reshape(-1)[0])


def test_digamma_is_searched_on_the_whole_line_its_inputs_allow():
    # The reference computes the gamma family on the negative axis by reflection, in bounded time: a Beta's or a
    # Student-t's digammas are searched, and so is a digamma of an argument of either sign (a count's).
    positive = Sampling(((a, POSITIVE), (b, POSITIVE)))
    assert searchable(sp.digamma(a) - sp.digamma(a + b), positive)
    assert searchable(sp.loggamma(b / 2) - sp.loggamma((b + 1) / 2), positive)
    assert searchable(sp.digamma(a - b), positive)
    assert searchable(sp.digamma(a) - sp.digamma(a + b), Sampling(((a, Domain()), (b, POSITIVE))))
    half = sp.Float(0.5)
    assert searchable(sp.loggamma(half * b) - sp.loggamma(half * (b + 1)), positive)


def test_a_difference_of_digammas_at_large_arguments_takes_their_asymptotic_series():
    # digamma(a) - digamma(a + b) with b small beside a: the two digammas agree to every digit of b / a.
    expr = sp.digamma(a) - sp.digamma(a + b)
    choice = stabilise(expr, Sampling(((a, POSITIVE), (b, POSITIVE))))
    assert choice.more_accurate, choice
    for point in ((1e8, 1e-3), (3e12, 7.0), (40.0, 1e-9), (1e200, 1e190)):
        with mpmath.workprec(2000):
            exact = mpmath.digamma(point[0]) - mpmath.digamma(mpmath.mpf(point[0]) + point[1])
        assert bits(evaluated(choice.chosen, (a, b), point, np.float64), exact) <= 2, point
        assert bits(evaluated(expr, (a, b), point, np.float64), exact) > 10, point  # as derived: lost


def test_a_difference_of_loggammas_half_apart_is_accurate_at_large_arguments():
    # A Student-t's normaliser: loggamma((df + 1)/2) - loggamma(df/2) loses log2(df log df) bits as written.
    df = sp.Symbol("df", real=True)
    expr = sp.loggamma((df + 1) / 2) - sp.loggamma(df / 2)
    choice = stabilise(expr, Sampling(((df, POSITIVE),)))
    assert choice.more_accurate, choice
    for value in (8000.0, 3.7e9, 1e150):
        with mpmath.workprec(1000):
            exact = mpmath.loggamma((mpmath.mpf(value) + 1) / 2) - mpmath.loggamma(mpmath.mpf(value) / 2)
        assert bits(evaluated(choice.chosen, (df,), (value,), np.float64), exact) <= 2, value


def test_like_gamma_terms_whose_coefficients_add_to_zero_are_joined_as_differences():
    # A Beta entropy's digamma terms: -(a - 1) digamma(a) - (b - 1) digamma(b) + (a + b - 2) digamma(a + b).
    from rulegen.derive.stabilise.families import _identities

    total = -(a - 1) * sp.digamma(a) - (b - 1) * sp.digamma(b) + (a + b - 2) * sp.digamma(a + b)
    joined = _identities(total)
    assert joined.count(sp.Piecewise) >= 2  # one difference per argument besides a + b
    point = (1e12, 3.0)
    with mpmath.workprec(2000):
        exact = (
            -(point[0] - 1) * mpmath.digamma(point[0])
            - (point[1] - 1) * mpmath.digamma(point[1])
            + (point[0] + point[1] - 2) * mpmath.digamma(mpmath.mpf(point[0]) + point[1])
        )
    assert bits(evaluated(joined, (a, b), point, np.float64), exact) <= 2
    assert bits(evaluated(total, (a, b), point, np.float64), exact) > 10


def test_a_cancelling_pair_is_summed_before_a_small_term_is_added():
    # A Binomial log-mass's partial in k: logits - digamma(k + 1) + digamma(n - k + 1).  At k = 5, n = 10 the
    # digammas cancel exactly; added to logits = 1e-6 first, one of them rounds it (9.999999999177e-07).
    torch = pytest.importorskip("torch")
    from rulegen.plan.printers import TorchArrayPrinter

    k, logits = sp.symbols("k logits", real=True)
    code = TorchArrayPrinter().doprint(logits - sp.digamma(k + 1) + sp.digamma(11 - k))
    names = {"torch": torch, "digamma": torch.special.digamma}
    value = eval(code, names, {"k": torch.tensor(5.0, dtype=torch.float64), "logits": 1e-6})
    assert float(value) == 1e-6, code


def test_regime_thresholds_are_powers_of_two():
    from rulegen.derive.stabilise.points import _Measured, _Points
    from rulegen.derive.stabilise.regimes import _best_split

    magnitudes = np.array([1e-3, 1.0, 3.0, 1e10, 1e30, 1e100])
    points = [_Points(np.float64, (magnitudes,), np.ones_like(magnitudes))]
    wrong_far_out = _Measured(x, "as derived", (np.where(magnitudes > 2, 60.0, 0.0),))
    right_far_out = _Measured(-x, "series at infinity", (np.where(magnitudes > 2, 0.0, 5.0),))
    found = _best_split(wrong_far_out, right_far_out, [x], points)
    assert found is not None
    threshold = found[1].threshold
    assert math.log2(threshold).is_integer() and 1.0 <= threshold <= 3.0, threshold


def test_a_homogeneous_expression_splits_on_the_ratio_of_its_inputs():
    # Two forms of a function of x/scale, each right on one side of |x| = |scale| whatever the magnitudes: no
    # threshold on x alone separates them, the ratio does.
    from rulegen.derive.stabilise.points import _Measured, _Points
    from rulegen.derive.stabilise.regimes import _best_split, _ratio_pairs

    rng = np.random.default_rng(0)
    xs = 10.0 ** rng.uniform(-30, 30, 64)
    scales = 10.0 ** rng.uniform(-30, 30, 64)
    points = [_Points(np.float64, (xs, scales), np.ones_like(xs))]
    small = np.abs(xs) < np.abs(scales)
    below = _Measured(x, "x over scale", (np.where(small, 0.0, 40.0),))
    above = _Measured(-x, "scale over x", (np.where(small, 40.0, 0.0),))
    expr = -2 * x / (scale**2 * (1 + x**2 / scale**2))
    pairs = _ratio_pairs(expr, Sampling(((x, Domain(ge=0)), (scale, POSITIVE))))
    assert (0, 1) in pairs
    found = _best_split(above, below, [x, scale], points, pairs)
    assert found is not None
    score, split = found
    assert split.over == scale and split.below and split.threshold == 1.0, split
    assert score == 0.0


def test_the_half_cauchy_partials_are_finite_and_accurate_in_float32():
    # (scale/x)**2 in a split placed for float64 overflows in float32: each form chosen holds in both dtypes.
    forward = -log1p((x / scale) ** 2)
    sampling = Sampling(((x, Domain(ge=0)), (scale, POSITIVE)))
    for v in (x, scale):
        choice = stabilise(sp.diff(forward, v), sampling)
        printed = [float(c) for c in choice.chosen.atoms(sp.Float)]
        assert all(c == 0 or math.log2(abs(c)).is_integer() for c in printed), choice.chosen
        for point in ((1e-20, 1e18), (1e18, 1e-20), (3.0, 5.0), (1e-30, 1e-31)):
            with mpmath.workprec(500):
                px, ps = (mpmath.mpf(p) for p in point)
                # d/dx -log1p((x/s)**2) = -2x/(s**2 + x**2); d/ds = 2x**2/(s (s**2 + x**2))
                exact = -2 * px / (ps**2 + px**2) if v == x else 2 * px**2 / (ps * (ps**2 + px**2))
            if abs(exact) < np.finfo(np.float32).tiny or abs(exact) > np.finfo(np.float32).max:
                continue
            value = evaluated(choice.chosen, (x, scale), point, np.float32)
            assert math.isfinite(value), (v, point)
            assert bits(value, exact, np.float32) <= 2, (v, point, value, exact)


def test_a_gamma_entropy_s_partial_takes_the_series_whose_leading_terms_cancel():
    # torch's Gamma.entropy differentiated in its concentration: 1 + (1 - c) trigamma(c), where c trigamma(c) is
    # 1 + 1/(2c) + ...: as written it loses log2(c) bits (30 over the positive floats, on average).
    c = sp.Symbol("c", real=True)
    expr = 1 + (1 - c) * sp.polygamma(1, c)
    choice = stabilise(expr, Sampling(((c, POSITIVE),)))
    assert choice.more_accurate and max(choice.bits_after) <= 1, choice
    for value in (40.0, 8000.0, 3.7e9, 1e150):
        with mpmath.workprec(1000):
            exact = 1 + (1 - mpmath.mpf(value)) * mpmath.polygamma(1, value)
        assert bits(evaluated(choice.chosen, (c,), (value,), np.float64), exact) <= 2, value


def test_calls_of_shifted_arguments_are_one_series_whose_leading_terms_cancel():
    # torch's StudentT.entropy differentiated in df: 1/(2 df) + (df + 1)(trigamma((df + 1)/2) - trigamma(df/2))/4,
    # -1/df**2 + ..., where as written 1/(2 df) cancels against the trigamma difference's leading term (every bit
    # lost from df = 1e16); as torch writes it, with 0.5 for 1/2.
    from rulegen.derive.stabilise.asymptotic import one_argument_series

    df = sp.Symbol("df", positive=True)
    half = sp.Float(0.5)
    entropy = (
        half * (df + 1) * (sp.digamma(half * (df + 1)) - sp.digamma(half * df))
        + half * sp.log(df)
        + (sp.loggamma(half * df) + sp.loggamma(half) - sp.loggamma(half * (df + 1)))
    )
    for expr in (entropy, entropy.diff(df)):
        series = one_argument_series(expr)
        assert series is not None
        for value in (80.0, 8000.0, 1.2e25, 1e200):
            with mpmath.workprec(2000):
                exact = sp.lambdify(df, expr, "mpmath")(mpmath.mpf(value))
            assert bits(evaluated(series, (df,), (value,), np.float64), exact) <= 2, (expr, value)
    # Terms in another variable are added as they are: a Student-t log-density's partial in df.
    log_density = -half * (df + 1) * log1p(x**2 / df) - (sp.loggamma(half * df) - sp.loggamma(half * (df + 1)))
    partial = log_density.diff(df)
    series = one_argument_series(partial)
    assert series is not None and series.has(log1p(x**2 / df))


P, Q = sp.symbols("p q", positive=True)
#: torch's Beta.entropy.
BETA_ENTROPY = (
    sp.loggamma(P)
    + sp.loggamma(Q)
    - sp.loggamma(P + Q)
    - (P - 1) * sp.digamma(P)
    - (Q - 1) * sp.digamma(Q)
    + (P + Q - 2) * sp.digamma(P + Q)
)


def test_calls_at_several_arguments_are_one_series_each_whose_leading_terms_cancel():
    # torch's Beta.entropy and its partial in a: -(a - 1) trigamma(a) + (a + b - 2) trigamma(a + b) is
    # 1/(2a) - 3/(2(a + b)) + ..., where as written two terms near 1 cancel (every bit lost from a = 2**53), and
    # the entropy's loggammas and digammas cancel to their logs; the arguments a and a + b are not shifts of one.
    from rulegen.derive.stabilise.asymptotic import several_argument_series

    p, q = P, Q
    entropy = BETA_ENTROPY
    lost = 0
    found = {}
    for expr in (entropy, entropy.diff(p)):
        series = found[expr] = several_argument_series(expr)
        assert series is not None
        for point in ((40.0, 35.0), (1e7, 3e7), (33.0, 1e10), (1e300, 1e3), (1.2e159, 4.5e284), (0.3, 2.0)):
            with mpmath.workprec(2000):
                exact = sp.lambdify((p, q), expr, "mpmath")(mpmath.mpf(point[0]), mpmath.mpf(point[1]))
            assert bits(evaluated(series, (p, q), point, np.float64), exact) <= 2, (expr, point)
            lost += bits(evaluated(expr, (p, q), point, np.float64), exact) > 10
    assert lost >= 4  # as derived
    # The entropy's partial near 0 is 1/p**2 - 2/(p + q)**2 + ...: inf - inf as written, where it is inf or -inf.
    series = found[entropy.diff(p)]  # the series above, derived once
    for point, sign in (((5.1e-185, 1.5e-252), -1), ((8.6e-252, 1.1e-177), 1)):
        assert evaluated(series, (p, q), point, np.float64) == sign * math.inf
        assert math.isnan(evaluated(entropy.diff(p), (p, q), point, np.float64))
    # A Beta log-density's partial in b: digamma(a + b) - digamma(b) leads with log(a + b) - log(b), log1p(a/b).
    partial = sp.digamma(p + q) - sp.digamma(q)
    series = several_argument_series(partial)
    assert series is not None
    # Near 0 its pole parts 1/q - 1/(p + q) are joined, (p/(p + q))/q: 0 as written where p << q << 1, and the
    # larger divides first ((p/q)/(p + q) overflows at q << 1 << p).
    points = ((5.6e221, 1.2e247), (1e3, 1e5), (1e100, 1e5), (40.0, 50.0), (1.3e-216, 1.7e-186), (1e-3, 2e-3))
    for point in (*points, (1e300, 1e-300)):
        with mpmath.workprec(2000):
            exact = mpmath.digamma(mpmath.mpf(point[0]) + point[1]) - mpmath.digamma(point[1])
        assert bits(evaluated(series, (p, q), point, np.float64), exact) <= 2, point
    # Weights in other variables: a KL divergence of two Betas in p1, (p1 - q1) trigamma(p1) + (q1 + q0 - p1 - p0)
    # trigamma(p1 + p0), whose -q1/p1 + (q1 + q0)/(p1 + p0) is -q1 (1/p1 - 1/(p1 + p0)) + q0/(p1 + p0).
    r, s = sp.symbols("r s", positive=True)
    kl_partial = (p - r) * sp.polygamma(1, p) + (r + s - p - q) * sp.polygamma(1, p + q)
    series = several_argument_series(kl_partial)
    assert series is not None
    for point in (
        (1e5, 3e2, 7e4, 1e-3),
        (50.0, 40.0, 1e9, 3.0),
        (1e-100, 1e-120, 5.0, 1e-50),
        (1e200, 1e100, 1e150, 1e180),
    ):
        with mpmath.workprec(2000):
            exact = sp.lambdify((p, q, r, s), kl_partial, "mpmath")(*map(mpmath.mpf, point))
        assert bits(evaluated(series, (p, q, r, s), point, np.float64), exact) <= 2, point
    # A call that is not a factor of a term, or arguments that are not linear, are not this family's.
    assert several_argument_series(sp.log(sp.digamma(p)) + sp.digamma(p + q)) is None
    assert several_argument_series(sp.digamma(p**2) - sp.digamma(q)) is None


def test_calls_past_the_threshold_are_series_where_the_others_are_not():
    # A Beta entropy at a = 1e300, b = 1e-200: loggamma(a) - loggamma(a + b) is inf - inf as written, and so was the
    # series branch (every argument past 2**5) beside the pole branch (none past it); the calls at a and a + b are
    # series whose leading terms cancel, the calls at b as written.  Its partial in a at (5e-324, 1.8e202) was the
    # pole branch's 1/a**2 - 2/(a + b)**2 paired against -(b/(a + b))/a: inf - inf where the exact value is inf.
    # The logs of two arguments paired as log(a/b) overflowed at (21.92, 2.2e-308): their logs' difference there.
    from rulegen.derive.stabilise.asymptotic import several_argument_series

    p, q = P, Q
    entropy = BETA_ENTROPY
    series = several_argument_series(entropy)
    assert series is not None
    points = ((1e300, 1e-200), (2.2e-230, 3e305), (8e198, 0.085), (3e26, 5e-3), (21.92, 2.2250738585072014e-308))
    for point in points:
        with mpmath.workprec(2000):
            exact = sp.lambdify((p, q), entropy, "mpmath")(mpmath.mpf(point[0]), mpmath.mpf(point[1]))
        assert bits(evaluated(series, (p, q), point, np.float64), exact) <= 2, point
    partial = several_argument_series(entropy.diff(p))
    assert evaluated(partial, (p, q), (5e-324, 1.8e202), np.float64) == math.inf
    # Where no set of arguments has a branch of its own (a KL divergence of two Betas: four arguments, too many
    # sets), the poles are joined wherever not every argument is past the threshold: 1/p0 - 1/(p1 + p0) beside
    # q1 + q0 = 1.3e237 was the digammas' difference as written, 0 where it is 3.5e102.
    r, s = sp.symbols("r s", positive=True)
    kl_partial = sp.digamma(s) - sp.digamma(r + s) - sp.digamma(q) + sp.digamma(p + q)
    point = (6.8e-223, 4.4e-163, 1.28e237, 3.2e-46)
    with mpmath.workprec(2000):
        exact = sp.lambdify((p, q, r, s), kl_partial, "mpmath")(*map(mpmath.mpf, point))
    assert bits(evaluated(several_argument_series(kl_partial), (p, q, r, s), point, np.float64), exact) <= 2
    # Near 0 the pole parts' highest order (1/q**2) and the lower (-1/q, paired with 1/(p + q)) were inf - inf.
    partial = several_argument_series(entropy.diff(q))
    assert evaluated(partial, (p, q), (10.96, 5e-324), np.float64) == math.inf
    # A Beta log-density: loggamma(a + b) - loggamma(b) leads with (a + b) log(a + b) - b log(b), whose every digit
    # cancelled where a << b; it is (a + b) log1p(a/b) + a log(b).  Its partial in b adds log1p(-x) to the calls'
    # sum, not to one call (log1p(-x) = -2.8e-24 was lost beside digamma(22.92) = 3.1).
    x = sp.Symbol("x", positive=True)
    log_density = (p - 1) * sp.log(x) + (q - 1) * log1p(-x) - sp.loggamma(p) - sp.loggamma(q) + sp.loggamma(p + q)
    for expr, points in (
        (log_density, ((3.6e-71, 0.508, 4.5e265), (0.3, 1e200, 1e180), (1e-5, 1e300, 2.0), (0.5, 1e10, 3e10))),
        (log_density.diff(q), ((2.79e-24, 7.6e-100, 21.92), (0.3, 1e200, 1e180))),
    ):
        series = several_argument_series(expr)
        for point in points:
            with mpmath.workprec(2000):
                exact = sp.lambdify((x, p, q), expr, "mpmath")(*map(mpmath.mpf, point))
            assert bits(evaluated(series, (x, p, q), point, np.float64), exact) <= 2, (expr, point)


def test_a_difference_of_reciprocals_is_divided_by_the_larger_first():
    # A KL divergence of two exponentials differentiated in q: 1/p - 1/q cancels at q ~ p; over one denominator,
    # (q - p)/(p q) overflows where p q does, and ((q - p)/p)/q where p << q.
    p, q = sp.symbols("p q", positive=True)
    expr = 1 / p - 1 / q
    choice = stabilise(expr, Sampling(((p, POSITIVE), (q, POSITIVE))))
    assert choice.more_accurate, choice
    close = 3.0 * (1 + 1e-8)  # 1/p and 1/q agree to 27 bits, each rounded
    for point in ((3.0, close), (close, 3.0), (1e-300, 1e300), (1e300, 1e-300), (1e-200, 1e-200 * 1.5)):
        with mpmath.workprec(2000):
            exact = 1 / mpmath.mpf(point[0]) - 1 / mpmath.mpf(point[1])
        assert bits(evaluated(choice.chosen, (p, q), point, np.float64), exact) <= 2, point
    with mpmath.workprec(2000):
        exact = 1 / mpmath.mpf(3.0) - 1 / mpmath.mpf(close)
    assert bits(evaluated(expr, (p, q), (3.0, close), np.float64), exact) > 10  # as written


def test_a_difference_of_logs_is_taken_by_how_close_its_arguments_are():
    # A KL divergence of two Bernoullis differentiated in p: log(p) - log(q) - log1p(-p) + log1p(-q).  Its identity
    # was log1p((p - q)/q) alone, which rounds 1 + (p - q)/q where p << q (33 bits float64 measured, the form as
    # derived 3.4); by how close p and q are it is log1p((p - q)/q), log(p/q), or log(p) - log(q) where p/q is out
    # of range.
    p, q = sp.symbols("p q", real=True)
    partial = sp.log(p) - sp.log(q) - log1p(-p) + log1p(-q)
    unit = Domain(gt=0, lt=1)
    choice = stabilise(partial, Sampling(((p, unit), (q, unit))))
    assert choice.bits_after[0] < 0.5 and choice.bits_after[1] < 0.5, choice
    eps = float(np.finfo(np.float64).eps)
    for point in ((1e-300, 0.5), (0.3, 0.3 * (1 + 2 * eps)), (2.3e-13, 5e-324), (0.5, 1e-200), (0.999, 1e-5)):
        with mpmath.workprec(2000):
            exact = sp.lambdify((p, q), partial, "mpmath")(*map(mpmath.mpf, point))
        assert bits(evaluated(choice.chosen, (p, q), point, np.float64), exact) <= 2, point


def test_a_log1p_beside_its_argument_s_rational_terms_is_taken_without_their_cancellation():
    # A Student t's partial in df holds -log1p(t)/2 + t/(2(1 + t)), t = x**2/df: -t**2/4 at small t, from terms of
    # size t (18.7 / 11.5 bits float64 / float32 on the search's points, as derived and at best).  It is
    # log1pmx(-t/(1 + t))/2 below t = 1, log1pmx(z) = log1p(z) - z without its cancellation.
    df = sp.Symbol("df", positive=True)
    t = x**2 / df
    partial = -log1p(t) / 2 + t / (2 * (1 + t))
    choice = stabilise(partial, Sampling(((x, Domain()), (df, POSITIVE))))
    assert max(choice.bits_after) < 1, (choice.family, choice.bits_after)
    for point in ((1.0, 1e8), (-3e-5, 7e-3), (0.5, 0.3), (2.0, 3.0), (1e200, 1e10), (1e-100, 1e-150)):
        with mpmath.workprec(2000):
            px, pdf = (mpmath.mpf(p) for p in point)
            exact = -mpmath.log1p(px**2 / pdf) / 2 + px**2 / pdf / (2 * (1 + px**2 / pdf))
        value = evaluated(choice.chosen, (x, df), point, np.float64)
        assert bits(value, exact) <= 2, (point, value, exact, choice.family)


def test_a_log_odds_written_as_a_log_of_a_quotient_of_logistics_is_its_argument():
    # log(sigmoid(z) / (1 - sigmoid(z))), the textbook logit of a sigmoid: its identities made
    # log(sigmoid(z)/sigmoid(-z)), inf from z = 710 and -inf below -745 where the exact value is z.  The log of a
    # product of positive factors is the sum of their logs where one has an identity.
    from rulegen.derive.functions import sigmoid

    z = sp.Symbol("z", real=True)
    choice = stabilise(sp.log(sigmoid(z) / (1 - sigmoid(z))), Sampling(((z, Domain()),)))
    assert choice.bits_after == (0.0, 0.0), (choice.family, choice.bits_after, choice.chosen)
    for point in (1e3, -1e3, 3e38, 1e-300, -0.5):
        assert evaluated(choice.chosen, (z,), (point,), np.float64) == point, choice.chosen


def test_a_sum_of_softplus_terms_of_opposite_arguments_is_written_by_sign():
    # A Bernoulli log-mass, y log(sigmoid(z)) + (1 - y) log(1 - sigmoid(z)), is -y softplus(-z) - (1 - y) softplus(z)
    # by the canonical forms; its two softplus terms times y cancel to y z where |y| >> |z| (8 bits float64 at
    # y = 1e10, z = 0.02).  By sign it is (y - 1) z - softplus(-z) above 0 and y z - softplus(z) below.
    y, z = sp.Symbol("y", real=True), sp.Symbol("z", real=True)
    forward = -y * softplus(-z) - (1 - y) * softplus(z)
    choice = stabilise(forward, Sampling(((y, Domain()), (z, Domain()))))
    for point in ((1e10, 0.02), (-3e12, -0.5), (0.25, 40.0), (1.0, -1e300), (0.5, 1e-20), (1e300, 1e-300)):
        with mpmath.workprec(2000):
            py, pz = (mpmath.mpf(p) for p in point)
            exact = py * pz - mpmath.log1p(mpmath.exp(pz))
        value = evaluated(choice.chosen, (y, z), point, np.float64)
        assert bits(value, exact) <= 2, (point, value, exact, choice.family)


def test_a_softplus_beside_its_own_argument_is_written_by_sign():
    # A logistic log-density as TFP writes it, -u - 2 softplus(-u) - log(s) with u = (x - loc)/s: below 0 the two
    # terms are each about 2|u| and of opposite signs, inf - inf once 2|u| overflows (float32: -inf at
    # x = -21.92, loc = 0, s = 1.2e-37, where the density is a finite -1.86e38), a band the search's points do not
    # draw but the gate's special floats do.  By sign it is u - 2 softplus(u) - log(s) there.
    loc = sp.Symbol("loc", real=True)
    s = sp.Symbol("s", positive=True)
    u = (x - loc) / s
    forward = -u - 2 * softplus(-u) - sp.log(s)
    choice = stabilise(forward, Sampling(((x, Domain()), (loc, Domain()), (s, POSITIVE))))
    points = [((-21.92, 0.0, 1.1810956e-37), np.float32), ((0.0, 1.865e9, 7.52e-30), np.float32)]
    points += [((-1.0, 0.5, 1e-300), np.float64), ((3.0, 1.0, 2.0), np.float64), ((30.0, -2.0, 0.25), np.float32)]
    for point, dtype in points:
        with mpmath.workprec(2000):
            px, ploc, ps = (mpmath.mpf(float(dtype(p))) for p in point)
            pu = (px - ploc) / ps
            exact = -pu - 2 * mpmath.log1p(mpmath.exp(-pu)) - mpmath.log(ps)
        value = evaluated(choice.chosen, (x, loc, s), point, dtype)
        assert bits(value, exact, dtype) <= 2, (point, dtype, value, exact, choice.family)


def test_the_gamma_series_form_has_its_log_of_an_overflowing_product_taken_apart():
    # A Student t's log-density with its normaliser as loggammas (torch's StudentT.log_prob): the gamma series join
    # the loggamma difference, and their form kept log1p(x**2/df), inf past |x| = 1.3e154 sqrt(df) where the
    # density is finite (10.4 bits float64 mean as chosen; the logs taken apart only in the forward as derived,
    # whose loggamma difference cancels).  Logs are taken apart in the best forms the families made as well.
    df = sp.Symbol("df", positive=True)
    half = sp.Float(0.5)  # as the rule writes it
    forward = -half * (df + 1) * log1p(x**2 / df) - (
        half * sp.log(df) + half * sp.log(sp.pi) + sp.loggamma(half * df) - sp.loggamma(half * (df + 1))
    )
    choice = stabilise(forward, Sampling(((x, Domain()), (df, POSITIVE))))
    points = [(p, np.float64) for p in ((1e200, 1e50), (-1e250, 3.0), (1e160, 0.5), (2.0, 1e300), (3.0, 5.0))]
    points += [(p, np.float32) for p in ((4.5e21, 2.4e-5), (-1e30, 7.0), (0.5, 1e-3))]
    for point, dtype in points:
        with mpmath.workprec(2000):
            px, pdf = (mpmath.mpf(float(dtype(p))) for p in point)
            exact = -(pdf + 1) / 2 * mpmath.log1p(px**2 / pdf) - (
                mpmath.log(pdf) / 2
                + mpmath.log(mpmath.pi) / 2
                + mpmath.loggamma(pdf / 2)
                - mpmath.loggamma((pdf + 1) / 2)
            )
        value = evaluated(choice.chosen, (x, df), point, dtype)
        assert bits(value, exact, dtype) <= 2, (point, dtype, value, exact, choice.family)


def test_a_log_of_a_product_that_overflows_takes_the_logs_of_its_factors():
    # log1p((x/scale)**2) as sympy writes it, x**2/scale**2, was inf past x/scale = 1.3e154 and 0/0 or inf/inf
    # where x and scale are both tiny or both large (a half-Cauchy log-density: 26.9 bits float64 as derived).
    # log1p((x/scale)**2) with the quotient computed whole where finite, 2 log|x| - 2 log(scale) where inf.
    positive = sp.Symbol("scale", positive=True)
    forward = -sp.log(positive) - log1p((x / positive) ** 2)
    sampling = Sampling(((x, Domain(ge=0)), (positive, POSITIVE)))
    choice = stabilise(forward, sampling)
    for point in ((1e200, 1.0), (8.5e177, 1.26e308), (2.4e-301, 1.3e-229), (3.0, 5.0), (1e-20, 1e-30)):
        with mpmath.workprec(500):
            px, ps = (mpmath.mpf(p) for p in point)
            exact = -mpmath.log(ps) - mpmath.log1p((px / ps) ** 2)
        value = evaluated(choice.chosen, (x, positive), point, np.float64)
        assert bits(value, exact) <= 2, (point, value, exact, choice.chosen)


def test_a_log_of_a_sum_that_overflows_takes_the_log_of_its_larger_term_apart():
    # A Student t's partial in df, as the difference family writes log1p(x**2/df) where the ratio is far from 1:
    # log(df + x**2) - log(df), -inf past |x| = 1.3e154 where the partial is a finite 1e303 (df = 1.8e-304).
    # Where the sum overflows, the logs of the larger term's factors plus log1p of the other divided through.
    from rulegen.derive.stabilise.families import _logs_taken_apart

    df = sp.Symbol("df", positive=True)
    far = [(1e200, 2.8e-226), (-7.8e177, 1.8e-304), (1.7976931348623157e308, 2e-280)]
    # The sum alone, where it overflows by its larger term or by both, and where it does not.
    for written, points in (
        (sp.log(df + x**2) - sp.log(df), far),
        (sp.log(df + x**2), [*far, (1e154, 1.7e308), (2e154, 1e308), (3.0, 5.0), (1e-3, 1e300), (1e150, 1.0)]),
    ):
        apart = _logs_taken_apart(written)
        for point in points:
            with mpmath.workprec(500):
                px, pdf = (mpmath.mpf(p) for p in point)
                exact = sp.lambdify((x, df), written, "mpmath")(px, pdf)
            value = evaluated(apart, (x, df), point, np.float64)
            assert bits(value, exact) <= 2, (written, point, value, exact)
    # Terms of unknown sign are left as written: log(a + b**2) may be nan for a < 0, whatever the logs of b.
    assert _logs_taken_apart(sp.log(a + x**2)) == sp.log(a + x**2)


def test_a_difference_of_reciprocals_divides_by_the_larger_magnitude_whatever_its_stand_ins_assume():
    # A pole part of a negative binomial's digamma(k + r) - digamma(r), 1/r - 1/(k + r), is joined on positive
    # symbols that stand for r and k + r; k + r is negative at k = -1894, where the Max of the two is r = 3e-36 and
    # (k/r)/(k + r) overflowed float32 (exact 3.4e35): the gate turned the gamma series' form down for it.
    from rulegen.derive.expr import reciprocal_difference

    k, r = sp.Symbol("k", real=True), sp.Symbol("r", positive=True)
    p, q = sp.Dummy("p", positive=True), sp.Dummy("q", positive=True)
    joined = reciprocal_difference(p, q, q - p, (r, k + r)).xreplace({p: r, q: k + r})
    for point in ((-1893.951904296875, 2.9626710413405055e-36), (-2055.04345703125, 1.097474676613614e-38)):
        point32 = tuple(float(np.float32(v)) for v in point)
        with mpmath.workprec(300):
            pk, pr = (mpmath.mpf(v) for v in point32)
            exact = 1 / pr - 1 / (pk + pr)
        value = evaluated(joined, (k, r), point32, np.float32)
        assert bits(value, exact, np.float32) <= 1, (point, value, exact)


def test_a_log_of_a_power_of_a_quotient_takes_its_logs_apart_only_where_it_under_or_overflows():
    # A KL divergence of two normals has log((p/q)**2): as written -inf where (p/q)**2 underflows (p/q = 2.3e-208),
    # and inf where it overflows.  Elsewhere it is as written: the search measures it as the derived form there.
    from rulegen.derive.stabilise.families import _logs_taken_apart

    p, q = sp.Symbol("p", positive=True), sp.Symbol("q", positive=True)
    apart = _logs_taken_apart(sp.log(p**2 / q**2))
    for point in ((5.2e-152, 2.3e56), (1e200, 1e-200), (2.0, 7.0), (1e-300, 1e-300)):
        with mpmath.workprec(300):
            pp, pq = (mpmath.mpf(v) for v in point)
            exact = 2 * mpmath.log(pp / pq)
        value = evaluated(apart, (p, q), point, np.float64)
        assert bits(value, exact) <= 2, (point, value, exact)
    assert evaluated(apart, (p, q), (3.5, 3.0), np.float64) == math.log((3.5 / 3.0) ** 2)


def test_a_repair_never_takes_a_form_measured_worse_than_the_choice(tmp_path):
    from rulegen.derive.partials import derive_rule
    from rulegen.spec.rules import read_rule_file

    # A Gumbel log-density's partial in its scale: the search's choice (its terms over one denominator) is inf at
    # one float32 point of the gate's sample, and the repair took the derived form reassociated in its place,
    # finite there, ranked a tenth of a bit behind on the search's points and 19 bits behind on the suite's
    # (6.3 bits float64 over the three partials, from 0.1).  A repair tries only forms measured no worse.
    path = tmp_path / "gumbel.yaml"
    path.write_text(
        "name: gumbel_log_prob\ninputs: {x: {}, loc: {}, scale: {assume: positive, domain: {gt: 0}}}\n"
        "forward: -((x - loc) / scale + exp(-(x - loc) / scale)) - log(scale)\n"
    )
    (rule,) = read_rule_file(path)
    (choice,) = [c for c in derive_rule(rule, [rule.name]).choices if c.quantity == "dout/dscale"]
    # The search's sample holds each input's smallest subnormal, where the choice loses a few bits (0.29 here).
    assert sum(choice.bits_after) <= 0.35, (choice.family, choice.bits_after)


COUNT = sp.Symbol("k", real=True, nonnegative=True)
RATE = sp.Symbol("rate", real=True, positive=True)
COUNTS = Sampling(((COUNT, Domain(ge=0)), (RATE, POSITIVE)))


def _poisson_exact(k: float, rate: float) -> tuple[mpmath.mpf, mpmath.mpf]:
    """A Poisson log-mass and its partial in k at (k, rate), exactly."""
    with mpmath.workprec(1200):
        k_, rate_ = mpmath.mpf(k), mpmath.mpf(rate)
        value = k_ * mpmath.log(rate_) - rate_ - mpmath.loggamma(k_ + 1)
        return value, mpmath.log(rate_) - mpmath.digamma(k_ + 1)


@pytest.mark.parametrize(
    ("dtype", "point"),
    [
        (np.float64, (1e305, 1e305)),
        (np.float64, (1e307, 1e307)),
        (np.float64, (1.7e308, 1.7e308)),
        (np.float64, (1e6, 2.5e5)),
        (np.float32, (1e36, 1e36)),
        (np.float32, (3.4e38, 3.4e38)),
    ],
)
def test_a_poisson_log_mass_joins_its_log_to_the_loggamma_s_series(dtype, point):
    # torch's Poisson.log_prob: xlogy(k, rate) - loggamma(k + 1) is inf - inf past k = 2.5e305 (float64) and loses
    # every bit before that, where the log-mass is -log(2 pi k)/2 (-356 at k = rate = 1.7e308).
    from rulegen.derive.functions import xlogy

    expr = xlogy(COUNT, RATE) - RATE - sp.loggamma(COUNT + 1)
    choice = stabilise(expr, COUNTS)
    exact = _poisson_exact(*point)[0]
    assert bits(evaluated(choice.chosen, (COUNT, RATE), point, dtype), exact, dtype) <= 2, choice.chosen
    if point[0] > 1e30:  # as written: every bit lost, nan from 1e307 (float64)
        assert not bits(evaluated(expr, (COUNT, RATE), point, dtype), exact, dtype) <= 10


@pytest.mark.parametrize("point", [(1e305, 1e305), (1e12, 1.000001e12), (4e40, 1e40)])
def test_a_poisson_log_mass_s_partial_in_k_joins_its_log_to_the_digamma_s_series(point):
    # log(rate) - digamma(k + 1): two logs that agree to every digit where rate ~ k, log(rate/k) - 1/(2k) + ...
    expr = sp.log(RATE) - sp.polygamma(0, COUNT + 1)
    choice = stabilise(expr, COUNTS)
    exact = _poisson_exact(*point)[1]
    assert bits(evaluated(choice.chosen, (COUNT, RATE), point, np.float64), exact) <= 2, choice.chosen
    if point != (4e40, 1e40):
        assert not bits(evaluated(expr, (COUNT, RATE), point, np.float64), exact) <= 10  # as derived


def test_a_negative_binomial_log_mass_takes_its_gamma_series_in_the_arguments_bases():
    # torch's NegativeBinomial.log_prob: loggamma(k + r) - loggamma(k + 1) - loggamma(r) with k near the largest
    # float.  In the arguments themselves the series leave (k + 1) log(k + 1) apart, which overflows; in their
    # bases k + r, k and r, (k + r) log(k + r) - k log k - r log r is k log1p(r/k) + r log1p(k/r).  One test over
    # the points: parametrized, two test workers could each search it cold at once.
    count, r, logits = COUNT, sp.Symbol("r", real=True, positive=True), sp.Symbol("logits", real=True)
    expr = -r * softplus(logits) - count * softplus(-logits)
    expr += sp.loggamma(count + r) - sp.loggamma(count + 1) - sp.loggamma(r)
    choice = stabilise(expr, Sampling(((count, Domain(ge=0)), (r, POSITIVE), (logits, Domain()))))
    for point in [
        (2.486107661297034e306, 1.1822086614231764e307, -3.26),
        (4.465955247752999e305, 8.721649393522329e282, 0.99),
    ]:
        with mpmath.workprec(1200):
            k_, r_, l_ = (mpmath.mpf(v) for v in point)
            exact = -r_ * mpmath.log1p(mpmath.exp(l_)) - k_ * mpmath.log1p(mpmath.exp(-l_))
            exact += mpmath.loggamma(k_ + r_) - mpmath.loggamma(k_ + 1) - mpmath.loggamma(r_)
        assert bits(evaluated(choice.chosen, (count, r, logits), point, np.float64), exact) <= 8, choice.chosen
        assert not math.isfinite(evaluated(expr, (count, r, logits), point, np.float64))  # as written: inf - inf


def test_a_difference_of_logs_of_a_sum_and_its_part_never_computes_the_sum():
    # log(k + r) - log(k) for positive k and r is log1p(r/k): k + r overflows where the difference is log(2).
    from rulegen.derive.expr import log_difference

    k, r = sp.symbols("k r", positive=True)
    difference = log_difference(k + r, k, r)
    assert evaluated(difference, (k, r), (1.7e308, 1.7e308), np.float64) == math.log(2)
    assert evaluated(difference, (k, r), (1e-300, 1e300), np.float64) == pytest.approx(1381.551055796427, rel=1e-15)
    # Either way round: log(k) - log(k + r) (a Beta KL divergence's partial in q1, log(q1) - log(q1 + q0)) is
    # -log1p(r/k), not -inf at k = r = 1.9e38 in float32.
    reversed_difference = log_difference(k, k + r, -r)
    for dtype, point in [(np.float32, (1.88e38, 1.88e38)), (np.float64, (1.7e308, 1.7e308)), (np.float64, (3.0, 5.0))]:
        exact = -math.log1p(point[1] / point[0])
        assert evaluated(reversed_difference, (k, r), point, dtype) == pytest.approx(exact, rel=1e-6), point


def test_a_product_whose_every_order_overflows_somewhere_is_scaled():
    # A log-normal log-density's partial in x, -1/x - (log(x) - loc)/(scale**2 x): as derived, scale**2 underflows
    # where the quotient is in range, and every order of the products overflows at some point where the partial is
    # a float (t / s / s / x at t = -8.1e301, s = 1.1e-17, x = 3.4e289, whose partial is -1.9e46).  The search
    # takes the product scaled (`power_product`); before, it kept the derived form (3.8 bits float64 on its points).
    loc = sp.Symbol("loc", real=True)
    partial = -1 / x - (sp.log(x) - loc) / (scale**2 * x)
    sampling = Sampling(((loc, Domain()), (scale, POSITIVE), (x, POSITIVE)))
    choice = stabilise(partial, sampling)
    assert "products scaled" in choice.family
    assert choice.bits_after[0] < 0.5 < choice.bits_before[0]
    variables = (loc, scale, x)
    for point in [(8.088664238509922e301, 1.1253405361045708e-17, 3.3867879885711135e289), (0.0, 1e-200, 1e250)]:
        mpmath.mp.prec = 200
        exact = -1 / mpmath.mpf(point[2]) - (mpmath.log(point[2]) - point[0]) / (mpmath.mpf(point[1]) ** 2 * point[2])
        value = evaluated(choice.chosen, variables, point, np.float64)
        assert math.isfinite(value)
        assert bits(value, exact) <= 2


def test_an_even_sum_of_softplus_terms_is_one_form_at_the_absolute_value():
    # The logistic log-density, -u - 2 softplus(-u): below 0 its form by sign is the form above 0 at -u, the same
    # operations on the same numbers.  A `where` of the two computed both (under jit half again autodiff's
    # operations); at |u| it is one, and every value as before, to the bit.
    from rulegen.derive.stabilise.families import _softplus_by_sign

    forward = -x - 2 * softplus(-x)
    folded = _softplus_by_sign(forward)
    assert not folded.has(sp.Piecewise) and folded.has(sp.Abs), folded
    by_sign = sp.Piecewise((x - 2 * softplus(x), x < 0), (-x - 2 * softplus(-x), True))
    for dtype in (np.float32, np.float64):
        for point in (-1e30, -88.5, -3.0, -1e-30, 0.0, 2.5, 40.0, 3e38):
            assert evaluated(folded, (x,), (point,), dtype) == evaluated(by_sign, (x,), (point,), dtype), point
    # Not even in z (a Bernoulli log-mass): by sign, as before.
    y, z = sp.Symbol("y", real=True), sp.Symbol("z", real=True)
    assert _softplus_by_sign(-y * softplus(-z) - (1 - y) * softplus(z)).has(sp.Piecewise)


# XLA flushes a subnormal result to 0: df/2 at the smallest normal df is 0 there, where loggamma(df/2) is inf and
# digamma(df/2) nan, and the densities of a Student t are finite.  The forms are evaluated as XLA computes them.
SMALLEST_NORMAL = [(np.float64, float(np.finfo(np.float64).tiny)), (np.float32, float(np.finfo(np.float32).tiny))]


def xla_evaluated(expr: sp.Expr, variables: tuple[sp.Symbol, ...], point: tuple[float, ...], dtype: type) -> float:
    from rulegen.derive.stabilise.gate import as_computed
    from rulegen.derive.stabilise.points import _evaluated

    columns = [np.asarray([v], dtype=dtype) for v in point]
    values = _evaluated(as_computed(expr), variables, columns, dtype, flushed=True)
    assert values is not None
    return float(np.asarray(values).reshape(-1)[0])


def test_a_loggamma_or_digamma_of_a_flushed_argument_takes_out_its_pole_computed_of_the_unscaled_one():
    # loggamma(u) = loggamma(u + 1) - log(u) and digamma(u) = digamma(u + 1) - 1/u, u = df/2 as log(df) - log(2) and
    # 2/df where XLA flushes u to 0: computed of u itself, log(u) and 1/u are as infinite as the calls there.
    # Elsewhere the form computes what the call does.
    from rulegen.derive.stabilise.families import _poles_taken_out

    df = sp.Symbol("df", positive=True)
    half = sp.Float(0.5)
    for written in (sp.loggamma(half * df), -half * sp.digamma(half * df)):
        taken = _poles_taken_out(written)
        for dtype, tiny in SMALLEST_NORMAL:
            for value in (tiny, 1.5 * tiny, 1e-30, 0.3, 0.99, 1.01, 2.0, 4.0, 5.0, 1e10):
                with mpmath.workprec(3000):
                    exact = sp.lambdify(df, written, "mpmath")(mpmath.mpf(float(dtype(value))))
                got = xla_evaluated(taken, (df,), (value,), dtype)
                assert bits(got, exact, dtype) <= 2, (written, dtype, value, got)
                assert evaluated(taken, (df,), (value,), dtype) == evaluated(written, (df,), (value,), dtype)
            assert not math.isfinite(xla_evaluated(written, (df,), (tiny,), dtype))  # as written
    # An argument that is not a fraction of one is never flushed where its inputs are not: kept.
    for kept in (sp.loggamma(half * df + half) + df, sp.loggamma(df) + sp.digamma(2 * df)):
        assert _poles_taken_out(kept) == kept


@pytest.mark.parametrize("which", ["log density", "entropy"])
def test_a_student_t_s_normaliser_is_finite_where_xla_flushes_half_its_degrees_of_freedom(which):
    # torch's StudentT.log_prob and entropy: their loggamma(df/2) and digamma(df/2) are inf and nan as XLA computes
    # them at df = 2.2e-308 (float32: 1.2e-38), where the log-density is -710 and the entropy 4.5e307.  The gamma
    # series' form with its poles taken out is finite there, and computes what it does elsewhere, but for the order of
    # its sums (the repair took only forms no worse on the search's points: the log-density's was 0.008 behind).
    df = sp.Symbol("df", positive=True)
    half = sp.Float(0.5)
    normaliser = sp.loggamma(half * df) - sp.loggamma(half * (df + 1))
    if which == "log density":
        variables = (x, df)
        expr = -half * (df + 1) * log1p(x**2 / df) - (half * sp.log(df) + half * sp.log(sp.pi) + normaliser)
        sampling = Sampling(((x, Domain()), (df, POSITIVE)))
    else:
        variables = (df,)
        digammas = half * (df + 1) * (sp.digamma(half * (df + 1)) - sp.digamma(half * df))
        expr = digammas + half * sp.log(df) + normaliser + sp.loggamma(half)
        sampling = Sampling(((df, POSITIVE),))
    choice = stabilise(expr, sampling)
    for dtype, tiny in SMALLEST_NORMAL:
        for value in (tiny, 1.5 * tiny):
            point = (2.0, value)[-len(variables) :]
            with mpmath.workprec(3000):
                exact = sp.lambdify(variables, expr, "mpmath")(*(mpmath.mpf(float(dtype(p))) for p in point))
            got = xla_evaluated(choice.chosen, variables, point, dtype)
            assert bits(got, exact, dtype) <= 2, (dtype, point, got, float(exact), choice.family)


def test_a_student_t_s_partial_in_df_is_finite_where_xla_flushes_half_its_degrees_of_freedom(tmp_path):
    # Its best form is a derivative of a forward form with its logs taken apart, whose -digamma(df/2)/2 is nan as XLA
    # computes it at df = 2.2e-308, where the partial is 1/df: the poles are taken out of the best forms as well.
    from rulegen.derive.partials import derive_rule
    from tests.conftest import rules_from

    (rule,) = rules_from(
        tmp_path,
        "name: student_t_log_prob\ninputs: {x: {}, df: {assume: positive, domain: {gt: 0}}}\n"
        "forward: -0.5 * (df + 1) * log1p(x**2 / df) - (0.5 * log(df) + 0.5 * log(pi) + loggamma(0.5 * df)"
        " - loggamma(0.5 * (df + 1)))\n",
    )
    (choice,) = [c for c in derive_rule(rule, [rule.name]).choices if c.quantity == "dout/ddf"]
    variables = tuple(sorted(choice.derived.free_symbols, key=lambda s: s.name != "x"))
    for dtype, tiny in SMALLEST_NORMAL:
        with mpmath.workprec(3000):
            exact = sp.lambdify(variables, choice.derived, "mpmath")(mpmath.mpf(-21.92), mpmath.mpf(tiny))
        got = xla_evaluated(choice.chosen, variables, (-21.92, tiny), dtype)
        assert bits(got, exact, dtype) <= 2, (dtype, got, float(exact), choice.family)
    # Its log1p beside its argument's rational terms and its difference of digammas at large df, each without
    # its cancellation: 15.1 / 8.6 bits on the search's points (float64 / float32) when neither was.
    assert max(choice.bits_after) < 2, (choice.family, choice.bits_after)


def test_a_call_past_the_threshold_alone_is_a_series_that_cancels_the_other_terms():
    # (p - q) digamma(p) - loggamma(p) leads with p, which the -p beside it cancels: at p = 1e306 and q = 10.96
    # (only p past 2**5) the calls as written are inf - inf, and at 5.4e292 every bit is lost, where the value is
    # -q log(p) + log(p)/2 - 1/2 + loggamma(q) + ... (a KL divergence of two Gammas leads so).
    from rulegen.derive.stabilise.asymptotic import several_argument_series

    p, q = P, Q
    expr = (p - q) * sp.polygamma(0, p) - sp.loggamma(p) - p + sp.loggamma(q)
    series = several_argument_series(expr)
    assert series is not None
    for point in ((1e306, 10.96), (5.4e292, 10.96), (1e20, 0.3), (3.0, 40.0), (1e10, 1e-300)):
        with mpmath.workprec(2000):
            exact = sp.lambdify((p, q), expr, "mpmath")(*map(mpmath.mpf, point))
        assert bits(evaluated(series, (p, q), point, np.float64), exact) <= 2, point
    assert math.isnan(evaluated(expr, (p, q), (1e306, 10.96), np.float64))  # as written


P_C, P_RATE, Q_C, Q_RATE = sp.symbols("p_c p_rate q_c q_rate", positive=True)
#: torch's kl_divergence(Gamma, Gamma).
GAMMA_KL = (
    Q_C * sp.log(P_RATE / Q_RATE)
    + sp.loggamma(Q_C)
    - sp.loggamma(P_C)
    + (P_C - Q_C) * sp.polygamma(0, P_C)
    + (Q_RATE - P_RATE) * (P_C / P_RATE)
)


@pytest.mark.parametrize(
    ("dtype", "point"),
    [
        # Only p_c past the threshold: its series cancels the rate term's -p_c (inf - inf as written).
        (np.float64, (5.425879068999402e292, 7.175392120627892e291, 10.96, 5.067413767855584e-273)),
        (np.float64, (2.7510690097567857e114, 9.224230258490201e291, 3.9885348585909647e-168, 1.7303218987873364e189)),
        # Both past, p_c q_rate overflowing in the product the series leave: reassociated.
        (np.float64, (1.1595499930738382e306, 1873066435933.546, 5.251107439765306e266, 259589903.51855415)),
        # Only q_c past: p_c (q_rate - p_rate)/p_rate as derived, where (q_rate - p_rate)/p_rate overflows.
        (np.float64, (2.424061362559707e-91, 2.6604598945933062e-135, 7.65378448612464e110, 5.675254310611167e173)),
        # None past: the calls' poles joined, log(p_rate/q_rate) taken apart where the ratio overflows.
        (np.float64, (10.96, 6.212489507751478e150, 9.968061931431294e-12, 5.8569062518193637e-244)),
        (np.float64, (4.009577364632919e-307, 6.420907213318526e-123, 5.48, 9.245953068182038e205)),
        (np.float32, (3.6421137952126534e19, 1.4382811482706642e29, 2231844992974848.0, 21.920000076293945)),
        (np.float32, (5.00402598560015e32, 2.0726396620478006e37, 2.0046775262017036e-07, 2.93565161913574e-39)),
        (np.float32, (10.960000038146973, 181834825728.0, 10.960000991821289, 7.997446314563123e-38)),
        (np.float64, (3.0, 2.0, 5.0, 0.5)),
    ],
)
def test_a_gamma_kl_divergence_takes_its_series_with_the_other_terms_mended(dtype, point):
    # The series' branches leave q_c log(p_rate/q_rate) and p_c q_rate/p_rate as they were, which overflow where
    # the divergence is a float (9.8 bits float64 mean as the logs taken apart alone chose, inf or nan at 11 of 64
    # points): their logs are taken apart and their products reassociated in the series' form.
    variables = (P_C, P_RATE, Q_C, Q_RATE)
    choice = stabilise(GAMMA_KL, Sampling(tuple((v, POSITIVE) for v in variables)))
    with mpmath.workprec(2000):
        exact = sp.lambdify(variables, GAMMA_KL, "mpmath")(*(mpmath.mpf(float(dtype(v))) for v in point))
    value = evaluated(choice.chosen, variables, point, dtype)
    assert bits(value, exact, dtype) <= 4, (point, value, float(exact), choice.family)


@pytest.mark.parametrize(
    ("dtype", "point"),
    [
        (np.float32, (5.48, 8.4e37)),  # r and k + r past the threshold, k not
        (np.float32, (1e-45, 8.4e37)),
        (np.float64, (5.48, 1e300)),
        (np.float64, (1.7976931348623157e308, 3.18e-164)),  # k and k + r past it, r not
        (np.float32, (3.4028234663852886e38, 2.27e35)),  # k + r overflows where its log does not
    ],
)
def test_calls_at_two_of_three_bases_past_the_threshold_are_their_series(dtype, point):
    # A negative binomial's loggamma(k + r) - loggamma(k + 1) - loggamma(r), k a count (no sign assumed): with r
    # alone small, or k alone, the two calls whose bases are past the threshold lead with terms that cancel, inf -
    # inf as written (or every digit lost: 0 for 3779.8 at k = 5.48, r = 1e300).
    from rulegen.derive.stabilise.asymptotic import released, several_argument_series_in_bases

    k, r = sp.Symbol("k", real=True), sp.Symbol("r", positive=True)
    expr = sp.loggamma(k + r) - sp.loggamma(k + 1) - sp.loggamma(r)
    form = several_argument_series_in_bases(expr)
    assert form is not None
    point = tuple(float(dtype(v)) for v in point)
    with mpmath.workprec(2000):
        at_k, at_r = mpmath.mpf(point[0]), mpmath.mpf(point[1])
        exact = mpmath.loggamma(at_k + at_r) - mpmath.loggamma(at_k + 1) - mpmath.loggamma(at_r)
    written = evaluated(expr, (k, r), point, dtype)
    assert not bits(written, exact, dtype) <= 2, written  # as written: nan, or every digit lost
    assert bits(evaluated(released(form), (k, r), point, dtype), exact, dtype) <= 2


P1, P0, Q1, Q0 = sp.symbols("p1 p0 q1 q0", positive=True)
#: torch's kl_divergence(Beta, Beta).
BETA_KL = (
    (sp.loggamma(Q1) + sp.loggamma(Q0) + sp.loggamma(P1 + P0))
    - (sp.loggamma(P1) + sp.loggamma(P0) + sp.loggamma(Q1 + Q0))
    + (P1 - Q1) * sp.digamma(P1)
    + (P0 - Q0) * sp.digamma(P0)
    + (Q1 + Q0 - P1 - P0) * sp.digamma(P1 + P0)
)

#: Points where a Beta KL divergence's calls as written cancel or overflow, and every set of arguments past the
#: threshold in each group is another branch.
_BETA_KL_POINTS = [
    # Every argument past the threshold: the log-Beta function's q0 log(q0) - (q1 + q0) log(q1 + q0) as the sums
    # of parts, q0 = max.
    (np.float64, (8.323867627145377e204, 1.2949556366033085e300, 1.2277271721237231e79, 1.7976931348623157e308), 2),
    # -q1 log(p1) + (q1 + q0) log(p1 + p0) - q0 log(p0), the weights joined again until none is left: q1 log((p1 +
    # p0)/p1), not inf - inf at q1 = 1.8e307.
    (np.float64, (1.2127012129996428e145, 2.368847542581901e100, 1.7667743329126636e307, 1.2790063429253585e-299), 2),
    # No p past the threshold: q1 (1/p1 - 1/(p1 + p0)), the weight multiplying before the subnormal p1 divides.
    (np.float64, (1.506e-320, 3.0679815002699608e-230, 6.731979505442542e-57, 3.4841112390499917e-193), 2),
    (np.float32, (1.0727719068527222, 1.0, 186.8392791748047, 1.1273868867298401e38), 2),
    (np.float32, (7.730848856154698e23, 3.5801213241294334e21, 6.475802004434193e34, 4.2454964846580845e37), 2),
    # p1 + p0 alone past the threshold: q0 log(p1 + p0) beside -q0 digamma(p0 + 1), the call one further on,
    # summed before q0 multiplies (each product overflows float32); the sum cancels 4 bits of its 0.29, as it does
    # wherever the calls are below the threshold (3.3 bits, 9 units in the last place, at the ordinary point below:
    # terms up to 4.1 summed to 1.8, the rounding of each difference of calls carried).
    (np.float32, (10.960000038146973, 31.033830642700195, 5.90120320222456e36, 1.880591508821656e38), 5),
    (np.float64, (3.0, 2.0, 5.0, 0.5), 4),
]


@pytest.mark.parametrize(("dtype", "point", "bar"), _BETA_KL_POINTS)
def test_calls_whose_arguments_share_no_variable_are_series_in_each_group_of_arguments(dtype, point, bar):
    # A KL divergence of two Betas calls the gamma family at six arguments, p1, p0, p1 + p0 and q1, q0, q1 + q0:
    # too many sets of them past 2**5 for a branch each, so the one series branch (all past) and the poles (none
    # past) left every mixed point as written, 36 bits float64 mean.  The two groups share no variable, and a
    # branch per set of each group's taken together (25) has the calls past the threshold as series and the others
    # as their poles, like terms joined, weights in the other group's variables multiplying the differences.
    variables = (P1, P0, Q1, Q0)
    series = _grouped_beta_kl()
    with mpmath.workprec(2000):
        exact = sp.lambdify(variables, BETA_KL, "mpmath")(*(mpmath.mpf(float(dtype(v))) for v in point))
    assert bits(evaluated(series, variables, point, dtype), exact, dtype) <= bar, point
    written = evaluated(BETA_KL, variables, point, dtype)
    assert point == (3.0, 2.0, 5.0, 0.5) or not bits(written, exact, dtype) <= 2


@pytest.mark.parametrize(
    "point",
    [
        (5e-324, 5.3692368096093705e125, 4.71616589036374e-144, 1.6463591504222858e-93),
        (2.83893186815e-312, 3.2930116778319797e35, 1.4933167441686373e-101, 1.0429797899116503e159),
    ],
)
def test_a_weight_over_a_pole_stays_inside_its_quotient_in_each_group(point):
    # A Gamma KL divergence's (p_c - q_c) digamma(p_c) below the threshold is its pole part, -1 + q_c/p_c, and the
    # call one further on: q_c/p_c is 9.5e179 at p_c = 5e-324, where q_c (1/p_c - digamma(p_c + 1)), the weight
    # summed with the call's, is inf.
    from rulegen.derive.stabilise.asymptotic import grouped_argument_series, released

    variables = (P_C, P_RATE, Q_C, Q_RATE)
    series = grouped_argument_series(GAMMA_KL)
    assert series is not None
    with mpmath.workprec(3000):
        exact = sp.lambdify(variables, GAMMA_KL, "mpmath")(*(mpmath.mpf(v) for v in point))
    assert bits(evaluated(released(series), variables, point, np.float64), exact) <= 2


@functools.cache
def _grouped_beta_kl() -> sp.Expr:
    """The Beta KL divergence's series by groups of arguments, made once per test process (it takes seconds)."""
    from rulegen.derive.stabilise.asymptotic import grouped_argument_series

    series = grouped_argument_series(BETA_KL)
    assert series is not None
    return series


#: Points of a Beta KL divergence's partial in q1 where the derived form loses bits (both dtypes) or is exact.
_BETA_KL_Q1_POINTS = [
    (np.float32, (1.0727719068527222, 1.0, 186.8392791748047, 1.1273868867298401e38)),
    (np.float32, (7.730848856154698e23, 3.5801213241294334e21, 6.475802004434193e34, 4.2454964846580845e37)),
    (np.float64, (1e-300, 3e200, 7e4, 1e-3)),
    (np.float64, (1.2127012129996428e145, 2.368847542581901e100, 1.7667743329126636e307, 1.2790063429253585e-299)),
    (np.float64, (3.0, 2.0, 5.0, 0.5)),
]


def test_a_beta_kl_divergence_s_partial_in_q1_is_searched_in_each_group_of_arguments():
    # digamma(q1) - digamma(q1 + q0) - digamma(p1) + digamma(p1 + p0): two groups of arguments that share no
    # variable; the search measures the series in each group and chooses it (22.1/6.1 -> 3.2/1.4 bits).  One test
    # over the points: parametrized, two test workers each searched it cold at once (30 s each).
    variables = (P1, P0, Q1, Q0)
    partial = BETA_KL.diff(Q1)
    choice = stabilise(partial, Sampling(tuple((v, POSITIVE) for v in variables)))
    assert "each group of arguments" in choice.family
    for dtype, point in _BETA_KL_Q1_POINTS:
        with mpmath.workprec(2000):
            exact = sp.lambdify(variables, partial, "mpmath")(*(mpmath.mpf(float(dtype(v))) for v in point))
        assert bits(evaluated(choice.chosen, variables, point, dtype), exact, dtype) <= 4, (point, choice.family)


@pytest.mark.parametrize("order", [None, 0, 1])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_difference_of_one_gamma_function_at_close_arguments_is_its_series_about_their_mean(order, dtype):
    # f(a + d) - f(a) as written keeps only the digits the two calls do not share: 0 at d = 1e-166.  Below the
    # series' threshold it is 2h (f'(m) + h**2/6 f'''(m) + ...) about the mean m, h = d/2, exact however small d is;
    # from d = (2a + d)/32 on it is as written, which loses at most log2(|f(a)|/|f(a + d) - f(a)|) bits there.
    from rulegen.derive.stabilise.asymptotic import close_difference

    call = sp.loggamma(x) if order is None else sp.polygamma(order, x)
    difference = close_difference(call, a + b + 1, a + 1)

    def exact_of(t: mpmath.mpf) -> mpmath.mpf:
        return mpmath.loggamma(t) if order is None else mpmath.psi(order, t)

    worst = 0.0
    for at_a in (1e-300, 0.685, 1.0, 7.5, 31.0):
        for d in (1e-300, 1e-166, 1e-30, 1e-8, 1e-3, (2 * at_a + 2) / 40):
            point = (dtype(at_a), dtype(d))
            if not point[1]:
                continue
            with mpmath.workprec(2000):
                u, v = (mpmath.mpf(float(t)) for t in point)
                exact = exact_of(u + v + 1) - exact_of(u + 1)
            if not abs(exact) >= np.finfo(dtype).tiny:
                continue
            worst = max(worst, bits(evaluated(difference, (a, b), point, dtype), exact, dtype))
            if d == 1e-166 and dtype is np.float64:
                written = evaluated(call.subs(x, a + b + 1) - call.subs(x, a + 1), (a, b), point, dtype)
                assert not bits(written, exact, dtype) <= 8
    # A few units in the last place: each polygamma's own rounding (scipy's), and the sum's.
    assert worst <= 3


def test_a_beta_kl_divergence_s_partial_in_q1_is_exact_where_p0_is_below_p1_s_precision():
    # The p group's digamma(p1 + p0) - digamma(p1), p1 below the threshold, is its pole part p0/(p1 (p1 + p0)) and
    # digamma(p1 + p0 + 1) - digamma(p1 + 1): as written the latter is 0 at p0 = 9.57e-167, and the partial,
    # p0 trigamma(p1) beside a q part far below it, came out 2.04e-166 for 2.81e-166 (51 bits).
    from rulegen.derive.stabilise.asymptotic import grouped_argument_series

    variables = (P1, P0, Q1, Q0)
    partial = BETA_KL.diff(Q1)
    series = grouped_argument_series(partial)
    assert series is not None
    for point in [(0.685, 9.57e-167, 1.18e287, 2.2e76), (0.685, 9.57e-167, 1.18e287, 5.4e-31), (3.0, 1e-9, 5.0, 0.5)]:
        with mpmath.workprec(3000):
            exact = sp.lambdify(variables, partial, "mpmath")(*(mpmath.mpf(v) for v in point))
        assert bits(evaluated(series, variables, point, np.float64), exact) <= 2, point
