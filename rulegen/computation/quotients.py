"""How generated code computes a quotient: an integer times a quotient multiplies last, a quotient by the square of a
name divides twice.  Every printer of the plan stage writes quotients so, and the accuracy gate of the derive stage
evaluates them so (`rulegen.derive.stabilise.gate.as_computed`), the form it measures the one that is printed."""

from __future__ import annotations

from typing import Any

import sympy as sp


def scaled_quotient(expr: sp.Expr) -> tuple[sp.Expr, sp.Expr] | None:
    """(k, q) where `expr` is an integer k, |k| > 1, times a quotient q of variables: computed k * (a / b), as
    every printer of rulegen's writes it, since (k * a) / b overflows where the quotient times k does not
    (-2 c / (b + sqrt(b**2 - 4 a c)) at c = -1.8e308)."""
    if not isinstance(expr, sp.Mul):
        return None
    coefficient, rest = expr.as_coeff_Mul()
    if not (coefficient.is_Integer and abs(coefficient) > 1 and rest.free_symbols):
        return None
    divisors = [f for f in sp.Mul.make_args(rest) if f.is_Pow and f.exp.is_negative and f.free_symbols]
    return (coefficient, rest) if divisors and len(sp.Mul.make_args(rest)) > 1 else None


def square_of_a_name(item: Any) -> bool:
    """Whether `item` is b**2 with b a name: printed with b twice, computed once."""
    return isinstance(item, sp.Pow) and item.exp == 2 and isinstance(item.base, sp.Symbol)


def divided_by_a_square(expr: sp.Mul) -> tuple[sp.Expr, sp.Expr] | None:
    """(a, b) where `expr` is a / b**2 with b a name (printed twice, computed once) and no other divisor; else None."""
    squares = [f for f in expr.args if f.is_Pow and square_of_a_name(1 / f)]
    divisors = [f for f in expr.args if f.is_Pow and f.exp.is_negative]
    if len(squares) != 1 or len(divisors) != 1:
        return None
    (square,) = squares
    return sp.Mul(*(f for f in expr.args if f is not square)), square.base
