"""`rulegen accuracy`: bits of error, the float-line sampler, the adaptive reference, the command."""

from __future__ import annotations

import inspect
import itertools
import math
import re

import numpy as np
import pytest

from rulegen.check.accuracy import measure_rule
from rulegen.derive.measure import bits_of_error, exact_value, from_ordinals, ordinals, sample_floats, sampled_domain
from rulegen.spec.rules import Domain, Input, read_rule_file
from tests.conftest import rules_from

TINY64, TINY32 = 5e-324, float(np.finfo(np.float32).smallest_subnormal)


# ---------------------------------------------------------------- bits of error


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_correctly_rounded_value_has_no_error_and_one_float_off_has_one_bit(dtype):
    exact = np.asarray([1.0, -3.5, 1e-30, 0.0], dtype=dtype)
    next_up = np.nextafter(exact, np.asarray(np.inf, dtype=dtype))
    assert bits_of_error(exact, exact, dtype).tolist() == [0.0, 0.0, 0.0, 0.0]
    assert bits_of_error(next_up, exact, dtype).tolist() == [1.0, 1.0, 1.0, 1.0]
    three_off = np.nextafter(np.nextafter(next_up, np.inf), np.inf).astype(dtype)
    assert bits_of_error(three_off, exact, dtype).tolist() == [2.0, 2.0, 2.0, 2.0]


@pytest.mark.parametrize(("dtype", "tiny"), [(np.float64, TINY64), (np.float32, TINY32)])
def test_floats_are_counted_across_zero_and_the_sign(dtype, tiny):
    # -tiny, 0 and tiny are three consecutive floats; -0.0 is the same float as 0.0.
    assert bits_of_error(np.asarray(-tiny), np.asarray(tiny), dtype) == pytest.approx(math.log2(3))
    assert bits_of_error(np.asarray(-0.0), np.asarray(0.0), dtype) == 0.0
    assert bits_of_error(np.asarray(0.0), np.asarray(tiny), dtype) == 1.0
    # 1.0 and -1.0 are as far apart as each is from zero, twice.
    one = int(ordinals(np.asarray(1.0, dtype=dtype)))
    assert bits_of_error(np.asarray(-1.0), np.asarray(1.0), dtype) == pytest.approx(math.log2(1 + 2 * one))


@pytest.mark.parametrize(("dtype", "width"), [(np.float64, 64), (np.float32, 32)])
def test_nan_has_every_bit_wrong_and_the_largest_distance_stays_below_the_width(dtype, width):
    assert bits_of_error(np.asarray(np.nan), np.asarray(1.0), dtype) == width
    largest = float(np.finfo(dtype).max)
    # The two ends of the float line: no overflow of the count.
    assert width - 1 < bits_of_error(np.asarray(-largest), np.asarray(largest), dtype) <= width


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_ordinals_number_the_float_line_in_order(dtype):
    values = np.asarray([-np.inf, -1.0, -TINY32, -0.0, 0.0, TINY32, 1.0, np.inf], dtype=dtype)
    positions = ordinals(values)
    assert (np.diff(positions) >= 0).all() and positions[3] == positions[4] == 0
    assert np.array_equal(from_ordinals(positions[[0, 1, 2, 4, 5, 6, 7]], dtype), values[[0, 1, 2, 4, 5, 6, 7]])


# ---------------------------------------------------------------- sampling


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_whole_float_line_is_sampled_at_every_magnitude(dtype):
    found = sample_floats(Domain(), 4000, np.random.default_rng(0), dtype)
    assert found.dtype == dtype and np.isfinite(found).all()
    magnitudes = np.abs(found[found != 0]).astype(np.float64)
    tiny, huge = (1e-200, 1e200) if dtype == np.float64 else (1e-30, 1e30)
    assert magnitudes.min() < tiny and magnitudes.max() > huge
    # Uniform over bit patterns: about as many points below 1 in magnitude as above, of both signs.
    assert 0.4 < np.mean(magnitudes < 1) < 0.6 and 0.4 < np.mean(found < 0) < 0.6


def test_sampling_respects_open_and_closed_bounds_and_excluded_points():
    rng = np.random.default_rng(1)
    positive = sample_floats(Domain(gt=0), 2000, rng, np.float64)
    assert (positive > 0).all() and positive.min() < 1e-200
    # (0, 3 floats]: the open end is never drawn, the closed one is.
    few = sample_floats(Domain(gt=0, le=3 * TINY64), 300, rng, np.float64)
    assert set(few.tolist()) == {TINY64, 2 * TINY64, 3 * TINY64}
    around_zero = sample_floats(Domain(ge=-TINY64, le=TINY64, exclude=(0,)), 200, rng, np.float64)
    assert set(around_zero.tolist()) == {-TINY64, TINY64}
    inside = sample_floats(Domain(gt=-0.026, lt=0.026), 2000, rng, np.float32)
    assert (np.abs(inside.astype(np.float64)) < 0.026).all()
    # float32 bounds round inward: 0.1 is no float32, and 0.1f is above 0.1.
    assert (sample_floats(Domain(ge=0.1, le=0.2), 500, rng, np.float32).astype(np.float64) >= 0.1).all()


def test_sampling_is_deterministic_in_its_seed():
    draw = [sample_floats(Domain(), 50, np.random.default_rng(seed), np.float64) for seed in (7, 7, 8)]
    assert np.array_equal(draw[0], draw[1]) and not np.array_equal(draw[0], draw[2])


def test_a_domain_that_holds_no_float_of_the_dtype_is_refused():
    with pytest.raises(ValueError, match="holds no float of float32"):
        sample_floats(Domain(gt=1.0, lt=1.0 + 1e-12), 5, np.random.default_rng(0), np.float32)


def test_an_input_without_a_domain_is_sampled_on_the_float_line_its_assumptions_allow():
    assert sampled_domain(Input(name="x")) == Domain()
    assert sampled_domain(Input(name="x", assume=("positive",))) == Domain(gt=0)
    assert sampled_domain(Input(name="x", assume=("nonzero", "nonpositive"))) == Domain(le=0, exclude=(0,))
    # A domain the rule writes is where it is sampled.
    assert sampled_domain(Input(name="x", domain=(0.5, 3))) == Domain(ge=0.5, le=3)


# ---------------------------------------------------------------- the reference


def test_the_reference_raises_to_a_huge_integer_power_as_mpmath_does():
    # Every float past 2**52 is an integer: mpmath raised x**1e300 by repeated squaring, milliseconds a point,
    # most of a whole-line sweep of a power rule's time; through exp and log it rounds alike.
    import sympy as sp

    from rulegen.derive.expr import lambdified

    x, y = sp.symbols("x y", real=True)
    power = lambdified([x, y], y * x ** (y - 1), modules=["mpmath"])
    assert "power_of(" in inspect.getsource(power)
    for point in [(-1.0000001, 3e200 + 1), (-1.0000001, 3e200), (1 - 2**-52, 2.0**60), (0.5, 7.0), (-2.0, 2.0**40)]:
        assert exact_value(power, list(point)) == exact_value(lambda a, b: b * a ** (b - 1), list(point)), point


def test_the_reference_raises_its_precision_until_a_cancellation_is_resolved():
    import mpmath

    # sqrt(x + 1) - sqrt(x) at 1e300: 0 at any precision below ~1000 bits, 5e-151 exactly.
    value64, value32 = exact_value(lambda x: mpmath.sqrt(x + 1) - mpmath.sqrt(x), [1e300])
    assert value64 == pytest.approx(0.5e-150, rel=1e-15) and value32 == 0.0
    assert exact_value(lambda x: (1 - mpmath.cos(x)) / x**2, [1e-200]) == (0.5, 0.5)
    # 2/3 rounds differently in the two dtypes.
    assert exact_value(lambda x: x / 3, [2.0]) == (2 / 3, float(np.float32(2 / 3)))


@pytest.mark.parametrize(("tiny", "which"), [(TINY64, 0), (TINY32, 1)])
def test_the_reference_rounds_once_into_the_subnormals(tiny, which):
    import mpmath

    # 1.5 - 2**-60 times the smallest subnormal is nearest to it; rounded to the significand's
    # bits first it would be 1.5 of it, a tie, then 2 by ties-to-even.
    just_below_a_tie = exact_value(lambda x: x * (mpmath.mpf(3) / 2 - mpmath.mpf(2) ** -60), [tiny])
    assert just_below_a_tie is not None and just_below_a_tie[which] == tiny
    assert exact_value(lambda x: x * (mpmath.mpf(5) / 2), [tiny])[which] == 2 * tiny  # a tie: to even


def test_points_where_the_value_is_no_finite_real_number_have_no_reference():
    import mpmath

    assert exact_value(mpmath.log, [-1.0]) is None
    assert exact_value(lambda x: 1 / x, [0.0]) is None


@pytest.mark.parametrize(
    ("name", "backends", "dtype"),
    [
        ("f_erfcx", ("jax", "torch"), "float64"),
        ("f_log_ndtr", ("jax", "torch"), "float64"),
        ("f_digamma", ("torch",), "float64"),
    ],
)
def test_autodiff_is_of_the_frameworks_own_functions_not_the_runtime_s(name, backends, dtype):
    # Generated code calls the runtime's erfcx (and torch's float64 digamma), differentiated by the
    # registry; the frameworks' own differentiate erfcx as 2 x erfcx(x) - 2/sqrt(pi), which cancels, and
    # torch's float64 trigamma is its float32 algorithm. The baseline is what a user gets without rulegen.
    import generated.jax as gj
    import generated.torch as gt
    from tests.conftest import RULES

    rules = {r.name: r for r in read_rule_file(RULES / "functions.yaml")}
    # 16 points: erfcx's exact values far out take mpmath seconds each; the two means stay 4 bits either side of
    # the bounds (generated 0.6-0.8, autodiff 9.8-21 bits, as at 32 points).
    result = measure_rule(rules[name], gj, gt, points=16, known=[name])
    for backend in backends:
        generated = result.mean_bits(partials=True, dtype=dtype, backend=backend, source="generated")
        autodiff = result.mean_bits(partials=True, dtype=dtype, backend=backend, source="autodiff")
        assert generated < 1.5 and autodiff > 5, (backend, generated, autodiff)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_plot_ticks_are_the_dtype_s_own_and_never_overlap(dtype):
    from rulegen.check.accuracy_report import _MOST_TICKS, _ticks
    from rulegen.derive.measure import ordinals

    largest = float(np.finfo(dtype).max)
    for lo, hi in ((-largest, largest), (0.5, 3.0), (0.0, 1e4), (-3.0, 3.0)):
        a, b = (float(ordinals(np.asarray(v, dtype=dtype))) for v in (lo, hi))
        ticks = _ticks(a, b, dtype)
        positions = [p for p, _ in ticks]
        assert len(ticks) >= 3, (lo, hi, ticks)
        assert all(a <= p <= b for p in positions)
        assert all(q - p >= (b - a) / _MOST_TICKS for p, q in itertools.pairwise(positions))
        for position, label in ticks:  # each label is where it is drawn, on this dtype's own axis
            assert float(ordinals(np.asarray(float(label), dtype=dtype))) == position


def test_rulegen_test_samples_points_where_the_joint_domain_holds(tmp_path):
    from rulegen.check import sample

    (rule,) = rules_from(
        tmp_path,
        "name: joint\ninputs: {x: {}, y: {domain: {ge: 0}}}\ndomain: x * x < y\nforward: sqrt(y - x * x)\n",
        "joint.yaml",
    )
    for seed in range(5):
        x, y = sample(rule, np.random.default_rng(seed))
        assert x.shape == y.shape == (3, 4) and (x * x < y).all(), seed
        assert (y >= 0).all()


def test_a_rule_of_the_gamma_family_is_checked_on_the_whole_line_its_inputs_allow(tmp_path):
    # The reference computes the gamma family on the negative axis in bounded time: a count with a `domain` and
    # no `assume` is checked where the search chooses, its whole float line, as every other rule is.
    from rulegen.check.accuracy import _plan

    (rule,) = rules_from(
        tmp_path,
        "name: count\ninputs: {k: {domain: {ge: 0}}, r: {assume: positive}}\n"
        "forward: loggamma(k + r) - loggamma(k + 1) + digamma(r)\n",
        "count.yaml",
    )
    plan = _plan(rule, [rule.name])
    bounds = [[(d.gt, d.ge, d.lt, d.le) for d in domains] for domains in (plan.whole_line, plan.domains)]
    assert bounds == [[(None, None, None, None), (0, None, None, None)], [(None, 0, None, None), (0, None, None, None)]]


def test_a_joint_domain_that_no_drawn_point_meets_makes_the_checks_not_applicable(tmp_path):
    from rulegen.check import NotApplicable, sample

    (rule,) = rules_from(
        tmp_path, "name: never\ninputs: {x: {domain: [0, 1]}}\ndomain: x > 2\nforward: x\n", "never.yaml"
    )
    with pytest.raises(NotApplicable, match="domain `x > 2` held at too few"):
        sample(rule, np.random.default_rng(0))


def test_the_table_says_why_an_implementation_counts_as_nan_everywhere():
    from rich.console import Console

    from rulegen.check.accuracy import Quantity, RuleAccuracy, Series
    from rulegen.check.accuracy_report import accuracy_table

    value = Quantity("out")
    series = tuple(
        Series(value, dtype, backend, source, np.zeros(3) if note == "" else np.full(3, 64.0), note)
        for dtype in ("float64", "float32")
        for backend in ("jax", "torch")
        for source in ("generated", "autodiff")
        for note in [
            "TypeError: no [b]float32[/b]" if (backend, source, dtype) == ("torch", "generated", "float32") else ""
        ]
    )
    console = Console(record=True, width=100)
    console.print(accuracy_table(RuleAccuracy("r", series)))
    text = console.export_text()
    assert "torch generated, float32: TypeError: no [b]float32[/b]" in text
    assert re.search(r"│ out +│ float32 │ +0\.00 / 0 │ +0\.00 / 0 │ +64\.00 / 64 │ +0\.00 / 0 │", text), text


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_mean_can_leave_out_the_inputs_xla_reads_as_zero(dtype):
    from rulegen.check.accuracy import Quantity, RuleAccuracy, Series

    tiny = np.finfo(dtype).tiny
    x = np.asarray([1.0, tiny / 4, -tiny / 2, tiny], dtype=dtype)  # two subnormal inputs, then a normal
    bits = np.asarray([1.0, 60.0, 60.0, 1.0])
    value = Quantity("out")
    result = RuleAccuracy(
        "r", tuple(Series(value, dtype, b, "generated", bits) for b in ("jax", "torch")), {dtype: {"x": x}}
    )
    for backend in ("jax", "torch"):
        assert result.mean_bits(partials=False, dtype=dtype, backend=backend, source="generated") == 30.5
    # Only the backend that flushes has the points left out; torch computes with the subnormal it is given.
    assert result.mean_bits(partials=False, dtype=dtype, backend="jax", source="generated", flushed_inputs=False) == 1
    left = result.mean_bits(partials=False, dtype=dtype, backend="torch", source="generated", flushed_inputs=False)
    assert left == 30.5


def test_a_rule_is_inadmissible_where_it_is_inf_at_a_finite_exact_value_the_backend_was_given():
    from rulegen.check.accuracy import Quantity, RuleAccuracy, Series

    tiny = np.finfo(np.float64).tiny
    x = np.asarray([1.0, tiny / 4])
    value = Quantity("out")

    def rule(got: list[float], backend: str) -> RuleAccuracy:
        got_, exact = np.asarray(got), np.asarray([2.0, 3.0])
        series = Series(value, "float64", backend, "generated", np.zeros(2), got=got_, exact=exact)
        return RuleAccuracy("r", (series,), {"float64": {"x": x}})

    assert rule([2.0, 3.0], "torch").inadmissible() == []
    assert [s.backend for s in rule([np.inf, 3.0], "torch").inadmissible()] == ["torch"]
    assert [s.backend for s in rule([2.0, np.nan], "torch").inadmissible()] == ["torch"]
    # XLA reads the subnormal input as 0: what it returns there is the platform's, not the formula's.
    assert rule([2.0, np.nan], "jax").inadmissible() == []
    assert rule([np.nan, 3.0], "jax").inadmissible() != []
    assert rule([2.0, 3.0], "torch").inadmissible("autodiff") == []
