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
    numbers: bool,
    scalars: frozenset[str] = frozenset(),
) -> Callable[[sp.Expr], sp.Expr]:
    """A rewrite of integer arrays (and, with `numbers`, numbers that would become tensors) into `in_float`.

    `numbers` is for torch: a `Piecewise` whose pieces are all numbers is a
    tensor built from numbers, and so is a number given to a function that
    takes only tensors.  JAX's numbers are weakly typed and take the dtype
    of the arrays they meet.  `scalars` name the static inputs: a `Piecewise`
    on them alone is Python arithmetic, no tensor.
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

    def tensor_only(e: sp.Basic) -> bool:
        return isinstance(e, sp.Function) and type(e).__name__ in TORCH_TENSOR_ONLY and any(a.is_number for a in e.args)

    def cast_numbers(e: sp.Function) -> sp.Expr:
        return e.func(*(in_float(a, *anchors) if a.is_number else a for a in e.args), evaluate=False)

    def rewrite(expr: sp.Expr) -> sp.Expr:
        expr = expr.xreplace(casts) if casts else expr
        if numbers:
            expr = expr.replace(pieces_of_numbers, cast_first_piece)
            expr = expr.replace(tensor_only, cast_numbers)
        return expr

    return rewrite
