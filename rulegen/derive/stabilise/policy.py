"""The accuracy policy: which of the measured forms a search keeps, trading bits of error against cost.

- `best`: the most accurate admissible form (the search's own choice);
- `balanced`: the most accurate admissible form that costs at most `BALANCED_COST` times the reference in
  each backend (`cost`);
- `fast`: the cheapest admissible form (its largest cost ratio to the reference over the backends) whose
  mean bits of error are no worse than the reference's in either dtype.

The reference is what autodiff of the forward as the rule writes it computes: the derived form, or, where
the derivation rewrote the forward into a stable form before it searched (log(1 + x) into log1p(x), c + c
erf(u) into an erfc), the written form or its derivative, which is then a candidate too: the cheap written
form is kept wherever it is admissible.  A form's cost leaves out what it
reads of the forward the backends compute, and the reference's what it reads
of the forward as written (`cost.Free`); the reference's powers of the written
forward's square roots cost what autodiff pays, the root times an integer
power, not the one power sympy's derivative writes (u**(-3/2) of 1/sqrt(u)).

Admissible, under every policy, is the acceptance gate's (`gate.admissible`: finite wherever the derived form
and the exact value are, no worse on average, on points the search never saw) and, where the policy keeps
another form than `best`'s, finite wherever `best`'s choice is and the exact value is a finite float: no
policy buys speed with an inf or a nan (log(1 + exp(x)) overflows where softplus does not, so `fast` keeps a
form that does not).  Finite as the generated code computes it (`as_computed`, a negative fractional power
as one power, not numpy's division) at the validation points and at `_PER_BINADE` points on every binade of
each input.  A form no policy can keep leaves the choice to `best`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, get_args

import numpy as np
import sympy as sp

from rulegen.derive.expr import lambdified
from rulegen.derive.measure import inside
from rulegen.derive.stabilise.budget import BUDGET
from rulegen.derive.stabilise.cost import NOTHING_FREE, Free, costs, relative
from rulegen.derive.stabilise.flushed import flushed_call
from rulegen.derive.stabilise.gate import (
    _finite_where_exact,
    _validation,
    admissible,
    as_computed,
    both_ways,
    meeting_the_condition,
)
from rulegen.derive.stabilise.points import Sampling, _evaluated, _Measured, _numpy_implementations
from rulegen.spec.model import DEFAULT_ACCURACY, Accuracy

#: The policies, in the order reports print them.
POLICIES: tuple[str, ...] = get_args(Accuracy)
#: The policy where neither the rule nor the build names one.
DEFAULT_POLICY: str = DEFAULT_ACCURACY
#: `balanced` keeps forms costing at most this much times the derived form, in each backend.
BALANCED_COST = 1.25
#: The most forms a policy other than `best` puts through the gate before it leaves the choice to `best`.
TRIES = 8


class _printed_power(sp.Function):  # noqa: N801 - sympy functions are lower case
    """`base**exponent` as the backends' printers write a negative fractional power: one power, no division."""

    nargs = 2


def _as_printed(expr: sp.Expr) -> sp.Expr:
    """`expr` with each power below 0 of a fractional exponent (but -1/2, a reciprocal root) held as one power:
    numpy's printer writes -1/(2*x**(3/2)) as a division, finite at x = 2.6e-206, where the generated code's
    -(x**(-3/2))/2 overflows."""

    def fractional(e: sp.Basic) -> bool:
        exponent = getattr(e, "exp", None)
        return (
            isinstance(e, sp.Pow)
            and exponent is not None
            and exponent.is_Rational
            and not exponent.is_Integer
            and bool(exponent < 0)
            and exponent != -sp.S.Half
        )

    return expr.replace(fractional, lambda e: _printed_power(e.base, e.exp))


def _printed_values(
    expr: sp.Expr, variables: Sequence[sp.Symbol], columns: Sequence[np.ndarray], dtype: Any, *, flushed: bool
) -> Any:
    """`expr` evaluated by numpy at `columns` in `dtype` as the generated code computes it (`as_computed`, and
    `_as_printed`), with `flushed` as XLA does (`flushed_call`); None where numpy cannot."""
    printed = _as_printed(as_computed(expr))
    if not printed.has(_printed_power):
        return _evaluated(printed, variables, columns, dtype, flushed=flushed)
    try:
        fn = lambdified(variables, printed, modules=[{"_printed_power": np.power, **_numpy_implementations()}, "numpy"])
        with np.errstate(all="ignore"):
            result = flushed_call(fn, columns, dtype) if flushed else np.asarray(fn(*columns))
    except Exception:
        return None
    if np.iscomplexobj(result):
        return None
    with np.errstate(over="ignore"):
        return np.broadcast_to(result.astype(dtype), np.shape(columns[0]))


#: Points per binade of `_binade_columns`: an overflow's window can be narrower than a binade (-(x**(-3/2))/2
#: overflows where the exact value is finite for x in (2.0e-206, 3.1e-206), which the validation's thousand
#: points drawn over 2046 binades mostly miss).
_PER_BINADE = 4


def _binade_columns(sampling: Sampling, columns: Sequence[np.ndarray], dtype: Any) -> list[np.ndarray]:
    """`columns` and, for each variable, `_PER_BINADE` points per binade of its dtype, either sign, inside its
    domain (and the joint condition), the other variables as in `columns`' rows in turn."""
    info = np.finfo(dtype)
    low, high = info.minexp - info.nmant, info.maxexp - 1  # the smallest subnormal's binade, the largest's
    magnitudes = np.exp2(np.arange(low * _PER_BINADE, high * _PER_BINADE + 1) / _PER_BINADE).astype(dtype)
    grid = np.concatenate([magnitudes, -magnitudes])
    out = [np.asarray(c) for c in columns]
    if not len(out[0]):
        return out
    for index, (_, domain) in enumerate(sampling.domains):
        values = grid[inside(domain, grid)]
        rows = np.arange(len(values)) % len(columns[0])
        drawn = meeting_the_condition(
            sampling, [values if k == index else np.asarray(columns[k])[rows] for k in range(len(out))]
        )
        out = [np.concatenate([o, d]) for o, d in zip(out, drawn, strict=True)]
    return out


def finite_as(candidate: sp.Expr, reference: sp.Expr, derived: sp.Expr, sampling: Sampling, seed: int) -> bool:
    """Whether `candidate` is finite at every validation point, and at points on every binade of each variable,
    where `reference` is and `derived`'s exact value is a finite float of the dtype, both computed as the
    generated code computes them."""
    variables = sampling.variables
    for measured, validation in _validation(derived, sampling, seed):
        if not len(validation[0]):
            continue
        columns = _binade_columns(sampling, validation, measured.dtype)

        def values(expr: sp.Expr, flushed: bool, columns: Sequence[np.ndarray] = columns, dtype: Any = measured.dtype):
            return _printed_values(expr, variables, columns, dtype, flushed=flushed)

        for _, ours, theirs in both_ways(values, candidate, reference, columns):
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
    reference: _Measured | None = None,
    free: Free = NOTHING_FREE,
) -> _Measured:
    """The form `policy` keeps of `forms`, `best` being the search's own choice and `derived` the form searched.

    `reference` is what autodiff of the forward as written computes, where the derivation rewrote the forward
    first (None: `derived`): the cost and the accuracy `fast` and `balanced` weigh forms against, and a form they
    may keep (finite wherever `best` is and the exact value is a finite float, as any form they keep).
    A form joined by regimes is scored as the search ranks it, charged what a regime costs.
    `free` is what the forms read of the forward the backends compute, and what `reference` reads of the forward
    as written (`cost.Free`): those cost nothing."""
    if policy == "best":
        return best
    expr = derived.expr
    ref = derived if reference is None else reference

    def reads(m: _Measured) -> frozenset[sp.Expr]:
        return free.written if m is reference else free.forms

    def price(m: _Measured) -> tuple[float, ...]:
        return costs(m.expr, reads(m))

    def ratio(m: _Measured) -> float:
        return relative(m.expr, ref.expr, reads(m), reads(ref), free.roots)

    def score(m: _Measured) -> float:
        return m.score + (BUDGET.regime_margin_bits if m.branches else 0.0)

    def keeps(m: _Measured) -> bool:
        if m is best:
            return True
        return (
            no_worse(m, ref)
            and (m is derived or m is ref or admissible(m.expr, ref.expr, sampling, seed))
            and finite_as(m.expr, best.expr, expr, sampling, seed)
        )

    unique = list({m.expr: m for m in reversed([best, *forms, ref])}.values())
    if policy == "balanced":
        # The reference priced as autodiff computes it (its powers of the forward's roots multiplied out of them),
        # a candidate as the printers write it: the derived form itself may cost more than its reference.
        limit = [BALANCED_COST * c for c in costs(ref.expr, reads(ref), free.roots)]

        def within(m: _Measured) -> bool:
            return all(c <= bound + 1e-9 for c, bound in zip(price(m), limit, strict=True))

        if within(best):
            return best
        ranked = sorted(
            (m for m in unique if within(m)), key=lambda m: (score(m), relative(m.expr, expr, free.forms, free.forms))
        )
    elif policy == "fast":
        ceiling = ratio(best)
        ranked = sorted((m for m in unique if m is best or ratio(m) < ceiling), key=lambda m: (ratio(m), score(m)))
    else:
        raise ValueError(f"unknown accuracy policy {policy!r}: one of {', '.join(POLICIES)}")
    for tried, m in enumerate(ranked):
        if m is best or tried >= TRIES:
            return best
        if keeps(m):
            return m
    return best


def front(
    forms: Sequence[_Measured],
    derived: _Measured,
    keep: Sequence[_Measured] = (),
    free: frozenset[sp.Expr] = frozenset(),
) -> list[_Measured]:
    """The forms on the Pareto front of mean bits of error (float64, float32) against cost (per backend, `free`
    costing nothing), fewest bits first, `derived` and `keep` always among them."""
    unique = list({m.expr: m for m in reversed([derived, *keep, *forms])}.values())
    keys = {id(m): (*m.means, *costs(m.expr, free)) for m in unique}

    def dominated(m: _Measured) -> bool:
        mine = keys[id(m)]
        return any(
            all(a <= b for a, b in zip(keys[id(o)], mine, strict=True)) and keys[id(o)] != mine
            for o in unique
            if o is not m
        )

    kept = {id(m) for m in (derived, *keep)}
    return sorted(
        (m for m in unique if id(m) in kept or not dominated(m)), key=lambda m: (m.score, costs(m.expr, free))
    )
