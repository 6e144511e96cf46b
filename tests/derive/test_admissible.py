"""Admissibility: every form the search chooses is finite wherever the exact value is, on points it never saw.

The search decides on a few points per dtype; it once shipped, for atan2's
derivative, a regime split on |y| < 3.9e-14 that squared y/x, nan at
(x, y) = (1e-200, 1e-20) where the exact value (and autodiff) is -1e20.
The acceptance gate (rulegen/derive/stabilise/gate.py) validates each choice
on a disjoint sample with the special floats and mixed magnitudes; the
`accuracy` check samples the whole line the inputs allow and fails any
inf/nan where the exact value is a finite float, whatever autodiff does.
"""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest
import sympy as sp
import torch
from sympy.codegen.cfunctions import hypot

from rulegen.derive.functions import binade, divided, sigmoid
from rulegen.derive.stabilise import Sampling, admissible, stabilise
from rulegen.derive.stabilise.families import _identities, _norm_form, _powers_split
from rulegen.derive.stabilise.points import _numpy_function
from rulegen.spec.rules import Domain

jax.config.update("jax_enable_x64", True)
x, y = sp.symbols("x y", real=True)
WHOLE_LINE = Sampling(((x, Domain()), (y, Domain())))


def _old_atan2_partial() -> sp.Expr:
    """d atan2(y, x) / dx as the search chose it before the gate: a split on |y| alone, with its constants."""
    small = sp.Abs(y) < 3.9e-14
    t3 = sp.Piecewise((y, small), (1.9498291869979312e-14, True)) / x
    t4 = sp.Piecewise((7.799316747991725e-14, small), (y, True))
    return sp.Piecewise((-t3 * (1 / x) / (t3**2 + 1), small), (-1 / (t4 * ((x / t4) ** 2 + 1)), True))


def test_the_gate_refuses_a_regime_that_is_nan_where_the_derived_form_is_finite():
    derived = -y / (x**2 + y**2)
    old = _old_atan2_partial()
    with np.errstate(all="ignore"):
        at = _numpy_function(old, (x, y))(np.float64(1e-200), np.float64(1e-20))
    assert np.isnan(at)
    assert not admissible(old, derived, WHOLE_LINE)
    assert admissible(_norm_form(derived), derived, WHOLE_LINE)


def test_the_gate_refuses_a_form_better_on_average_that_breaks_an_ordinary_label():
    from rulegen.derive.functions import softplus

    # Over the whole float line y is mostly huge or tiny, where y*(A - B) + B beats y*A + (1 - y)*B on average;
    # at the label y = 1 it cancels (z = 100: 0 for 3.7e-44).  The search chose it for a binary cross-entropy.
    z = sp.Symbol("z", real=True)
    written = y * softplus(-z) + (1 - y) * softplus(z)
    cancelling = y * (softplus(-z) - softplus(z)) + softplus(z)
    sampling = Sampling(((z, Domain()), (y, Domain())))
    assert not admissible(cancelling, written, sampling)
    # What it keeps instead (the written sum, or it by the sign of z) is right at every ordinary label and logit.
    chosen = _numpy_function(stabilise(written, sampling).chosen, (z, y))
    for label in (0.0, 0.25, 1.0):
        for logit in (-100.0, -17.0, 0.3, 17.0, 100.0):
            exact = label * math.log1p(math.exp(-logit)) + (1 - label) * math.log1p(math.exp(logit))
            assert chosen(np.float64(logit), np.float64(label)) == pytest.approx(exact, rel=1e-14), (logit, label)


def test_atan2_s_partials_go_through_hypot_and_are_right_at_mixed_magnitudes():
    for derived, exact in ((-y / (x**2 + y**2), -1e20), (x / (x**2 + y**2), 1e-180)):
        choice = stabilise(derived, WHOLE_LINE)
        assert choice.chosen.has(hypot)
        assert not choice.chosen.has(sp.Piecewise, binade)
        assert max(choice.bits_after) < 0.5
        value = _numpy_function(choice.chosen, (x, y))(np.float64(1e-200), np.float64(1e-20))
        assert value == pytest.approx(exact, rel=1e-15)


def test_logs_of_functions_that_round_to_0_or_1_are_taken_exactly():
    from sympy.codegen.cfunctions import log1p

    from rulegen.derive.functions import log_ndtr, softplus

    assert _identities(sp.log(sigmoid(x))) == -softplus(-x)
    assert _identities(sp.log(1 - sigmoid(x))) == -softplus(x)
    assert _identities(log1p(-sigmoid(x))) == -softplus(x)
    assert _identities(1 - 2 * sigmoid(-x)) == sp.tanh(x / 2)
    assert _identities(sp.log(sp.erfc(x))) == log_ndtr(-sp.sqrt(2) * x) + sp.log(2)
    assert _identities(sp.log(1 + sp.erf(x))) == log_ndtr(sp.sqrt(2) * x) + sp.log(2)


def test_a_power_below_minus_one_is_divided_not_raised():
    # -(1/x)**(3/2)/2 (what cse made of an earlier choice) is -inf in float32 at x = 2e-26, where the exact value
    # is -1.7e38; divided, the power never leaves the range.
    split = _powers_split(-1 / (2 * x ** sp.Rational(3, 2)))
    with np.errstate(all="ignore"):
        f32 = _numpy_function(split, (x,))(np.float32(2.03e-26))
        plain = _numpy_function(-((1 / x) ** sp.Rational(3, 2)) / 2, (x,))(np.float32(2.03e-26))
    assert np.isfinite(f32) and not np.isfinite(plain)
    assert float(f32) == pytest.approx(-0.5 * 2.03e-26**-1.5, rel=1e-6)


def test_binade_is_finite_at_the_largest_floats():
    from rulegen.derive.functions import binade_of
    from rulegen.runtime._scaling import binade as runtime_binade

    for dtype in (np.float64, np.float32):
        top = np.asarray([np.finfo(dtype).max], dtype=dtype)
        assert np.isfinite(binade_of(top)).all()
        assert np.isfinite(runtime_binade(torch, torch.from_numpy(top)).numpy()).all()


# -------------------------------------------------------------------- the gate measures what the code computes

s_ = sp.Symbol("scale", positive=True)
HALF_LINE = Sampling(((x, Domain(ge=0)), (s_, Domain(gt=0))))


def test_the_gate_evaluates_a_quotient_by_a_square_as_the_printers_divide_it():
    from rulegen.derive.functions import divided
    from rulegen.derive.functions import hypot as registry_hypot
    from rulegen.derive.stabilise.gate import as_computed

    # cse takes (s/h)/h apart as s * t**-2, t = h, which the printers write (s / t) / t: evaluated as s / t**2 the
    # square overflows (s = 2.2e27 in float32: the form is 1e-28 there, and the gate refused it as inf).
    h = registry_hypot(x, s_)
    with sp.evaluate(False):
        form = -2 * divided(divided(s_, h), h) + 1 / s_
    computed = as_computed(form)
    at = np.float32(2.65e-38), np.float32(2.2e27)
    with np.errstate(all="ignore"):
        value = _numpy_function(computed, (x, s_))(*at)
    assert np.isfinite(value) and value == pytest.approx(-1 / 2.2e27, rel=1e-6)


def test_a_form_as_computed_is_its_shared_subexpressions_put_back_one_at_a_time():
    # as_computed puts each shared value back into the ones after it and then the form once; the same form, node
    # for node, as putting each back into the whole form, the last first (quadratic: 22 s on a Beta KL's series).
    from rulegen.computation.sharing import shared_subexpressions, summed_in_order
    from rulegen.derive.stabilise.gate import _squares_divided, as_computed

    y = sp.Symbol("y", positive=True)
    u = (x - y) / s_
    forms = [
        u**2 + sp.log(u) - sp.exp(-u) + sp.exp(-u) / (1 + sp.exp(-u)) ** 2,
        (x + y) ** 2 / (x * y + 1) ** 3 + sp.digamma(x + y) * (x + y) - sp.loggamma(x + y),
        sp.Piecewise((sp.sqrt(u**2 + 1) / (u**2 + 1), x > y), (sp.log(u**2 + 1) * sp.sqrt(u**2 + 1), True)),
    ]
    nested = 0
    for form in forms:
        replacements, (reduced,) = shared_subexpressions(
            [summed_in_order(form)], sp.numbered_symbols("_computed", cls=sp.Dummy)
        )
        assert replacements, form
        reduced = _squares_divided(reduced)
        values = [(symbol, _squares_divided(value)) for symbol, value in replacements]
        with sp.evaluate(False):
            for symbol, value in reversed(values):
                reduced = reduced.xreplace({symbol: value})
        assert sp.srepr(as_computed(form)) == sp.srepr(reduced)
        nested += any(value.free_symbols & {symbol for symbol, _ in replacements} for _, value in replacements)
    assert nested  # values that name values


def test_a_norm_form_multiplies_its_constant_last():
    # (-2s/h)/h overflows at s > max/2, where -2((s/h)/h) is -2/s.
    derived = -1 / s_ + 2 * x**2 / (s_**3 * (1 + x**2 / s_**2))
    form = _norm_form(derived)
    with np.errstate(all="ignore"):
        value = _numpy_function(form, (x, s_))(np.float64(1.7e99), np.float64(1.79e308))
    assert value == pytest.approx(-1 / 1.79e308, rel=1e-12)


def test_the_gate_does_not_hold_a_root_that_one_form_hits_by_luck_against_another():
    from rulegen.derive.functions import divided
    from rulegen.derive.functions import hypot as registry_hypot

    # At x = s the derivative of a half-Cauchy log-density in its scale is 0: the derived form rounds to 0 there,
    # the norm form to 2e-16, and elsewhere it is the far better one (no inf/nan at s > 1e102).
    derived = -1 / s_ + 2 * x**2 / (s_**3 * (1 + x**2 / s_**2))
    h = registry_hypot(x, s_)
    with sp.evaluate(False):
        form = -2 * divided(divided(s_, h), h) + 1 / s_
    assert admissible(form, derived, HALF_LINE)


def test_the_sums_of_a_homogeneous_quotient_are_scaled_and_its_monomials_are_not():
    from rulegen.derive.stabilise.scaling import _Homogeneity, _sums_rescaled

    # (d**2 - s**2) / (s (d**2 + s**2)): where s is below d by more than the float range, scaling every input
    # by d's binade takes s to 0 and the quotient to inf; s outside the scaling stays what it is (about 1/s).
    d = sp.Symbol("d", real=True)
    together = (d**2 - s_**2) / (s_ * (d**2 + s_**2))
    form = _sums_rescaled(together, (d, s_), _Homogeneity((1, 1), -1))
    assert form is not None
    with np.errstate(all="ignore"):
        value = _numpy_function(form, (d, s_))(np.float64(1e200), np.float64(1e-200))
        unscaled = _numpy_function(together, (d, s_))(np.float64(1e200), np.float64(1e-200))
    assert not np.isfinite(unscaled)
    assert value == pytest.approx(1e200, rel=1e-12)


def test_cauchy_s_scale_partial_is_right_over_the_whole_line():
    loc = sp.Symbol("loc", real=True)
    derived = sp.diff(-sp.log(s_) - sp.log(1 + ((x - loc) / s_) ** 2), s_)
    sampling = Sampling(((x, Domain()), (loc, Domain()), (s_, Domain(gt=0))))
    choice = stabilise(derived, sampling)
    assert sum(choice.bits_before) > 40 and max(choice.bits_after) < 2


def test_cauchy_s_scale_partial_divides_by_the_scale_it_keeps_out_of_the_scaling_last():
    # The sums scaled by the binade of max(|x|, |loc|, scale), times the scale kept outside: s (d'**2 + s'**2) at
    # s = 1.36e-288 and d' ~ 2e-16 is a subnormal 6e-320, which XLA flushes to 0 (and numpy rounds to 0 below
    # 5e-324, at s = 1e-300): the quotient inf where it is 1/s.  Divided by the scaled sum and then by s, it is not.
    import mpmath

    from rulegen.derive.stabilise.points import _evaluated

    loc = sp.Symbol("loc", real=True)
    derived = sp.diff(-sp.log(s_) - sp.log(1 + ((x - loc) / s_) ** 2), s_)
    sampling = Sampling(((x, Domain()), (loc, Domain()), (s_, Domain(gt=0))))
    chosen = stabilise(derived, sampling).chosen
    reference = sp.lambdify((x, loc, s_), derived, modules="mpmath")
    for scale in (1.36e-288, 1e-300):
        point = (-0.685, -0.685 - 2.2e-16, scale)
        with mpmath.workprec(4000):
            exact = float(reference(*(mpmath.mpf(p) for p in point)))
        for flushed in (False, True):
            value = float(
                _evaluated(chosen, (x, loc, s_), [np.array([p]) for p in point], np.float64, flushed=flushed)[0]
            )
            assert value == pytest.approx(exact, rel=1e-14), (point, flushed, value, exact)


def test_a_quotient_by_two_factors_is_reassociated_dividing_by_either_first():
    from rulegen.derive.functions import divided
    from rulegen.derive.stabilise.families import _reassociations

    # A scaled numerator over a subnormal scale overflows where over the scaled denominator first it does not
    # (Cauchy's partial in its scale, float32, scale = 8.6e-39: inf, for 1.2e38): both orders are candidates.
    a, d = sp.symbols("a d", real=True)
    forms = set(_reassociations(a / (s_ * d)))
    assert forms == {divided(a, s_) / d, divided(a, d) / s_}, forms


def test_a_threshold_between_two_magnitudes_of_the_top_binade_is_the_largest_allowed():
    from rulegen.derive.stabilise.regimes import _THRESHOLDS, _power_of_two

    # Their geometric mean rounds to 2**1024, past the float range: the exponent is clamped before it is raised.
    assert _power_of_two(math.sqrt(1.5e308) * math.sqrt(1.7e308)) == _THRESHOLDS[1]
    assert _power_of_two(3.0) == 4.0 and _power_of_two(0.0) == _THRESHOLDS[0]


def test_two_terms_with_a_common_factor_are_joined_where_an_identity_then_applies():
    from rulegen.derive.stabilise.families import _common_factors

    # A logistic log-density's partial in its scale: -u/s + 2u sigmoid(u)/s - 1/s, u = (loc - x)/s.  Once u
    # overflows the first two terms are inf - inf; u (2 sigmoid(u) - 1)/s is u tanh(u/2)/s, inf where it is.
    loc = sp.Symbol("loc", real=True)
    u = (loc - x) / s_
    derived = -(1 / s_) * u + 2 * u * sigmoid(u) / s_ - 1 / s_
    forms = list(_common_factors(derived))
    assert any(f.has(sp.tanh) and not f.has(sigmoid) for f in forms)
    sampling = Sampling(((x, Domain()), (loc, Domain()), (s_, Domain(gt=0))))
    chosen = stabilise(derived, sampling).chosen
    with np.errstate(all="ignore"):
        at = _numpy_function(chosen, (x, loc, s_))(np.float64(0.0), np.float64(2e270), np.float64(8.6e-114))
    assert at == np.inf  # exact: about u/s = 2.7e497, past the float range; the derived form is nan


def test_the_search_samples_pairs_of_inputs_that_nearly_agree():
    from rulegen.derive.stabilise.points import _close_pairs

    # The KL divergence of two exponentials, in p: 1/p - q/p**2 cancels where q ~ p (two close distributions),
    # which the float line's bit patterns never draw: the search now does, and keeps (p - q)/p/p there.
    p, q = sp.symbols("p q", positive=True)
    sampling = Sampling(((p, Domain(gt=0)), (q, Domain(gt=0))))
    columns = [np.asarray([3.0, 5.0]), np.asarray([7.0, 11.0])]
    p_column, q_column = _close_pairs(columns, [Domain(gt=0), Domain(gt=0)], np.float64)
    assert p_column[-2] == 11.0 * (1 + 2 * np.finfo(np.float64).eps) and q_column[-2] == 11.0
    derived = sp.diff(-sp.log(q / p) + q / p - 1, p)
    chosen = stabilise(derived, sampling).chosen
    at_p, at_q = 5.48, 5.480000000000001
    exact = (at_p - at_q) / at_p**2  # p - q is exact here (Sterbenz), and so nearly is the rest
    with np.errstate(all="ignore"):
        before = _numpy_function(derived, (p, q))(at_p, at_q)
        after = _numpy_function(chosen, (p, q))(at_p, at_q)
    assert abs(before - exact) > 1e-3 * abs(exact)  # some 50 bits wrong
    assert after == pytest.approx(exact, rel=1e-14)


def test_the_gate_measures_the_derived_form_as_the_generated_code_computes_it():
    # A KL divergence of two normals, 0.5 ((p/q)**2 + ((m - n)/q)**2 - 1 - log((p/q)**2)), is inf where (p/q)**2
    # underflows (p = 5.2e-152, q = 2.3e56 in float64: exact 477.6); with the log taken apart there it is finite.
    # The gate computed the derived form as sympy writes it (p**2/q**2, whose squares under- and overflow at
    # points where the printers' (p/q)**2 does not): it looked finite where the generated code is inf, and the
    # gate refused the form that mends it.
    p, q = sp.symbols("p q", positive=True)
    m, n = sp.symbols("m n", real=True)
    half = sp.Float(0.5)  # as torch writes it
    derived = half * ((p / q) ** 2 + ((m - n) / q) ** 2 - 1 - sp.log((p / q) ** 2))
    sampling = Sampling(((m, Domain()), (p, Domain(gt=0)), (n, Domain()), (q, Domain(gt=0))))
    chosen = _numpy_function(stabilise(derived, sampling).chosen, (m, p, n, q))
    at = (0.0, 5.202575961034304e-152, -2.055522150006118e-58, 2.2786183944857622e56)
    with np.errstate(all="ignore"):
        value = chosen(*(np.float64(v) for v in at))
    assert value == pytest.approx(477.612114754674, rel=1e-14)


def test_the_gate_weighs_points_a_form_breaks_at_extremes_against_those_it_mends():
    from rulegen.derive.stabilise.gate import _breaks_accurate_points

    # A Gamma KL's partial in p_rate with its products reordered lost 9 bits where p_c/p_rate is subnormal
    # (p_c = 3e-259, p_rate = 1.2e53) and mended every point where p_c*q_rate overflows: the gate refused it at
    # the one point, and the derived form, inf at the others, stayed.  Here the exact value is x itself.
    exact = np.asarray([1e-300, 1e300, 1e-250, 1.5])
    columns = [exact]
    ours, theirs = exact.copy(), exact.copy()
    ours[0] = exact[0] * (1 + 2.0**-40)  # broken at an extreme: 12 bits
    theirs[1:3] = exact[1:3] * (1 + 2.0**-30)  # mended at two extremes
    assert not _breaks_accurate_points(ours, theirs, x, (x,), columns, np.float64)
    # At a point of ordinary size no break is weighed against anything.
    ours[3] = exact[3] * (1 + 2.0**-40)
    assert _breaks_accurate_points(ours, theirs, x, (x,), columns, np.float64)


def test_an_alternative_s_rewrites_do_not_crowd_out_the_expression_s_own():
    # A normal KL's partial in p's location, with the derivative of a forward form as the alternative: that form's
    # rewrites all rank first and are nan where p/s and q/s overflow; (p - q)/s/s, finished from the expression's
    # own, is the admissible one.  The search once finished the alternative's alone and kept the derived form, inf
    # where p - q overflows.
    p, q = sp.symbols("p_loc q_loc", real=True)
    r = sp.Symbol("p_scale", positive=True)
    # As the derivation leaves it: -2*q_loc unevaluated, as the forward was written.
    derived = sp.Float(0.5) * s_**-2 * sp.Add(2 * p, sp.Mul(-1, 2, q, evaluate=False), evaluate=False)
    alternative = sp.Float(1.0) * divided(p, s_) / s_ - sp.Float(1.0) * divided(q, s_) / s_
    sampling = Sampling(((p, Domain()), (r, Domain(gt=0)), (q, Domain()), (s_, Domain(gt=0))))
    choice = stabilise(derived, sampling, alternatives=(("derivative of a forward form", alternative),))
    assert choice.changed
    assert admissible(choice.chosen, derived, sampling)
    assert max(choice.bits_after) < 1
