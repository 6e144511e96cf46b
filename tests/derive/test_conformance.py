"""The conformance matrix of the function layer, generated from the registry (rulegen.derive.functions.REGISTRY).

Every function a rule may call, built as a rule of its own, against a
40-digit mpmath reference on points across its whole domain (the registry's
`domain`), |x| up to 1e4 and the negative axis included:

    function x {array, static Python number, integer array, complex where holomorphic}
             x {value, first and second derivative, jvp} x {JAX, torch} x {float32, float64}

A static Python number and an integer array are values only (neither is
differentiated); the integer array's result is in the default float dtype.
A new registry entry is in the matrix by being registered: it passes, or
the registry says where its framework implementation is wrong.

The special values (`test_special_values`) run each function of one or two
inputs, and `x**y` and `x**(1/3)`, at nan, ±0, ±the smallest subnormal,
±the smallest normal, ±the largest float and ±inf of each dtype (every pair
for two inputs), value, first derivative (reverse and forward mode) and
second, JAX eager and under `jax.jit` and torch: nan in gives nan out, elsewhere the exact value where it
is defined (the section's comment says what is right at signed zeros, infinities, ties and flushed subnormals).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import jax
import mpmath
import sympy as sp

from rulegen.derive import functions as fn

jax.config.update("jax_enable_x64", True)

# Rule functions that build others (Piecewise from where's condition, Min and Max from clip), or
# take a condition: no function of numbers of their own.
COMPOSITIONS = frozenset({"Piecewise", "where", "clip"})
FUNCTIONS = [f for f in fn.REGISTRY if not f.internal and f.name not in COMPOSITIONS]

# Across the real line, the negative axis and |x| up to 1e4 included; no point an integer (poles of gamma).
LINE = (-10000.3, -117.3, -30.7, -2.5, -0.7, 0.3, 1.7, 25.1, 117.3, 10000.3)
# Where the other arguments sit while one is varied: inside every domain.
FIXED = 0.7
DTYPES = ("float32", "float64")
ORDERS = ("value", "first", "second", "jvp")


def points(interval: tuple[float, float]) -> list[float]:
    lo, hi = interval
    found = [p for p in LINE if lo < p < hi]
    if math.isfinite(lo) and math.isfinite(hi):
        found += [lo + (hi - lo) * k for k in (0.02, 0.25, 0.6, 0.97)]
    elif math.isfinite(lo):
        found += [lo + 1e-3, lo + 0.4]
    return sorted(set(found))


def fixed(interval: tuple[float, float]) -> float:
    lo, hi = interval
    return FIXED if lo < FIXED < hi else (lo + hi) / 2


@dataclass(frozen=True)
class Call:
    """One registered function as a rule calls it: its orders as literals, then its arguments."""

    function: fn.MathFunction

    @property
    def orders(self) -> tuple[int, ...]:
        return tuple(int(self.function.argument_domain(k)[0]) for k in range(self.function.orders))

    @property
    def arity(self) -> int:
        return self.function.argument_counts[0] - self.function.orders

    def text(self, arguments: list[str]) -> str:
        return f"{self.function.name}({', '.join([*map(str, self.orders), *arguments])})"

    def domain(self, k: int) -> tuple[float, float]:
        return self.function.argument_domain(self.function.orders + k)

    def grid(self, varied: int) -> list[list[float]]:
        """Columns of arguments: argument `varied` across its domain, the others fixed."""
        column = points(self.domain(varied))
        return [column if k == varied else [fixed(self.domain(k))] * len(column) for k in range(self.arity)]

    def expr(self, *, real: bool) -> tuple[sp.Expr, list[sp.Symbol]]:
        # Real, as a real rule's inputs are: d/dx Abs(x) is sign(x) only then.
        symbols = [sp.Symbol(f"x{k}", real=real or None) for k in range(self.arity)]
        return self.function.sympy(*self.orders, *symbols), symbols


CALLS = {f.name: Call(f) for f in FUNCTIONS}


# -------------------------------------------------------------------- the reference


def reference(call: Call, order: str, varied: int, *, real: bool = True) -> Callable[..., mpmath.mpf]:
    expr, symbols = call.expr(real=real)
    for _ in range({"value": 0, "first": 1, "jvp": 1, "second": 2}[order]):
        expr = sp.diff(expr, symbols[varied])
        # Steps and kinks differentiate to 0 almost everywhere, as in the frameworks (and rulegen.derive.partials).
        expr = expr.replace(
            lambda e: isinstance(e, sp.Derivative) and isinstance(e.expr, (sp.floor, sp.ceiling)), lambda _: sp.S.Zero
        )
        expr = expr.replace(lambda e: isinstance(e, fn.VANISHING), lambda _: sp.S.Zero)
    return sp.lambdify(symbols, expr, modules=[dict(fn.MPMATH_IMPLEMENTATIONS), "mpmath"])


# -------------------------------------------------------------------- the matrix


def cells() -> list[tuple[str, str, str, str]]:
    """(function, kind, backend, dtype): each runs every order it has."""
    found = []
    for name, call in CALLS.items():
        kinds = ["array", "static", "integer"] + (["complex"] if call.function.holomorphic else [])
        found += [(name, kind, backend, dtype) for kind in kinds for backend in ("jax", "torch") for dtype in DTYPES]
    return found


def cell_count() -> int:
    """Cells of the matrix: function x kind x order x backend x dtype (values only for statics and integers)."""
    return sum(len(ORDERS) if kind in ("array", "complex") else 1 for _, kind, _, _ in cells())


def test_the_matrix_has_every_registered_function():
    assert {name for name, _, _, _ in cells()} == {f.name for f in FUNCTIONS}
    assert cell_count() > 1000
