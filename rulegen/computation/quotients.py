"""How generated code computes a quotient or a product: an integer times a quotient, or times a product of
several factors, multiplies last, a power over a power of the same or a higher degree is a power of the quotient, a
quotient by the square of a name divides twice.  Every printer of the plan stage writes quotients and products so,
and the accuracy gate of the derive stage evaluates them so
(`rulegen.derive.stabilise.gate.as_computed`), the form it measures the one that is printed."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import sympy as sp


def scaled_product(expr: sp.Expr, scalars: Collection[str] = frozenset()) -> tuple[sp.Expr, sp.Expr] | None:
    """(k, r) where `expr` is an integer k, |k| > 1, times a quotient or a product r of several factors: computed
    k * (r), as every printer of rulegen's writes it.  Multiplied last, k makes nothing inf that the value is not:
    (k * a) / b overflows where the quotient times k does not (-2 c / (b + sqrt(b**2 - 4 a c)) at c = -1.8e308),
    and (k * a) * b where b brings the value back (-2 x exp(-x**2) at x = 1e38 in float32 is inf * 0 = nan;
    -2 (x exp(-x**2)) is 0).  Each partial product's magnitude is the same or less than with k first, so no
    order of k is finite where this one is not.  Factors in `scalars` (names of Python numbers) alone are
    numbers: 2 c x with c a static input is one pass over x, as k (c x) would be two."""
    if not isinstance(expr, sp.Mul):
        return None
    coefficient, rest = expr.as_coeff_Mul()
    if not (coefficient.is_Integer and abs(coefficient) > 1 and rest.free_symbols):
        return None
    factors = sp.Mul.make_args(rest)
    divisors = [f for f in factors if f.is_Pow and f.exp.is_negative and f.free_symbols]
    variable = [f for f in factors if any(v.name not in scalars for v in f.free_symbols)]
    return (coefficient, rest) if len(factors) > 1 and (divisors or len(variable) > 1) else None


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


def power_of_a_quotient(expr: Any) -> tuple[sp.Expr, sp.Expr, sp.Expr, int, int] | None:
    """(rest, u, v, k, e) where `expr` is rest * u**k / v**(k + e), k >= 2 an integer, u**n (n >= k) a factor and
    v**(k + e) the one divisor: computed as `quotient_power` writes it, as a user writes ((x - loc) / scale)**2 and
    sympy does not keep (it distributes the power over the quotient).  The square of u or of v over- or underflows
    where their quotient's does not (a KL divergence of two normals, ((p_loc - q_loc) / q_scale)**2 at 1e200 and
    1e100: inf as (p_loc - q_loc)**2 / q_scale / q_scale), and the quotient rounds once where the squares round
    twice."""
    if not isinstance(expr, sp.Mul):
        return None
    divisors = [f for f in expr.args if f.is_Pow and f.exp.is_Integer and f.exp < 0 and f.free_symbols]
    if len(divisors) != 1 or -divisors[0].exp < 2:
        return None
    (divisor,) = divisors
    powers = [f for f in expr.args if f.is_Pow and f.exp.is_Integer and f.exp >= 2 and f.free_symbols]
    if not powers:
        return None
    power = max(powers, key=lambda f: (f.exp, sp.default_sort_key(f)))
    u, v, n, m = power.base, divisor.base, int(power.exp), int(-divisor.exp)
    k = min(n, m)
    rest = sp.Mul(*(f for f in expr.args if f is not power and f is not divisor)) * u ** (n - k)
    return rest, u, v, k, m - k


def quotient_power(
    rest: sp.Expr, u: sp.Expr, v: sp.Expr, k: int, e: int, divide: Callable[[sp.Expr, sp.Expr], sp.Expr]
) -> sp.Expr:
    """rest * u**k / v**(k + e) (`power_of_a_quotient`) as computed, each quotient `divide(a, b)` (kept whole by
    the caller): rest * (u / v)**k, or where v divides once more, rest * (u / v)**(k - 1) * ((u / v) / v ...),
    as (u / v)**2 / v overflows where (u / v) * ((u / v) / v) does not (((p_loc - q_loc) / q_scale)**2 / q_scale
    at 8e294 and 5e133 is 6e188)."""
    quotient = divide(u, v)
    if not e:
        factors = [sp.Pow(quotient, k, evaluate=False)]
    else:
        last = quotient
        for _ in range(e):
            last = divide(last, v)
        factors = [*([sp.Pow(quotient, k - 1, evaluate=False)] if k > 2 else [quotient]), last]
    if rest == 1 and len(factors) == 1:
        return factors[0]
    return sp.Mul(*(sp.Mul.make_args(rest) if rest != 1 else ()), *factors, evaluate=False)
