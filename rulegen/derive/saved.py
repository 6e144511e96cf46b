"""What the derivation settles for the planners beyond the partials: the forms the backends fuse, and whether
the partials a rule gives are the ones sympy derives of its forward.

Computed once, on the derivation the stabilising search chose, and handed to the planners in the `Derivation`:
the planners read it and differentiate nothing themselves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from types import MappingProxyType
from typing import TYPE_CHECKING

import sympy as sp

from rulegen.derive.forms import CANONICAL_FORMS, CanonicalForm, canonical

if TYPE_CHECKING:
    from rulegen.derive.partials import Derivation, Partials


def with_outputs(d: Derivation, expr: sp.Expr) -> sp.Expr:
    """`expr` with outputs replaced by their forward expressions."""
    return expr.subs({d.symbols[n]: e for n, e in d.forward})


def with_fused_forms(d: Derivation, forms: Sequence[CanonicalForm] = CANONICAL_FORMS) -> Derivation:
    """`d` with every expression in the one-kernel forms `forms` name (the backends' fused functions)."""

    def rewrite(expr: sp.Expr) -> sp.Expr:
        return canonical(expr, forms, complex_rule=d.rule.complex)

    def partials(table: Partials) -> Partials:
        return MappingProxyType({k: rewrite(v) for k, v in table.items()})

    return replace(
        d,
        forward=tuple((n, rewrite(e)) for n, e in d.forward),
        residuals=tuple((n, rewrite(e)) for n, e in d.residuals),
        jvp_partials=partials(d.jvp_partials),
        vjp_partials=partials(d.vjp_partials),
        residual_partials=partials(d.residual_partials),
    )


def given_are_derived(d: Derivation) -> bool:
    """Whether each partial `d` gives is, residuals and outputs written out, sympy's own of the forward.

    A rule writes its derivative out mostly to compute it differently
    (stably, or not as the derivative at all); one that is what sympy
    derives, term for term, is what autodiff computes too.  Judged on the
    forms the backends compute: those the stabilising search chose, fused.
    """
    known = {d.symbols[n]: e for n, e in d.residuals}
    forward = dict(d.forward)
    for o in (o.name for o in d.rule.outputs):
        for i in d.diff_inputs:
            given = with_outputs(d, sp.sympify(d.jvp_partials.get((o, i.name), 0)).subs(known))
            if sp.expand(sp.diff(forward[o], d.symbols[i.name]) - given) != 0:
                return False
    return True


def completed(d: Derivation) -> Derivation:
    """`d`, as the stabilising search left it, with what the planners read of it derived too."""
    fused = with_fused_forms(d)
    return replace(d, given_are_derived=given_are_derived(fused))
