"""Numbers print folded, as a person writes them: one square root where sympy keeps several apart."""

from __future__ import annotations

import math

import sympy as sp
from hypothesis import given
from hypothesis import strategies as st

from rulegen.plan.printers import one_square_root, print_jax, print_torch

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
