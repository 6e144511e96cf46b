"""Numbers print folded, as a person writes them: one square root where sympy keeps several apart."""

from __future__ import annotations

import math

import pytest
import sympy as sp
from hypothesis import given
from hypothesis import strategies as st

from rulegen.plan.printers import TorchArrayPrinter, one_square_root, print_jax, print_torch

x = sp.Symbol("x", real=True)


def _code(text: str) -> str:
    return text.replace(" ", "")  # unformatted: ruff format spaces it when the module is written


def test_gelu_s_constant_is_one_square_root():
    text = print_torch(sp.sqrt(2) / (2 * sp.sqrt(sp.pi)) * x)[0].text
    assert _code(text) == _code("x / math.sqrt(2 * math.pi)")
    text = print_jax(sp.sqrt(2) / sp.sqrt(sp.pi) * x)[0].text
    assert _code(text) == _code("math.sqrt(2 / math.pi) * x")
    text = print_torch(sp.sqrt(2) * sp.sqrt(sp.pi) * x)[0].text
    assert _code(text) == _code("math.sqrt(2 * math.pi) * x")


def test_one_square_root_is_left_as_it_reads():
    assert one_square_root(2 / sp.sqrt(sp.pi)) is None
    assert one_square_root(-sp.sqrt(2) / 2) is None
    text = print_torch(-sp.sqrt(2) / 2 * x)[0].text
    assert _code(text) == _code("(-math.sqrt(2) / 2) * x")  # one factor: `-x / c` would be two passes in eager torch


@given(
    st.integers(-5, 5).filter(bool),
    st.integers(1, 7),
    st.sampled_from([2, 3, 5, 6, 7]),
    st.sampled_from([sp.pi, sp.E, sp.Integer(11)]),
    st.integers(-2, 2),
)
def test_a_folded_number_has_the_value_of_the_unfolded_one(p, q, a, b, k):
    number = sp.Rational(p, q) * sp.sqrt(a) * sp.sqrt(b) ** (2 * k + 1)
    text = print_torch(number * x)[0].text
    value = eval(text, {"math": math, "x": 1.0})
    assert math.isclose(value, float(number), rel_tol=4e-16), (number, text)


def test_a_rational_past_int64_prints_as_the_float_it_rounds_to():
    # A regime's bound `x <= 2**100 y` reaches the printers as x/2**100 - y/2**100 <= 0: printed as an int, eager
    # torch refused it beside a tensor (OverflowError: int too big to convert) and the rule raised at every call.
    torch = pytest.importorskip("torch")
    y = sp.Symbol("y", real=True)
    at = {"x": torch.tensor([3.0, 5.0], dtype=torch.float32), "y": torch.tensor([1e30, 2e30], dtype=torch.float32)}
    for expr in (x / 2**100 - y / 2**100, sp.Rational(3, 2**100) * x, -x / 2**64, sp.Rational(2**70, 3) * x):
        text = TorchArrayPrinter().doprint(expr)
        value = eval(text, {"math": math, "torch": torch}, dict(at))
        expected = sp.lambdify((x, y), expr, "math")(*(float(v[0]) for v in at.values()))
        assert math.isclose(float(value[0]), expected, rel_tol=1e-6), (expr, text)


@pytest.mark.parametrize(
    ("coefficient", "at", "dtype"),
    [
        (sp.Rational(691, 32760), 1.5e37, "float32"),  # a Stirling series' coefficient, beside a large weight
        (sp.Rational(2, 3), 1.7e308, "float64"),
        (sp.Rational(-5, 594), 3e38, "float32"),
        (sp.Rational(3, 4), 1.7e308, "float64"),
    ],
)
def test_a_rational_coefficient_overflows_only_where_the_product_does(coefficient, at, dtype):
    # `691 * x / 32760` is inf where x/47 is 3e35: a Beta KL divergence's series in float32 at q1 = 4e37 was -inf.
    # p/q folds to one float (one rounding more at most), or divides where q/p is one (`x / 1.5`, correctly rounded).
    torch = pytest.importorskip("torch")
    value = torch.tensor([at], dtype=getattr(torch, dtype))
    for printed in (TorchArrayPrinter().doprint(coefficient * x), print_jax(coefficient * x)[0].text):
        got = eval(printed, {"math": math, "torch": torch}, {"x": value})
        assert math.isclose(float(got[0]), float(coefficient) * at, rel_tol=2e-7), (printed, got)


def test_half_of_a_quotient_is_taken_before_it_divides():
    # A normal KL's (s1**2 + (m1 - m2)**2)/(2 s2**2), its sum t shared with the backward: `t / s / s / 2` was inf in
    # float32 at t = 1.15e38, s = 0.535 (torch), where the value is 2.0e38; halved first it is in range throughout.
    torch = pytest.importorskip("torch")
    t, s = sp.symbols("t s", positive=True)
    expr = t / (2 * s**2)
    at = {"t": torch.tensor([1.15e38, 3.0], dtype=torch.float32), "s": torch.tensor([0.535, 7.0], dtype=torch.float32)}
    # JAX's `quotient` is a / b with a derivative of its own.
    names = {"math": math, "torch": torch, "quotient": lambda a, b: a / b}
    for printed in (TorchArrayPrinter().doprint(expr), print_jax(expr)[0].text):
        got = eval(printed, names, dict(at))
        for value, (tv, sv) in zip(got.tolist(), [(1.15e38, 0.535), (3.0, 7.0)], strict=True):
            assert math.isclose(value, tv / (2 * sv * sv), rel_tol=1e-6), (printed, value)
