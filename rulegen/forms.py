"""Rewrites that keep every value of a symbolic rule in the float dtype of its inputs.

Array frameworks pick a result's dtype from its operands, and two kinds of
operand would pick the wrong one: integer and boolean arrays (`2**k` is
integer arithmetic, `exp(k)` is the default float dtype, float32) and, in
torch, numbers alone (`torch.where(c, 0.1, 0.2)` is a float32 tensor, and
`torch.tensor(0.1)` is float32 whatever it meets later).  Both are wrapped
in `in_float`, which the printers write as a cast to the dtype of the rule's
float arrays, so float64 in is float64 throughout, and float32 stays float32.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import sympy as sp

from rulegen.functions import in_float
from rulegen.printers import TORCH_TENSOR_ONLY
from rulegen.spec import Rule


def float_anchors(rule: Rule, symbols: dict[str, sp.Symbol]) -> tuple[sp.Symbol, ...]:
    """The rule's float arrays, whose promoted dtype every value takes."""
    return tuple(symbols[i.name] for i in rule.inputs if not i.static and i.dtype == "float")


def integral_arrays(rule: Rule, symbols: dict[str, sp.Symbol]) -> tuple[sp.Symbol, ...]:
    return tuple(symbols[i.name] for i in rule.inputs if not i.static and i.dtype in ("int", "bool"))


def float_forms(
    anchors: Sequence[sp.Symbol],
    integral: Sequence[sp.Symbol],
    *,
    tensor_only: bool,
    scalars: frozenset[str] = frozenset(),
) -> Callable[[sp.Expr], sp.Expr]:
    """A rewrite of integer arrays, and of numbers that would become arrays, into `in_float`.

    A `Piecewise` whose pieces are all numbers is an array built from
    numbers: torch makes it float32 (or int64), and JAX a weakly typed
    array that, returned as an output, is float64 (or an integer) whatever
    the inputs' dtype.  `tensor_only` is for torch, whose atan2, hypot and
    logaddexp take no Python number.  `scalars` name the static inputs: a
    `Piecewise` on them alone is Python arithmetic, no array.
    """
    casts = {k: in_float(k, *anchors) for k in integral}

    def pieces_of_numbers(e: sp.Basic) -> bool:
        return (
            isinstance(e, sp.Piecewise)
            and all(v.is_number for v, _ in e.args)
            and any(s.name not in scalars for s in e.free_symbols)
        )

    def cast_first_piece(e: sp.Piecewise) -> sp.Piecewise:
        (value, cond), *rest = e.args
        return sp.Piecewise((in_float(value, *anchors), cond), *rest, evaluate=False)

    def tensor_only_call(e: sp.Basic) -> bool:
        return isinstance(e, sp.Function) and type(e).__name__ in TORCH_TENSOR_ONLY and any(a.is_number for a in e.args)

    def cast_numbers(e: sp.Function) -> sp.Expr:
        return e.func(*(in_float(a, *anchors) if a.is_number else a for a in e.args), evaluate=False)

    def rewrite(expr: sp.Expr) -> sp.Expr:
        expr = expr.xreplace(casts) if casts else expr
        expr = expr.replace(pieces_of_numbers, cast_first_piece)
        if tensor_only:
            expr = expr.replace(tensor_only_call, cast_numbers)
        return expr

    return rewrite
