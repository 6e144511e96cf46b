"""What a body costs in eager torch (the intermediates torch keeps are chosen in rulegen.derive.saved)."""

from __future__ import annotations

from collections.abc import Sequence

import sympy as sp

from rulegen.derive.expr import shared_subexpressions
from rulegen.derive.saved import recompute_cost


def eager_passes(exprs: Sequence[sp.Expr], scalars: set[sp.Symbol]) -> int:
    """What computing `exprs` together costs in eager torch, shared parts once (see `recompute_cost`)."""
    replacements, reduced = shared_subexpressions(exprs, sp.numbered_symbols("_pass"))
    arrays = {s for e in exprs for s in e.free_symbols} - scalars
    cost = 0
    for symbol, value in replacements:
        if value.free_symbols & arrays:
            arrays.add(symbol)
            cost += recompute_cost(value, arrays)
    return cost + sum(recompute_cost(e, arrays) for e in reduced)
