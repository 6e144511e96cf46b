"""The accuracy policy: which of the measured forms a search keeps, trading bits of error against cost.

- `best`: the most accurate admissible form (the search's own choice);
- `balanced`: the most accurate admissible form that costs at most `BALANCED_COST` times the derived form in
  each backend (`cost`), the derived form being what autodiff of the forward computes;
- `fast`: the cheapest admissible form (its largest cost ratio to the derived form over the backends) whose
  mean bits of error are no worse than the derived form's in either dtype.

Admissible, under every policy, is the acceptance gate's (`gate.admissible`: finite wherever the derived form
and the exact value are, no worse on average, on points the search never saw) and, where the policy keeps
another form than `best`'s, finite wherever `best`'s choice is and the exact value is a finite float: no
policy buys speed with an inf or a nan (log(1 + exp(x)) overflows where softplus does not, so `fast` keeps a
form that does not).  A form no policy can keep leaves the choice to `best`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import get_args

import sympy as sp

from rulegen.derive.stabilise.budget import BUDGET
from rulegen.derive.stabilise.cost import costs, relative
from rulegen.derive.stabilise.gate import _finite_where_exact, _validation, admissible, as_computed
from rulegen.derive.stabilise.points import Sampling, _evaluated, _Measured
from rulegen.spec.model import DEFAULT_ACCURACY, Accuracy

#: The policies, in the order reports print them.
POLICIES: tuple[str, ...] = get_args(Accuracy)
#: The policy where neither the rule nor the build names one.
DEFAULT_POLICY: str = DEFAULT_ACCURACY
#: `balanced` keeps forms costing at most this much times the derived form, in each backend.
BALANCED_COST = 1.25
#: The most forms a policy other than `best` puts through the gate before it leaves the choice to `best`.
TRIES = 8


def finite_as(candidate: sp.Expr, reference: sp.Expr, derived: sp.Expr, sampling: Sampling, seed: int) -> bool:
    """Whether `candidate` is finite at every validation point where `reference` is and `derived`'s exact value
    is a finite float of the dtype."""
    variables = sampling.variables
    for measured, columns in _validation(derived, sampling, seed):
        if not len(columns[0]):
            continue
        theirs = _evaluated(as_computed(reference), variables, columns, measured.dtype)
        if theirs is None:
            continue
        ours = _evaluated(as_computed(candidate), variables, columns, measured.dtype)
        if ours is None or not _finite_where_exact(ours, theirs, derived, variables, columns, measured.dtype):
            return False
    return True


def no_worse(m: _Measured, derived: _Measured) -> bool:
    """Whether `m`'s mean bits of error are no worse than `derived`'s in either dtype (to within tie_bits)."""
    return all(a <= b + BUDGET.tie_bits for a, b in zip(m.means, derived.means, strict=True))


def pick(
    policy: str,
    best: _Measured,
    derived: _Measured,
    forms: Sequence[_Measured],
    sampling: Sampling,
    seed: int,
    charged: dict[int, float] | None = None,
) -> _Measured:
    """The form `policy` keeps of `forms`, `best` being the search's own choice and `derived` the reference.

    `charged` gives a form's score as the search ranks it (a joined form charged what a regime costs), by id."""
    if policy == "best":
        return best
    expr = derived.expr

    def score(m: _Measured) -> float:
        return (charged or {}).get(id(m), m.score)

    def keeps(m: _Measured) -> bool:
        if m is best:
            return True
        return (
            no_worse(m, derived)
            and (m is derived or admissible(m.expr, expr, sampling, seed))
            and finite_as(m.expr, best.expr, expr, sampling, seed)
        )

    unique = list({m.expr: m for m in reversed([best, *forms])}.values())
    if policy == "balanced":
        limit = [BALANCED_COST * c for c in costs(expr)]

        def within(m: _Measured) -> bool:
            return all(c <= bound + 1e-9 for c, bound in zip(costs(m.expr), limit, strict=True))

        if within(best):
            return best
        ranked = sorted((m for m in unique if within(m)), key=lambda m: (score(m), relative(m.expr, expr)))
    elif policy == "fast":
        ceiling = relative(best.expr, expr)
        ranked = sorted(
            (m for m in unique if m is best or relative(m.expr, expr) < ceiling),
            key=lambda m: (relative(m.expr, expr), score(m)),
        )
    else:
        raise ValueError(f"unknown accuracy policy {policy!r}: one of {', '.join(POLICIES)}")
    for tried, m in enumerate(ranked):
        if m is best or tried >= TRIES:
            return best
        if keeps(m):
            return m
    return best


def front(forms: Sequence[_Measured], derived: _Measured, keep: Sequence[_Measured] = ()) -> list[_Measured]:
    """The forms on the Pareto front of mean bits of error (float64, float32) against cost (per backend), fewest
    bits first, `derived` and `keep` always among them."""
    unique = list({m.expr: m for m in reversed([derived, *keep, *forms])}.values())
    keys = {id(m): (*m.means, *costs(m.expr)) for m in unique}

    def dominated(m: _Measured) -> bool:
        mine = keys[id(m)]
        return any(
            all(a <= b for a, b in zip(keys[id(o)], mine, strict=True)) and keys[id(o)] != mine
            for o in unique
            if o is not m
        )

    kept = {id(m) for m in (derived, *keep)}
    return sorted((m for m in unique if id(m) in kept or not dominated(m)), key=lambda m: (m.score, costs(m.expr)))
