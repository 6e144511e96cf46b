"""The search: screen, sample, measure every family's candidates, then regimes, clamps and scaling; choose."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sympy as sp

from rulegen.derive.functions import power_product
from rulegen.derive.stabilise.budget import BUDGET
from rulegen.derive.stabilise.cache import load, search_key, store
from rulegen.derive.stabilise.cost import NOTHING_FREE, Free
from rulegen.derive.stabilise.families import (
    DIVIDED_FIRST,
    LEAD_TERM,
    POLES,
    QUOTIENT_LEAD_TERM,
    SUM_SCALED,
    _candidates,
    _finishing,
    outermost_sums,
)
from rulegen.derive.stabilise.gate import (
    a_term_passes_the_range,
    admissible,
    inadmissible_points,
    nan_where_infinite,
    nan_where_not,
    not_finite_at,
    past_the_range,
    validated_bits,
)
from rulegen.derive.stabilise.points import (
    _DTYPES,
    Sampling,
    _looks_accurate,
    _measure,
    _Measured,
    _Points,
    _sample,
)
from rulegen.derive.stabilise.policy import DEFAULT_POLICY, front, pick
from rulegen.derive.stabilise.regimes import _with_regimes
from rulegen.derive.stabilise.saturation import _saturated
from rulegen.derive.stabilise.scaling import _with_scaling, radicands_scaled
from rulegen.spec.rules import Domain


@dataclass(frozen=True)
class Choice:
    """Which form of one expression the backends compute, and its measured mean bits of error before and after."""

    quantity: str
    derived: sp.Expr
    chosen: sp.Expr
    family: str
    #: Mean bits of error, (float64, float32), of the form as derived and of the chosen one.
    bits_before: tuple[float, float]
    bits_after: tuple[float, float]
    #: The measured forms without regimes within `BUDGET.runner_up_bits` of the chosen one, best first (the chosen
    #: one, or the branches it joins, among them): a derivative of each is a candidate for the derivative of this
    #: expression (rulegen.derive.partials), whose own form may cancel where theirs do not.
    good_forms: tuple[sp.Expr, ...] = ()
    #: The accuracy policy that chose (rulegen.derive.stabilise.policy).
    policy: str = DEFAULT_POLICY
    #: The measured forms on the Pareto front of bits of error against cost: (family, form, (float64, float32)
    #: mean bits), fewest bits first, the derived and the chosen form among them.
    front: tuple[tuple[str, sp.Expr, tuple[float, float]], ...] = ()
    #: What the forms read of the forward for nothing (rulegen.derive.stabilise.cost.reused): their costs'.
    free: frozenset[sp.Expr] = frozenset()

    @property
    def changed(self) -> bool:
        return self.chosen != self.derived

    @property
    def more_accurate(self) -> bool:
        """Whether the chosen form measured better than the derived one, not merely as good and shorter."""
        return self.changed and sum(self.bits_after) <= sum(self.bits_before) - BUDGET.margin_bits


def _lineage(m: _Measured) -> str:
    """The family of the form a candidate reassociates (its own where it reassociates none)."""
    return m.family.removesuffix(", reassociated")


def searchable(expr: sp.Expr, sampling: Sampling) -> bool:
    """Whether `expr` is searched at all: in the sampled variables, no Piecewise, and within the work limits."""
    return (
        bool(sampling.variables)
        and len(sampling.variables) <= BUDGET.search_symbols
        and expr.free_symbols <= set(sampling.variables)
        and not expr.has(sp.Piecewise)
        and sp.count_ops(expr) <= BUDGET.search_ops
    )


def stabilise(
    expr: sp.Expr,
    sampling: Sampling,
    *,
    quantity: str = "",
    seed: int = 0,
    alternatives: tuple[tuple[str, sp.Expr], ...] = (),
    policy: str = DEFAULT_POLICY,
    written: sp.Expr | None = None,
    free: Free = NOTHING_FREE,
) -> Choice:
    """The form of `expr` with the least measured error, and the bits before and after.

    `expr` is its own reference: each candidate must equal it, and one that
    does not is as far off as its values are.  `alternatives` are (family,
    form) pairs measured before the rewrite families' own candidates: other
    forms of the same value that the caller knows (the forward as written, a
    derivative of another form of the forward).  Keeps `expr` where it is
    not `searchable`, where numpy cannot evaluate it, where no point has a
    finite value, or where nothing is measurably better.  `policy` trades
    bits of error against cost (rulegen.derive.stabilise.policy).  `written`
    is what autodiff of the forward as the rule writes it computes, where the
    derivation rewrote the forward into a stable form first (log(1 + x) into
    log1p(x)): under `fast` and `balanced` it is a candidate beside `expr`,
    searched even where `expr` looks accurate, and the reference of their
    cost and accuracy; `best` ignores it.  `free` is what the forward the
    backends compute gives the backward to read, and what the forward as
    written gives autodiff of it (`cost.Free`): a partial that reads the
    forward's `exp` costs less than one that computes another.  The search
    measures `BUDGET.search_points` points per dtype.
    """
    unchanged = Choice(
        quantity, expr, expr, "as derived", (math.nan, math.nan), (math.nan, math.nan), policy=policy, free=free.forms
    )
    if not searchable(expr, sampling):
        return unchanged
    if policy == "best" or written == expr or (written is not None and not searchable(written, sampling)):
        written = None
    if policy == "best":
        free = NOTHING_FREE
    elif written is None:
        free = free._replace(written=free.forms)
    points = BUDGET.search_points
    key = (expr, sampling, seed, points, alternatives, policy, written, free)
    found = _SEARCHED.get(key)
    if found is None:
        decided_by: tuple[Any, ...] = (sampling.domains, sampling.condition, seed, points, alternatives, BUDGET, policy)
        if written is not None:
            decided_by = (*decided_by, written)
        if free != NOTHING_FREE:
            decided_by = (*decided_by, *(tuple(sorted(f, key=sp.default_sort_key)) for f in free))
        on_disk = search_key(expr, decided_by)
        found = load(on_disk)
        if found is None:
            found = _search(expr, sampling, seed, points, alternatives, policy, written, free)
            store(on_disk, found)
        _SEARCHED[key] = found
    derived, chosen, family, before, after, good_forms, shown = found
    return Choice(quantity, derived, chosen, family, before, after, good_forms, policy, shown, free.forms)


#: Searches done in this process, by what decides them: an expression met again (a JVP's partial is the VJP's) is
#: searched once; `cache` keeps them across processes.
_SEARCHED: dict[tuple[Any, ...], tuple[Any, ...]] = {}


def _search(
    expr: sp.Expr,
    sampling: Sampling,
    seed: int,
    count: int,
    alternatives: tuple[tuple[str, sp.Expr], ...],
    policy: str = DEFAULT_POLICY,
    written: sp.Expr | None = None,
    free: Free = NOTHING_FREE,
) -> tuple[Any, ...]:
    """(derived, chosen, family, bits before, bits after, good forms, front) for `expr` under `policy`, `written`
    the reference of a policy other than `best` where the derivation rewrote the forward (None: `expr`), `free`
    what the forms and `written` read of their forwards for nothing."""
    variables = sampling.variables
    nothing = (expr, expr, "as derived", (math.nan, math.nan), (math.nan, math.nan), (), ())
    # Inf or nan at validation points where the exact value is finite: searched, however accurate it looks.
    accurate = _looks_accurate(expr, sampling, seed) and not inadmissible_points(expr, expr, sampling, seed)
    if accurate and written is None:
        return _mended_alone(expr, sampling, seed, count, free) or nothing
    search = [_sample(expr, sampling, count, seed + 1, dtype) for dtype in _DTYPES]
    derived = _measure(expr, "as derived", variables, search)
    reference = None if written is None else _measure(written, "as written", variables, search)
    if derived is None or accurate:
        if derived is None or reference is None:
            return nothing
        return _alone(derived, reference, policy, sampling, seed, free)
    pool = [derived, *([] if reference is None else [reference])]
    seen = {m.expr for m in pool}

    def measured_from(found: Iterable[tuple[str, sp.Expr]], budget: int) -> None:
        for family, candidate in found:
            if budget <= 0:
                return
            if candidate in seen or candidate.has(sp.nan, sp.zoo, sp.oo, -sp.oo):
                continue
            seen.add(candidate)
            budget -= 1
            measured = _measure(candidate, family, variables, search)
            if measured is not None:
                pool.append(measured)

    # Forms of scaled products (`power_product`) that alternatives bring (derivatives of a scaled form of the
    # forward) are kept for the repair below (`_scaled_repair`), never ranked with the ordinary forms.
    measured_from(
        itertools.chain(_scaled(alternatives, expr, scaled=False), _candidates(expr, variables)),
        BUDGET.candidates_per_expression + len(alternatives),
    )
    # The families again from the best alternative, which may be a better start than the expression itself (the
    # derivative of a simpler form of the forward): its own budget.
    known = set(alternatives)
    start = min((m for m in pool if (m.family, m.expr) in known), key=lambda m: m.score, default=None)
    if start is not None and searchable(start.expr, sampling):
        found = _candidates(start.expr, variables)
        measured_from(((f"{start.family}, {family}", c) for family, c in found), BUDGET.candidates_per_alternative)
    # The best forms found, each overflow they keep mended: families that rewrite what the others made, once each.
    # Logs are taken apart in a form the gamma series made (a `where` of thresholds) that keeps the log1p of a
    # product that overflows; products reassociate in a form without a `where`.  Then poles are taken out of the
    # best forms, those just made among them: a Student t's partial in df is best with its logs taken apart (a
    # derivative of a forward form), and its digamma(df/2) is nan where XLA flushes df/2 to 0.
    for finishing, budget in (
        (("reassociated", "logs taken apart"), BUDGET.reassociated_starts * 3),
        ((POLES,), BUDGET.reassociated_starts),
    ):
        measured_from(_finished(finishing, _leaders(pool, alternatives)), budget)
    # Inputs clamped where forms overflow on the way to a limit they have reached.
    # A clamp of some factors alone, which keeps what the forward computes, under `fast` alone (`_saturated`).
    # Square roots of a discriminant that overflows computed scaled, before the regimes that join them.
    pool += _saturated(pool, sampling, search, free.forms if policy == "fast" else None) + radicands_scaled(
        pool, sampling, search
    )
    # Least error first; within `BUDGET.margin_bits` of the least, the fewest operations.
    least = min(m.score + m.charge for m in pool)
    best = min(
        (m for m in pool if m.score + m.charge <= least + BUDGET.margin_bits / 2), key=lambda m: (m.ops, m.score)
    )
    # Regimes from the best and from the next ones too: the pair that joins best need not include the best alone
    # (the derived form for x < 0 and a derivative of the conjugate for x > 0 beat an expanded form on its own).
    regime_starts = [best]
    for m in sorted((m for m in pool if m is not best), key=lambda m: m.score):
        # One start per form and its reassociations, which fail where it does and would join the same way.
        if len(regime_starts) < BUDGET.regime_starts and _lineage(m) not in {_lineage(t) for t in regime_starts}:
            regime_starts.append(m)
    joined = [_with_regimes(m, pool, sampling, search) for m in regime_starts]
    plain = best
    best = min(
        (j for j in joined if j.branches and j.score <= plain.score - BUDGET.regime_margin_bits),
        key=lambda m: m.score,
        default=plain,
    )
    # Overflow-safe scaling last: it takes the regimes' conditions along (a sign is kept by the scaling).
    best = _with_scaling(best, pool, expr, sampling, search)

    # The acceptance gate: the best form proven on points it was not chosen on, else the next that is, a joined
    # form (or one of scaled products) charged what a regime costs (the branch that fails the gate may be the one
    # a regime keeps out of its region: (2 + 1/x)/(3 + 1/x) is nan at subnormal x, and right where (2x + 1)/(3x + 1)
    # overflows).
    def charged(m: _Measured) -> float:
        return m.score + m.charge

    joined_forms = [j for j in joined if j.branches]
    ranked_forms = [best, *sorted((m for m in (*joined_forms, *pool) if m is not best), key=charged)]
    admitted = itertools.islice(
        (
            m
            for m in ranked_forms
            if m.score <= derived.score - BUDGET.margin_bits
            and (m is derived or admissible(m.expr, expr, sampling, seed))
        ),
        BUDGET.validated_forms,
    )
    best = _validated_choice(list(admitted), expr, sampling, seed) or derived
    if best.score > derived.score - BUDGET.margin_bits:
        # Nothing measurably better: the simplest form no worse than the derived one at any dtype's mean (to within
        # `BUDGET.tie_bits`, the noise of 32 points: a factored form 0.016 bits behind is as good, and prints shorter).
        no_worse = [
            m for m in pool if all(a <= b + BUDGET.tie_bits for a, b in zip(m.means, derived.means, strict=True))
        ]
        best = next(
            m
            for m in sorted(no_worse, key=lambda m: (m.ops, m is not derived, m.score))
            if m is derived or admissible(m.expr, expr, sampling, seed)
        )
    forms = [*joined_forms, *pool]
    # The accuracy policy: `best` (repaired where it is inf, by products scaled (`power_product`, several times a
    # plain product's work) where nothing else repairs it) keeps the form above; the others may keep a cheaper
    # admissible one.
    chosen = pick(
        policy,
        _scaled_repair(
            _repaired(best, derived, forms, sampling, seed, charged),
            derived,
            pool,
            alternatives,
            sampling,
            search,
            seed,
        ),
        derived,
        forms,
        sampling,
        seed,
        reference,
        free,
    )
    # Last, the chosen form's quotients of sums divided first where the sum overflows at the top of the float range,
    # and its sums scaled where a term passes the range, where that mends it; the good forms are the chosen one's,
    # the `where` it adds no start of a partial's search.
    best = _mended_at_the_edge(chosen, derived, sampling, search, seed)
    shown = tuple(
        (m.family, m.expr, m.means) for m in front(forms, derived, (best, *filter(None, [reference])), free.forms)
    )
    return (expr, best.expr, best.family, derived.means, best.means, _good_forms(chosen, pool), shown)


def _leaders(pool: Sequence[_Measured], alternatives: tuple[tuple[str, sp.Expr], ...]) -> list[_Measured]:
    """The first `BUDGET.reassociated_starts` forms of `pool` by score and charge, the first of the expression's own
    forms and the first of the `alternatives`' forms among them: an alternative's rewrites can rank first
    and be inadmissible all alike, where the expression's own form, finished, is the admissible one (a normal KL's
    partial in a location: (p/s)/s - (q/s)/s is nan where p/s and q/s overflow, (p - q)/s/s is right).  A form
    of the family of one already among them that measures as it does (within `BUDGET.tie_bits` at each dtype) is no
    further start: two series families' forms alike took the starts from a series with its poles taken out, whose
    logs taken apart are a Student t's log-density to 0.5 bits."""
    from_alternatives = {family for family, _ in alternatives}
    ranked = sorted(pool, key=lambda m: m.score + m.charge)

    def origin(m: _Measured) -> bool:
        return m.family.split(", ")[0] in from_alternatives

    def alike(m: _Measured, n: _Measured) -> bool:
        return m.family.split(", ")[0] == n.family.split(", ")[0] and all(
            abs(a - b) <= BUDGET.tie_bits for a, b in zip(m.means, n.means, strict=True)
        )

    leaders = [next(m for m in ranked if origin(m) == o) for o in sorted({origin(m) for m in ranked})]
    for m in ranked:
        if len(leaders) >= BUDGET.reassociated_starts:
            break
        if all(m is not n and not alike(m, n) for n in leaders):
            leaders.append(m)
    return sorted(leaders, key=lambda m: m.score + m.charge)


def _finished(families: Sequence[str], leaders: Sequence[_Measured]) -> Iterator[tuple[str, sp.Expr]]:
    """(family, form) of each of `families`' finishing rewrites (`families._finishing`) of `leaders`, those a
    family has already rewritten left out."""
    for family in families:
        for m in leaders:
            if family not in m.family.split(", "):
                for c in _finishing(family, m.expr):
                    yield f"{m.family}, {family}", c


def _validated_choice(admitted: list[_Measured], derived: sp.Expr, sampling: Sampling, seed: int) -> _Measured | None:
    """The first of the admitted forms (the search's ranking), unless another measures `BUDGET.margin_bits` better
    on the gate's points: a regime split the search's few points rank first can be nan a binade away from them,
    where a form ranked a little behind is right."""
    if len(admitted) < 2:
        return admitted[0] if admitted else None
    # A joined form, or one of scaled products, is charged what a regime costs, as in the search's own ranking.
    bits = [validated_bits(m.expr, derived, sampling, seed) + m.charge for m in admitted]
    first = bits[0]
    better = min(range(len(admitted)), key=lambda k: bits[k])
    return admitted[better] if bits[better] < first - BUDGET.margin_bits else admitted[0]


def _repaired(
    best: _Measured,
    derived: _Measured,
    forms: list[_Measured],
    sampling: Sampling,
    seed: int,
    charged: Callable[[_Measured], float],
    *,
    behind: float = 0.0,
) -> _Measured:
    """`best`, unless it is inf or nan at validation points where the derived form is and the exact value is
    finite (`inadmissible_points`) and another form the gate admits is so at fewer: then the one at fewest, in the
    search's order among equals.  The forms the search's points rank alike are the ones told apart: a form
    finite at the overflow edge measures as the derived one wherever the search looked.  Only forms measured no
    worse than `best` (by at most `behind` bits) are tried: one a little behind on the search's points was 19 bits
    behind on others.  `best` with its poles taken out (`_poles_of`), a form that differs from it where an argument
    of the gamma family is flushed to 0 and in the order of its sums, is tried `BUDGET.margin_bits` behind, as a
    form of scaled products is: a Student t's partial in df as derived loses up to 60 bits at large df, and in
    another order they are others.
    """
    expr = derived.expr
    left = inadmissible_points(best.expr, expr, sampling, seed)
    if not left:
        return best
    tied = [
        m
        for m in forms
        if m is not best
        and m.expr != expr
        and m.score <= best.score + (BUDGET.margin_bits if _poles_of(best, m) else behind)
    ]
    counted = []
    for m in sorted(tied, key=lambda m: (charged(m), m.ops))[: BUDGET.repair_forms]:
        count = inadmissible_points(m.expr, expr, sampling, seed)
        if count < left:
            counted.append((count, m))
    # No worse than `best` on the gate's measured points either: the search's few can rank a cancelling form alike
    # (a Gumbel's partial in its scale as derived, reassociated: 0.1 -> 19 bits where the sum cancels).
    limit = validated_bits(best.expr, expr, sampling, seed) + BUDGET.margin_bits
    for _, m in sorted(counted, key=lambda c: c[0]):
        if admissible(m.expr, expr, sampling, seed) and validated_bits(m.expr, expr, sampling, seed) <= limit:
            return m
    return best


def _mended_alone(expr: sp.Expr, sampling: Sampling, seed: int, count: int, free: Free) -> tuple[Any, ...] | None:
    """`_search`'s answer for an `expr` that looks accurate and is finite at the gate's points, but inf or nan where
    a sum of two inputs overflows at the top of the float range: its repairs there alone
    (`_mended_at_the_edge`), no good forms (the partials' alternatives are as they were); None where there is
    nothing to mend or it does not mend."""
    if not inadmissible_points(expr, expr, sampling, seed, edges=True):
        return None
    search = [_sample(expr, sampling, count, seed + 1, dtype) for dtype in _DTYPES]
    derived = _measure(expr, "as derived", sampling.variables, search)
    mended = None if derived is None else _mended_at_the_edge(derived, derived, sampling, search, seed)
    if derived is None or mended is None or mended is derived:
        return None
    shown = tuple((m.family, m.expr, m.means) for m in front([derived, mended], derived, (mended,), free.forms))
    return (expr, mended.expr, mended.family, derived.means, mended.means, (), shown)


def _mended_at_the_edge(
    best: _Measured, derived: _Measured, sampling: Sampling, search: list[_Points], seed: int
) -> _Measured:
    """`best` with its quotients of sums divided first where the sum overflows (`families._divided_first`), then
    its sums scaled where they are not finite (`families._sum_scaled`), then its quotients over a lead term of their
    divisors where they are not finite (`families._quotients_over_lead_terms`), each where it mends (`_mended_by`), then
    its sums taken over a lead term where they are nan and the exact value is an infinity
    (`_mended_where_infinite`)."""
    for family in (DIVIDED_FIRST, SUM_SCALED, QUOTIENT_LEAD_TERM):
        best = _mended_by(family, best, derived, sampling, search, seed)
    return _mended_where_infinite(best, derived, sampling, search, seed)


def _mended_where_infinite(
    best: _Measured, derived: _Measured, sampling: Sampling, search: list[_Points], seed: int
) -> _Measured:
    """`best`, unless it is nan at a validation point where the exact value is past the float range
    (`gate.nan_where_infinite`): then `best` with each of its sums taken over a lead term where the sum is not
    finite (`families._over_lead_terms`), the first such form that is nan at fewer of those points, nan nowhere
    `best` is not, admitted by the gate and no worse on its measured points.  Terms that overflow to opposite
    infinities are inf - inf where the exact sum is an infinity of one sign: expm1(x)/x's derivative, exp(x)/x -
    expm1(x)/x**2, from x = 723 (float32: 97), which a sum scaled by a constant does not reach."""
    expr, variables = derived.expr, sampling.variables
    targets = nan_where_infinite(best.expr, expr, sampling, seed)
    left = not_finite_at(best.expr, variables, targets, nan=True)
    if not left:
        return best
    repairs = ((f"{best.family}, {LEAD_TERM}", c) for c in _finishing(LEAD_TERM, best.expr))

    def broken(form: sp.Expr) -> int:
        return not_finite_at(form, variables, targets, nan=True)

    return _first_that_mends(repairs, broken, left, best, expr, sampling, search, seed) or best


def _mended_by(
    family: str, best: _Measured, derived: _Measured, sampling: Sampling, search: list[_Points], seed: int
) -> _Measured:
    """`best`, unless it is inf or nan where two inputs of opposite signs are at the top of the float range, the
    derived form is too and the exact value is a finite float (`inadmissible_points` at the edge's pairs), or else
    at the gate's points, or else (the sum-scaled repair) where a term of its own sums passes the range
    (`past_the_range`): then `best` rewritten by `family`'s repair (`families._finishing`), where that is inf or nan
    at fewer of them, the gate admits it, it is nan nowhere `best` is not, and it is no worse on the gate's
    measured points.  A Gumbel's log-density, -(x - loc)/s - exp(-(x - loc)/s) - log(s), is -inf at x = 1e308,
    loc = -1e308, s = 1e10, where it is -2e298, until its quotient is divided first; a Beta KL is inf in float32
    where one term overflows and the sum does not, until the sum is scaled.  A repair alone, never a form the
    search ranks: it computes as `best` does wherever the sum is finite, at a comparison's cost."""
    expr = derived.expr
    variables = sampling.variables
    # At the edge's pairs, else at the validation points: a product scaled over a sum's divisor overflows where
    # its quotient does not at two large inputs of one sign too (a Gamma KL's p_c q_rate/p_rate over p_rate).
    edges = True
    left = inadmissible_points(best.expr, expr, sampling, seed, edges=edges)
    if not left:
        edges = False
        left = inadmissible_points(best.expr, expr, sampling, seed, edges=edges)
    if (
        left
        and family == SUM_SCALED
        and not a_term_passes_the_range(tuple(outermost_sums(best.expr)), expr, sampling, seed, edges=edges)
    ):
        # A term that is nan is its product's order (inf * 0), which no scaling of the sum mends.
        return best
    own_terms = None
    if not left and family == SUM_SCALED:
        own_terms = past_the_range(best.expr, tuple(outermost_sums(best.expr)), expr, sampling, seed)
        left = not_finite_at(best.expr, variables, own_terms)

    def broken(form: sp.Expr) -> int:
        if own_terms is None:
            return inadmissible_points(form, expr, sampling, seed, edges=edges)
        return not_finite_at(form, variables, own_terms)

    if not left:
        return best
    # The derived form's too, where `best`'s do not mend: a reassociated quotient ((1/s)**2 ((a**2 + b**2)/s)) divides
    # its sum once, where the derived one's power of the divisor divides the terms' squares.
    starts = [best] if best.expr == expr else [best, derived]
    repairs = ((f"{m.family}, {family}", c) for m in starts for c in _finishing(family, m.expr))
    return _first_that_mends(repairs, broken, left, best, expr, sampling, search, seed) or best


def _first_that_mends(
    repairs: Iterable[tuple[str, sp.Expr]],
    broken: Callable[[sp.Expr], int],
    left: int,
    best: _Measured,
    expr: sp.Expr,
    sampling: Sampling,
    search: list[_Points],
    seed: int,
) -> _Measured | None:
    """The first of `repairs` ((family, form)) broken at fewer points than `best`'s `left`, nan nowhere `best` is
    not, admitted by the gate and no worse than `best` on its measured points; None where none is."""
    limit = validated_bits(best.expr, expr, sampling, seed) + BUDGET.tie_bits
    for family, candidate in repairs:
        mended = _measure(candidate, family, sampling.variables, search)
        if (
            mended is not None
            and broken(candidate) < left
            and not nan_where_not(candidate, best.expr, sampling, seed)
            and admissible(candidate, expr, sampling, seed)
            and validated_bits(candidate, expr, sampling, seed) <= limit
        ):
            return mended
    return None


def _poles_of(best: _Measured, m: _Measured) -> bool:
    """Whether `m` is `best` with its gamma family's poles taken out: its family, but for that step, is `best`'s."""
    steps = m.family.split(", ")
    return POLES in steps and [s for s in steps if s != POLES] == best.family.split(", ")


def _scaled_repair(
    best: _Measured,
    derived: _Measured,
    pool: list[_Measured],
    alternatives: tuple[tuple[str, sp.Expr], ...],
    sampling: Sampling,
    search: list[_Points],
    seed: int,
) -> _Measured:
    """`best`, unless it is still inf or nan at validation points where the exact value is a finite float
    (`inadmissible_points`): then its products scaled (`power_product`), or those of the next forms, or the
    `alternatives` of scaled products, that `_repaired` finds at fewer such points.  Nowhere else: a
    scaled product costs ~14 plain ones in eager torch, and a form the frameworks fuse (silu_backward) or that
    reads the forward's values is what an admissible form keeps."""
    expr = derived.expr
    if not inadmissible_points(best.expr, expr, sampling, seed):
        return best
    ranked = sorted((m for m in pool if m.expr != best.expr), key=lambda m: m.score)
    found = itertools.chain(
        (
            (f"{m.family}, products scaled", c)
            for m in [best, *ranked[: BUDGET.reassociated_starts]]
            for c in _finishing("products scaled", m.expr)
        ),
        _scaled(alternatives, expr, scaled=True),
    )
    # Each candidate once, by its form: the best form's scaled products may be a leader's too.
    candidates = dict(itertools.islice(((c, f) for f, c in found), BUDGET.reassociated_starts * 3))
    measured = (_measure(c, family, sampling.variables, search) for c, family in candidates.items())
    scaled = [m for m in measured if m is not None and not nan_where_not(m.expr, best.expr, sampling, seed)]
    return _repaired(best, derived, scaled, sampling, seed, lambda m: m.score, behind=BUDGET.margin_bits)


def _scaled(
    alternatives: Iterable[tuple[str, sp.Expr]], derived: sp.Expr, *, scaled: bool
) -> list[tuple[str, sp.Expr]]:
    """The (family, form) `alternatives` that compute products scaled (`power_product`) where `derived` computes
    none (`scaled`), or the others."""
    return [(f, c) for f, c in alternatives if (c.has(power_product) and not derived.has(power_product)) == scaled]


def _good_forms(best: _Measured, pool: list[_Measured]) -> tuple[sp.Expr, ...]:
    """The chosen form and those measured within `BUDGET.runner_up_bits` of it, without regimes."""
    # Forms without regimes: a derivative of a `where` of fed branches multiplies selections; a partial's own
    # search joins the branches' derivatives by regimes of its own.
    ranked = [best.expr] if not best.expr.has(sp.Piecewise) else []
    # Within 2 bits of the best form without a `where`: a chosen form with one (the logs of a product that
    # overflows) leaves the partials the same forms to try as a chosen form without.
    anchor = best
    if best.expr.has(sp.Piecewise):
        anchor = min((m for m in pool if not m.expr.has(sp.Piecewise)), key=lambda m: m.score, default=best)
    ranked += [m.expr for m in sorted(pool, key=lambda m: m.score) if m.score <= anchor.score + BUDGET.runner_up_bits]
    ranked += [m.expr for m in best.branches]
    return tuple(e for e in dict.fromkeys(ranked) if not e.has(sp.Piecewise))[: BUDGET.good_forms]


def _alone(
    derived: _Measured,
    reference: _Measured,
    policy: str,
    sampling: Sampling,
    seed: int,
    free: Free = NOTHING_FREE,
) -> tuple[Any, ...]:
    """`_search`'s answer where the derived form looks accurate: the policy weighs it against the written one
    alone."""
    pool = [derived, reference]
    chosen = pick(policy, derived, derived, pool, sampling, seed, reference=reference, free=free)
    shown = tuple((m.family, m.expr, m.means) for m in front(pool, derived, (chosen, reference), free.forms))
    return (derived.expr, chosen.expr, chosen.family, derived.means, chosen.means, (), shown)


def sampling_for(
    variables: Mapping[str, sp.Symbol], domains: Mapping[str, Domain], condition: sp.Expr | None
) -> Sampling:
    return Sampling(tuple((variables[name], domains[name]) for name in domains), condition)
