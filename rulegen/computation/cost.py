"""What a body costs in eager torch: a pass over memory per operation on arrays, shared parts once.

The derive stage chooses by it which intermediates torch saves and which it recomputes (`rulegen.derive.saved`);
the torch planner, whether backward and jvp share their partials through one function and whether an output's
tangent chains through the residuals' (`rulegen.plan.torch`).
"""

from __future__ import annotations

from collections.abc import Sequence

import sympy as sp

from rulegen.computation.sharing import shared_subexpressions


def recompute_cost(expr: sp.Expr, arrays: set[sp.Symbol], cheap: tuple[type, ...] = ()) -> int:
    """What recomputing `expr` in eager torch costs: a pass over memory per operation on arrays, two for a function
    (but the `cheap` ones).

    Constants fold: `sqrt(2) * x / 2` is one pass, as is `x**2`; `sin(x)` is
    one pass too, but its arithmetic costs about as much again.  A negated
    term of a sum is subtracted (`x - y`, one pass), unless every term is.
    """
    cost = 0
    for node in sp.preorder_traversal(expr):
        if node.is_Atom or not node.free_symbols & arrays:
            continue
        if node.is_Add or node.is_Mul:
            operands = [a for a in node.args if a.free_symbols & arrays]
            cost += len(operands) - (len(operands) == len(node.args))
            if node.is_Add:
                negated = sum(_negated(a) for a in operands)
                cost -= negated - (negated == len(node.args))
        else:
            cost += 2 if isinstance(node, sp.Function) and not isinstance(node, cheap) else 1
    return cost


def _negated(term: sp.Expr) -> bool:
    """Whether `term` is -u, whose negation, a pass of its own, a sum's subtraction does instead."""
    return term.is_Mul and term.as_coeff_Mul()[0] == -1


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
