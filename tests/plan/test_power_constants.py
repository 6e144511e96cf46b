"""Constants in generated code that are powers of two read as powers of two (`2.0**-120`), never as the decimal
digits that hide what they are (7.52316384526264e-37)."""

from __future__ import annotations

import re

import pytest
import sympy as sp

from rulegen.plan.printers import JaxArrayPrinter, TorchArrayPrinter, float_text

x = sp.Symbol("x", real=True)


@pytest.mark.unit
@pytest.mark.parametrize("value", [2.0**-120, -(2.0**119), 2.0**-1074, 2.0**1023, 2.0**-14, 2.0**54])
def test_a_power_of_two_written_with_an_exponent_prints_as_one(value):
    text = float_text(value)
    assert re.fullmatch(r"-?2\.0\*\*-?\d+", text), text
    assert eval(text) == value


@pytest.mark.unit
@pytest.mark.parametrize("value", [0.5, 1024.0, 2.0**-12, 0.1, 1.5e-36, 7.52316384526265e-37, 1e300])
def test_any_other_float_prints_as_its_shortest_repr(value):
    assert float_text(value) == repr(value)


@pytest.mark.unit
@pytest.mark.parametrize("printer", [JaxArrayPrinter, TorchArrayPrinter])
def test_a_regime_threshold_and_its_fed_point_print_as_powers_of_two(printer):
    # What the search joins: where |x| > 2**-120, a branch fed a point of its own region (2**-119, held to three
    # digits as sympy's Float(..., 3), the exact binary value underneath) where it is not taken.
    fed = sp.Piecewise((x, sp.Abs(x) > sp.Float(2.0**-120, 3)), (sp.Float(2.0**-119, 3), True))
    code = printer().doprint(1 / fed)
    assert "2.0**-120" in code and "2.0**119" in code, code  # 1 / 2**-119, folded
    assert "e-3" not in code, code


@pytest.mark.unit
def test_a_power_of_two_in_a_power_keeps_its_value():
    for expr in (x ** sp.Float(2.0**-20), sp.Pow(sp.Float(2.0**-20), x, evaluate=False)):
        code = JaxArrayPrinter().doprint(expr)
        assert eval(code, {"x": 3.0}) == float(expr.subs(x, 3.0)), code
