"""Quotients of differences whose difference overflows: x - loc at x = 1e308, loc = -1e308 is inf, (x - loc)/scale at
scale = 1e10 is 2e298.  A Gumbel's log-density, -((x - loc)/scale + exp(-(x - loc)/scale)) - log(scale), was -inf
there and its partial in scale nan (2e288 exact), in both backends and both dtypes; the search's points and the
gate's, drawn over the float bit patterns, put two inputs at the top of the range with opposite signs once in
four million.  The divided-first repair computes such a quotient term by term where the whole is inf or nan and
its terms divided are not, and nowhere else."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
import sympy as sp

from rulegen.derive.measure import edge_pairs
from rulegen.derive.partials import derive_rule
from rulegen.derive.stabilise.families import _divided_first
from rulegen.derive.stabilise.gate import as_computed
from rulegen.derive.stabilise.points import _numpy_function
from rulegen.spec.rules import Domain
from tests.conftest import rules_from

GUMBEL = """\
name: gumbel_log_prob
inputs: {x: {}, loc: {}, scale: {assume: positive, domain: {gt: 0}}}
forward: -((x - loc) / scale + exp(-(x - loc) / scale)) - log(scale)
"""


def evaluated(expr: sp.Expr, variables: tuple[sp.Symbol, ...], point: tuple[float, ...], dtype: type) -> float:
    fn = _numpy_function(as_computed(expr), variables)
    assert fn is not None
    with np.errstate(all="ignore"):
        return float(np.asarray(fn(*(np.asarray([v], dtype=dtype) for v in point))).reshape(-1)[0])


def exact_gumbel(x: float, loc: float, scale: float) -> tuple[float, float]:
    """The log-density and its partial in scale, at 400 bits."""
    with mpmath.workprec(400):
        z = (mpmath.mpf(x) - loc) / scale
        value = -(z + mpmath.exp(-z)) - mpmath.log(scale)
        slope = (z - 1 - z * mpmath.exp(-z)) / scale
        return float(value), float(slope)


@pytest.mark.parametrize(
    ("point", "dtype"),
    [
        ((1e308, -1e308, 1e10), np.float64),
        ((1.7e308, -1.7e308, 3.0), np.float64),
        ((3e38, -3e38, 1e10), np.float32),
        # x - scale overflows in the partial over one denominator, where the derived partial is finite (7.2e-309).
        ((-1e308, 1.0, 1e308), np.float64),
    ],
)
def test_a_gumbel_log_density_is_finite_where_its_difference_overflows(tmp_path, search_cache_off, point, dtype):
    (rule,) = rules_from(tmp_path, GUMBEL)
    d = derive_rule(rule, [rule.name])
    variables = tuple(d.symbols[n] for n in ("x", "loc", "scale"))
    chosen = {c.quantity: c.chosen for c in d.choices}
    value, slope = exact_gumbel(*point)
    got = evaluated(chosen["out"], variables, point, dtype)
    assert got == pytest.approx(value, rel=1e-6), chosen["out"]
    got = evaluated(chosen["dout/dscale"], variables, point, dtype)
    assert got == pytest.approx(slope, rel=1e-6, abs=0), chosen["dout/dscale"]


def test_the_divided_first_form_computes_as_the_quotient_wherever_that_is_finite():
    x, loc = sp.symbols("x loc", real=True)
    scale = sp.Symbol("scale", positive=True)
    z = (x - loc) / scale
    variables = (x, loc, scale)
    form = _divided_first(-z - sp.log(scale))
    assert form.has(sp.Piecewise)
    # Bit for bit the quotient where it is finite; where x - loc = -1 and the quotient overflows, inf as it is,
    # not x/s - loc/s = inf - inf.
    for point in ((1.0, 2.0, 3.0), (1e300, 1e300 * (1 + 2**-50), 1e-8), (1.0, 2.0, 1e-320), (1e308, 1e307, 1e-10)):
        for dtype in (np.float64, np.float32):
            with np.errstate(all="ignore"):
                written = evaluated(-z - sp.log(scale), variables, point, dtype)
            assert evaluated(form, variables, point, dtype) == written or np.isnan(written), point
    assert evaluated(form, variables, (1e308, -1e308, 1e10), np.float64) == pytest.approx(-2e298 - np.log(1e10))
    # Not inside a function's argument: exp(-z) keeps its quotient whole.
    assert _divided_first(sp.exp(-z)) == sp.exp(-z)


def test_the_edge_pairs_put_each_pair_of_inputs_at_the_top_with_opposite_signs():
    drawn = [np.asarray([1.0, 2.0]), np.asarray([3.0, 4.0]), np.asarray([5.0, 6.0])]
    domains = [Domain(), Domain(), Domain(gt=0)]
    columns = edge_pairs(drawn, domains, np.float64, 2)
    top = np.finfo(np.float64).max / 2
    edge = [np.abs(c) >= top for c in columns]
    # Every point has two inputs at the top and of opposite signs, and `scale` never below 0.
    assert (np.sum(edge, axis=0) == 2).all()
    assert (columns[2] > 0).all()
    assert ((np.sign(columns[0]) != np.sign(columns[1])) | ~(edge[0] & edge[1])).all()
    assert (edge[0] & edge[1]).any() and (edge[0] & edge[2]).any() and (edge[1] & edge[2]).any()


def test_the_divided_first_condition_is_each_backend_s_isfinite():
    # "finite" was written as (|v|/2 < |v|) | (|v| == 0), a division and three comparisons per quotient in every
    # generated `where` (torch.where(((t4 == 0) | (t4 > (t4 / 2))) & ~(...), ...)): the backends' own isfinite
    # says what is tested, and computes the same (nan and inf are not finite, the smallest subnormal is).
    torch = pytest.importorskip("torch")
    from rulegen.derive.functions import isfinite
    from rulegen.plan.printers import JaxArrayPrinter, TorchArrayPrinter

    x, loc, scale = sp.symbols("x loc scale", real=True)
    form = _divided_first(-((x - loc) / scale + sp.exp(-(x - loc) / scale)) - sp.log(scale))
    (condition,) = (c for p in form.atoms(sp.Piecewise) for _, c in p.args if c != sp.true)
    assert condition.atoms(isfinite) and not condition.atoms(sp.core.relational.Relational)
    torch_code = TorchArrayPrinter().doprint(condition)
    assert "torch.isfinite(" in torch_code and "/ 2" not in torch_code
    assert "jnp.isfinite(" in JaxArrayPrinter().doprint(condition)
    for point, dtype in (((1e308, -1e308, 1e10), np.float64), ((3e38, -3e38, 1e10), np.float32)):
        assert evaluated(form, (x, loc, scale), point, dtype) == pytest.approx(exact_gumbel(*point)[0], rel=1e-6)
    values = torch.tensor([1.0, 5e-324, float("inf"), float("nan"), 0.0], dtype=torch.float64)
    got = eval(TorchArrayPrinter().doprint(isfinite(x)), {"torch": torch}, {"x": values})
    assert got.tolist() == [True, True, False, False, True]


def test_a_scaled_product_over_a_sum_s_divisor_takes_the_divisor_where_the_sum_overflows():
    # A Gamma KL divergence's partial in p_rate, (q_c - p_c q_rate/p_rate)/p_rate with its product scaled, was inf
    # in float32 at (p_c, p_rate, q_c, q_rate) = (2.8e23, 1.5e9, 0.047, 1.3e32): p_c q_rate/p_rate is 2.4e46, the
    # partial -1.7e37.  Divided first there, the product takes p_rate among its bases.
    from rulegen.derive.stabilise import Sampling, stabilise

    p_c, p_rate, q_c, q_rate = sp.symbols("p_c p_rate q_c q_rate", positive=True)
    forward = (
        q_c * sp.log(p_rate / q_rate)
        + sp.loggamma(q_c)
        - sp.loggamma(p_c)
        + (p_c - q_c) * sp.digamma(p_c)
        + (q_rate - p_rate) * (p_c / p_rate)
    )
    expr = sp.diff(forward, p_rate)
    positive = Domain(gt=0)
    choice = stabilise(expr, Sampling(tuple((s, positive) for s in (p_c, p_rate, q_c, q_rate))))
    point = (2.7891612147437663e23, 1453923456.0, 0.04671352356672287, 1.2707107299769035e32)
    with mpmath.workprec(200):
        exact = float(mpmath.mpf(point[2]) / point[1] - mpmath.mpf(point[0]) * point[3] / mpmath.mpf(point[1]) ** 2)
    got = evaluated(choice.chosen, (p_c, p_rate, q_c, q_rate), point, np.float32)
    assert got == pytest.approx(exact, rel=1e-6)
    assert evaluated(choice.chosen, (p_c, p_rate, q_c, q_rate), (2.0, 3.0, 5.0, 7.0), np.float64) == pytest.approx(
        5 / 3 - 14 / 9, rel=1e-14
    )


def exact_gumbel_partial(wrt: str, x: float, loc: float, scale: float) -> float:
    """A Gumbel log-density's partial in `wrt`, at 400 bits: expm1(u)/s in x, (u expm1(u) - 1)/s in scale."""
    with mpmath.workprec(400):
        u = (mpmath.mpf(loc) - x) / scale
        return float((mpmath.expm1(u) if wrt == "x" else u * mpmath.expm1(u) - 1) / scale)


@pytest.mark.parametrize(
    ("wrt", "point", "dtype"),
    [
        ("x", (-27000.0, 0.0, 300.0), np.float32),  # (loc - x)/scale = 90: exp overflows, the partial is 4e36
        ("x", (-4.3e36, -0.685, 5.0e34), np.float32),
        ("x", (-7.1e5, 0.0, 1000.0), np.float64),  # 710
        ("x", (0.5, -1.5, 2.0), np.float64),
        ("scale", (-26000.0, 0.0, 300.0), np.float32),  # 86.7: x exp(u) overflows, the partial is 1.3e37
        ("scale", (-4.3e36, -0.685, 5.0e34), np.float32),
        ("scale", (-7.1e5, 0.0, 1000.0), np.float64),
        ("scale", (0.5, -1.5, 2.0), np.float64),
    ],
)
def test_a_gumbel_partial_is_finite_where_its_exponential_alone_overflows(wrt, point, dtype):
    # The partial in x, expm1((loc - x)/scale)/scale, is a float where expm1 overflows (float32 from
    # (loc - x)/scale = 88.7) and scale is large enough.  The gate's rows near the exponential's overflow find those
    # points, drawn over the bit patterns once in thousands, and the scaled products take expm1(u) as expm1(u/2)
    # (exp(u/2) + 1), each factor in range.  The partial in scale, -1/s + (x - loc)/s**2 + (loc - x) exp(u)/s**2,
    # holds (loc - x) expm1(u)/s**2: an identity whose "1" is another term of the sum, not a number.
    from rulegen.derive.stabilise import Sampling, stabilise

    x, loc = sp.symbols("x loc", real=True)
    scale = sp.Symbol("scale", positive=True)
    forward = -((x - loc) / scale + sp.exp(-(x - loc) / scale)) - sp.log(scale)
    partial = sp.diff(forward, {"x": x, "scale": scale}[wrt])
    choice = stabilise(partial, Sampling(((x, Domain()), (loc, Domain()), (scale, Domain(gt=0)))))
    got = evaluated(choice.chosen, (x, loc, scale), point, dtype)
    assert got == pytest.approx(exact_gumbel_partial(wrt, *point), rel=1e-5), choice.chosen


def test_a_scaled_product_s_difference_is_divided_first_where_it_overflows():
    # The expm1 form of a Gumbel's partial in scale, its product scaled: loc - x among the bases is -inf at
    # x = 1e308, loc = -1e308, where the partial is 2e288; the divisor among the bases divides it term by term there.
    from rulegen.derive.functions import power_product

    x, loc = sp.symbols("x loc", real=True)
    scale = sp.Symbol("scale", positive=True)
    half = (loc - x) / (2 * scale)
    form = power_product(scale, -2, loc - x, 1, sp.exp(half) - 1, 1, sp.exp(half) + 1, 1) - 1 / scale
    repaired = _divided_first(form)
    variables = (x, loc, scale)
    for point, dtype in (
        ((1e308, -1e308, 1e10), np.float64),
        ((3e38, -3e38, 1e10), np.float32),
        # loc - x is finite here, its quotient by scale**2 is not: the divisor once is 8.9e292, the partial 8.9e300.
        ((1e300, 1e300 * (1 + 2**-50), 1e-8), np.float64),
    ):
        assert np.isinf(evaluated(form, variables, point, dtype))
        assert evaluated(repaired, variables, point, dtype) == pytest.approx(exact_gumbel(*point)[1], rel=1e-6)
    # Where the difference is finite the product is as it was, the divisor taken once more from its base's power.
    for point, dtype in (
        ((0.5, -1.5, 2.0), np.float32),
        ((-26000.0, 0.0, 300.0), np.float32),
        ((1e300, 1e300 * (1 - 2**-40), 1e30), np.float64),
    ):
        written = evaluated(form, variables, point, dtype)
        assert np.isfinite(written)
        assert evaluated(repaired, variables, point, dtype) == pytest.approx(written, rel=1e-6)


@pytest.mark.parametrize(
    ("point", "dtype"),
    [
        ((-1.25e-26, 0.2033, 2.2573841e20, 6.32229), np.float32),  # (m1 - m2)**2 overflows, the partial is -2e38
        ((0.0, 1.0, 1.3e154, 2e3), np.float64),
        ((0.5, 1.5, -2.0, 3.0), np.float64),
    ],
)
def test_a_square_over_a_cube_is_divided_first_where_the_square_alone_overflows(point, dtype):
    # A normal KL's partial in q's scale, 1/s2 - (s1**2 + (m1 - m2)**2)/s2**3.  The gate's rows near where a power
    # leaves the range find the points, drawn over the bit patterns once in a great many, where (m1 - m2)**2
    # overflows and the partial does not; the divisor's cube divides the terms' squares, ((m1 - m2)/s2)**2/s2.
    from rulegen.derive.stabilise import Sampling, stabilise

    m1, m2 = sp.symbols("m1 m2", real=True)
    s1, s2 = sp.symbols("s1 s2", positive=True)
    forward = sp.log(s2 / s1) + (s1**2 + (m1 - m2) ** 2) / (2 * s2**2) - sp.Rational(1, 2)
    partial = sp.diff(forward, s2)
    sampling = Sampling(((m1, Domain()), (s1, Domain(gt=0)), (m2, Domain()), (s2, Domain(gt=0))))
    choice = stabilise(partial, sampling)
    got = evaluated(choice.chosen, (m1, s1, m2, s2), point, dtype)
    with mpmath.workprec(300):
        a, b, c, d = (mpmath.mpf(v) for v in point)
        exact = float(1 / d - (b**2 + (a - c) ** 2) / d**3)
    assert got == pytest.approx(exact, rel=1e-5), choice.chosen


def test_a_square_and_its_reciprocal_are_moved_to_their_edge_once():
    # x**2 overflows and x**-2 underflows at the same |x|: the second set of rows would only weigh that band twice.
    from rulegen.derive.stabilise import Sampling
    from rulegen.derive.stabilise.gate import range_edges

    x, y = sp.symbols("x y")
    sampling = Sampling(((x, Domain()), (y, Domain())))
    columns = [np.linspace(-3.0, 3.0, 64), np.linspace(0.5, 2.0, 64)]
    alone = range_edges(x**2 * y, sampling, columns, np.float64)
    both = range_edges(x**2 * y + y / x**2, sampling, columns, np.float64)
    assert len(alone[0]) > 0
    assert all(np.array_equal(a, b) for a, b in zip(alone, both, strict=True))
    cube = range_edges(x**2 * y + y / x**3, sampling, columns, np.float64)
    assert len(cube[0]) == 2 * len(alone[0])


def expm1_ratio_slope() -> tuple[sp.Symbol, sp.Expr, sp.Expr]:
    """x, the derivative of expm1(x)/x as sympy derives it, and the search's form of it."""
    from sympy.codegen.cfunctions import expm1

    from rulegen.derive.stabilise import Sampling, stabilise

    x = sp.Symbol("x", real=True)
    derivative = sp.exp(x) / x - expm1(x) / x**2
    return x, derivative, stabilise(derivative, Sampling(((x, Domain()),))).chosen


def exact_expm1_ratio_slope(point: float, dtype: type) -> float:
    with mpmath.workprec(400):
        t = mpmath.mpf(float(dtype(point)))
        return float(mpmath.exp(t) / t - mpmath.expm1(t) / t**2)


@pytest.mark.parametrize(
    ("dtype", "point"),
    [(np.float64, 709.9), (np.float64, 712.0), (np.float64, 716.0), (np.float32, 88.8), (np.float32, 91.0)],
)
def test_a_regime_s_branch_has_its_products_scaled_where_an_exponential_alone_overflows(dtype, point):
    # expm1(x)/x's derivative takes a series below |x| = 1/16 and exp(x)/x - (1/x)(expm1(x)/x) above it: nan from
    # exp(x)'s overflow (x = 709.8) to the derivative's own (716.4), where it is a float.  The repair scaled the
    # products of forms without a `where` alone, and took a quotient the reassociation wrote as one factor.
    x, derivative, chosen = expm1_ratio_slope()
    exact = exact_expm1_ratio_slope(point, dtype)
    assert np.isnan(evaluated(derivative, (x,), (point,), dtype))
    assert evaluated(chosen, (x,), (point,), dtype) == pytest.approx(exact, rel=8 * float(np.finfo(dtype).eps))


@pytest.mark.parametrize(
    ("dtype", "point"),
    [
        (np.float64, 723.0),
        (np.float64, 1500.0),
        (np.float64, 1e30),
        (np.float64, 1.7e308),
        (np.float32, 100.0),
        (np.float32, 200.0),
        (np.float32, 1e20),
        (np.float32, 3.4e38),
    ],
)
def test_a_sum_whose_terms_overflow_to_opposite_infinities_is_the_infinity_the_exact_value_is(dtype, point):
    # exp(x)/x - expm1(x)/x**2, expm1(x)/x's derivative, has both terms past the range from x = 723 (float32: 97),
    # inf - inf = nan where the exact value is inf: every bit wrong, and nan where the caller's loss wants inf.
    x, derivative, chosen = expm1_ratio_slope()
    assert np.isnan(evaluated(derivative, (x,), (point,), dtype))
    assert evaluated(chosen, (x,), (point,), dtype) == np.inf


@pytest.mark.parametrize(
    ("dtype", "point"),
    [(np.float64, v) for v in (0.3, 5.0, 700.0, -800.0, -1e300)] + [(np.float32, v) for v in (0.3, 5.0, 88.0, -100.0)],
)
def test_the_sum_over_a_lead_term_leaves_the_sum_as_it_was_where_it_is_finite(dtype, point):
    x, _, chosen = expm1_ratio_slope()
    exact = exact_expm1_ratio_slope(point, dtype)
    assert evaluated(chosen, (x,), (point,), dtype) == pytest.approx(exact, rel=8 * float(np.finfo(dtype).eps))


def test_a_ratio_of_terms_has_what_they_share_divided_out():
    # The lead-term form's ratio: exp(x/2)**2 of the lead and expm1(x/2) (exp(x/2) + 1) of the other term, each inf
    # past x = 1419, are expm1(-x) together, finite on the whole line.
    from sympy.codegen.cfunctions import expm1

    from rulegen.derive.stabilise.families import _ratio

    x = sp.Symbol("x", real=True)
    lead = sp.exp(x / 2) ** 2 / x
    term = -expm1(x / 2) * (sp.exp(x / 2) + 1) / x**2
    assert _ratio(term, lead) == expm1(-x) / x


def test_a_regime_s_clamped_power_is_scaled_through_its_base_where_xla_flushes_the_power():
    # A regime's 1/x for |x| > 1/16 is where(|x| <= 1/16, 8, 1/x): a product scaled with that factor as one base
    # multiplied 1/x, subnormal from x = 4.5e307, which XLA reads as 0, by exp(x/2)**2 = inf (nan where the
    # derivative of expm1(x)/x is inf).  Its clamp goes onto x, whose power the product scales.
    from rulegen.derive.stabilise.points import _evaluated

    x, _, chosen = expm1_ratio_slope()
    for dtype, points in ((np.float64, [5e307, 1e308, 1.7976931348623157e308]), (np.float32, [1e38, 3.4e38])):
        computed = _evaluated(as_computed(chosen), (x,), [np.asarray(points, dtype)], dtype, flushed=True)
        assert np.all(computed == np.inf), (dtype, computed)


GAUSSIAN_KL = """\
name: gaussian_kl
inputs: {m1: {}, s1: {domain: [0.1, 10], assume: positive}, m2: {}, s2: {domain: [0.1, 10], assume: positive}}
forward: log(s2/s1) + (s1**2 + (m1 - m2)**2)/(2*s2**2) - 1/2
"""


def test_a_scaled_product_takes_a_sum_of_two_squares_as_the_square_of_their_hypot(tmp_path):
    # A Gaussian KL divergence's partial in s2, 1/s2 - (s1**2 + (m1 - m2)**2)/s2**3, is -2.0e38 at m1 - m2 = -2.3e20,
    # s2 = 6.3 in float32, where the sum of squares overflows: a base of its scaled product, it was -inf there.
    from rulegen.derive.stabilise.points import _evaluated

    (rule,) = rules_from(tmp_path, GAUSSIAN_KL)
    d = derive_rule(rule, [rule.name])
    variables = tuple(d.symbols[n] for n in ("m1", "s1", "m2", "s2"))
    chosen = {c.quantity: c.chosen for c in d.choices}["dout/ds2"]
    point = (-1.2484642878891973e-26, 0.20332543551921844, 2.257384101301327e20, 6.322289943695068)
    with mpmath.workprec(400):
        a, b, c, e = (mpmath.mpf(float(np.float32(v))) for v in point)
        exact = float(1 / e - (b**2 + (a - c) ** 2) / e**3)
    columns = [np.asarray([v], np.float32) for v in point]
    for flushed in (False, True):
        computed = _evaluated(as_computed(chosen), variables, columns, np.float32, flushed=flushed)
        assert computed[0] == pytest.approx(exact, rel=8 * float(np.finfo(np.float32).eps)), chosen


COSINE_DISTANCE = """\
name: cosine_distance
inputs: [a, b]
forward: 1 - a*b/(sqrt(a**2)*sqrt(b**2) + 1e-12)
"""


@pytest.mark.parametrize(
    ("dtype", "point", "exact"),
    [
        (np.float64, (1.7976931348623157e308, 2.8613713334855373e82), 0.0),
        (np.float64, (-3.945736354600411e212, 1.5652214790162075e240), 2.0),
        (np.float32, (3.4e38, 1.5e22), 0.0),
        (np.float32, (-3.4e38, 9575549.0), 2.0),
    ],
)
def test_a_quotient_whose_parts_overflow_is_taken_over_a_lead_term_of_its_divisor(tmp_path, dtype, point, exact):
    # A cosine distance as ML code writes it: a b and |a| |b| overflow together, inf/inf where the value is 0 or 2.
    from rulegen.derive.stabilise.points import _evaluated

    (rule,) = rules_from(tmp_path, COSINE_DISTANCE)
    d = derive_rule(rule, [rule.name])
    variables = tuple(d.symbols[n] for n in ("a", "b"))
    chosen = {c.quantity: c.chosen for c in d.choices}["out"]
    columns = [np.asarray([v], dtype) for v in point]
    for flushed in (False, True):
        computed = _evaluated(as_computed(chosen), variables, columns, dtype, flushed=flushed)
        assert computed[0] == pytest.approx(exact, abs=float(np.finfo(dtype).eps)), chosen


RECIPROCAL_DIFFERENCE = """\
name: reciprocal_difference
inputs: {x: {domain: {exclude: [0]}}}
forward: 1 / (x + 1) - 1 / x
"""


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_sum_over_a_lead_term_is_sought_past_the_points_that_repeat_an_input(tmp_path, dtype):
    # FPBench's 3.3.1: its partial, (1/x)**2/(x + 1) + (1/x)(1/(x + 1))/(x + 1) as the search reassociates it, is
    # inf - inf at the smallest subnormal of either sign, where it is inf.  The gate's first nan rows were all the
    # ordinary rows' x = -1, a pole, and the repair never saw the subnormal; and the ratio of the terms is x/(x + 1)
    # only with the reassociated quotients read as plain ones.
    from rulegen.derive.stabilise.points import _evaluated

    (rule,) = rules_from(tmp_path, RECIPROCAL_DIFFERENCE)
    d = derive_rule(rule, [rule.name])
    x = d.symbols["x"]
    chosen = {c.quantity: c.chosen for c in d.choices}["dout/dx"]
    tiny = float(np.finfo(dtype).smallest_subnormal)
    computed = _evaluated(as_computed(chosen), (x,), [np.asarray([-tiny, tiny, 0.5, -2.0], dtype)], dtype)
    assert computed[0] == computed[1] == np.inf, chosen
    assert computed[2:] == pytest.approx([32 / 9, -0.75], rel=4 * float(np.finfo(dtype).eps))
