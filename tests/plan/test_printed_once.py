"""computation/printed.py: every printer, derive's numpy and mpmath ones and plan's array printers, prints a
subexpression its branches and conditions share once per expression."""

from __future__ import annotations

import math

import pytest
import sympy as sp
from sympy.printing.pycode import MpmathPrinter

from rulegen.derive.expr import _NumPyOrder, lambdified
from rulegen.plan.printers import print_jax, print_torch

x, y = sp.symbols("x y", real=True)
SHARED = sp.Piecewise((sp.log(x) * y, x > 1), (sp.exp(y), True))
EXPR = sp.Piecewise((SHARED + 1, y > 0), (2 * SHARED, True)) + sp.sin(SHARED)


def _counting(monkeypatch: pytest.MonkeyPatch, printer: type) -> list[sp.Expr]:
    printed: list[sp.Expr] = []
    original = printer._print_Piecewise
    monkeypatch.setattr(printer, "_print_Piecewise", lambda self, e: printed.append(e) or original(self, e))
    return printed


@pytest.mark.parametrize("modules", ["numpy", "mpmath"])
def test_a_shared_branch_is_printed_once_for_the_search_s_functions(monkeypatch, modules):
    # A Beta KL's series forms printed their shared branches again in each branch and condition: minutes of lambdify.
    printed = _counting(monkeypatch, _NumPyOrder if modules == "numpy" else MpmathPrinter)
    f = lambdified((x, y), EXPR, modules=modules)
    assert printed.count(SHARED) == 1
    shared = math.log(2.0) * 3.0
    assert float(f(2.0, 3.0)) == pytest.approx(shared + 1 + math.sin(shared), rel=1e-15)


def test_a_shared_branch_is_printed_once_for_the_generated_code(monkeypatch):
    for print_code in (print_jax, print_torch):
        text = print_code(EXPR)[0].text
        assert text.count("log(x)") == 3  # the text is whole: what is printed once is read back
    printed: list[sp.Expr] = []
    from rulegen.plan import printers

    original = printers._ArrayCode._print_uncached
    monkeypatch.setattr(
        printers._ArrayCode, "_print_uncached", lambda self, e, **k: printed.append(e) or original(self, e, **k)
    )
    print_torch(EXPR)
    assert printed.count(SHARED) == 1
