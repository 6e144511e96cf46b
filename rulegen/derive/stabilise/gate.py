"""The acceptance gate: a form the search chose replaces the derived one only where points it never saw prove it.

The search decides on `BUDGET.search_points` points per dtype, where a regime's threshold or a rescaling can
look right and be nan one binade away (atan2's derivative split on |y| < 3.9e-14 was nan at x = 1e-200,
y = 1e-20).  Each chosen form is validated on a second sample, drawn with a seed of its own over the same float
line, with each input's special floats (0, the smallest subnormal and normal, the largest float, either sign),
for two inputs or more, pairs of mixed magnitudes (|a| << |b|, |b| << |a|, a ~ b), and rows where an
exponential's argument or an integer power's base is near where it leaves the range (`range_edges`):

- at every validation point (`BUDGET.validation_points` drawn, the special ones on top) the form is finite
  wherever the derived form is finite and the exact value is a finite float of the dtype: numpy says where the
  forms are finite, mpmath is asked only where the candidate is not;
- on `BUDGET.validation_measured` of them (mpmath at each, the costly part) its mean bits of error are no worse
  than the derived form's, to within `BUDGET.tie_bits`, in either dtype;
- it breaks no point of ordinary size the derived form gets right, and elsewhere degrades no more than it mends
  and leaves more than half the bits right: where the two are more than 2**broken_bits units in the last place
  apart (numpy says where; mpmath decides at `BUDGET.disagreement_points` of them), the form is not more than
  `BUDGET.broken_bits` worse wherever the derived form is within `BUDGET.accurate_bits`, at a point whose inputs
  are all 0 or between 2**-7 and 2**11; at the others such points are counted against those where the derived
  form is that much worse.  A mean over the float
  line is dominated by huge and tiny inputs; the rows where an input is an ordinary number (a label of 1, a
  count of 2) come first, because a form better on average can cancel exactly there:
  y*softplus(-z) + (1 - y)*softplus(z) as y*(softplus(-z) - softplus(z)) + softplus(z) loses every bit at
  y = 1, z = 100.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import sympy as sp
from sympy.codegen.cfunctions import log1p

from rulegen.computation.quotients import divided_by_a_square, power_of_a_quotient, quotient_power
from rulegen.computation.sharing import shared_subexpressions, summed_in_order
from rulegen.derive.expr import lambdified
from rulegen.derive.functions import betaln, divided, log_ndtr, logaddexp, power_product, softplus
from rulegen.derive.measure import bits_of_error, edge_pairs, inside, sample_floats, special_points
from rulegen.derive.stabilise.budget import BUDGET
from rulegen.derive.stabilise.flushed import read_as_zero
from rulegen.derive.stabilise.points import (
    _DTYPES,
    Sampling,
    _attempt,
    _bits,
    _evaluated,
    _exact,
    _mpmath_function,
    _Points,
    _sample,
)
from rulegen.spec.rules import Domain

#: Added to a search's seed for the gate's points: a form is proven on points it was not chosen on.
_VALIDATION_SEED = 0x5EED
#: The ordinary numbers of `BUDGET.ordinary_rows`, either sign, and the binades the other inputs are drawn from
#: there (a logit of 17, a scale of 0.1): where code people run spends its time, which the float line's bit
#: patterns, mostly huge or tiny, rarely sample.
_ORDINARY = (1.0, 2.0, 0.5)
_ORDINARY_BINADES = (-6, 10)


def _ordinary_rows(sampling: Sampling, rng: np.random.Generator, dtype: Any) -> list[np.ndarray]:
    """Rows where one variable is an ordinary number inside its domain and the others are of ordinary size."""
    domains = [d for _, d in sampling.domains]
    rows: list[np.ndarray] = [np.empty(0, dtype) for _ in domains]
    for index, domain in enumerate(domains):
        values = np.asarray([s * v for v in _ORDINARY for s in (1.0, -1.0)], dtype=dtype)
        for value in values[inside(domain, values)]:
            count = BUDGET.ordinary_rows
            size = 2.0 ** rng.uniform(*_ORDINARY_BINADES, size=(len(domains), count))
            drawn = (size * rng.choice([-1.0, 1.0], size=size.shape)).astype(dtype)
            for k, d in enumerate(domains):  # a narrow domain (a static held at its value) is drawn from itself
                outside = ~inside(d, drawn[k])
                with np.errstate(over="ignore"):
                    drawn[k][outside] = sample_floats(d, int(outside.sum()), rng, dtype)
            drawn[index] = value
            rows = [np.concatenate([r, c]) for r, c in zip(rows, drawn, strict=True)]
    return rows


def _validation_columns(sampling: Sampling, seed: int, dtype: Any) -> tuple[np.ndarray, ...]:
    """The ordinary rows, then BUDGET.validation_points drawn points of `dtype`, each variable's special floats and
    the mixed magnitudes, inside the sampling's joint condition."""
    rng = np.random.default_rng([seed + _VALIDATION_SEED, np.dtype(dtype).itemsize])
    with np.errstate(over="ignore"):  # a bound beyond float32's range is its largest float
        drawn = [sample_floats(domain, BUDGET.validation_points, rng, dtype) for _, domain in sampling.domains]
    ordinary = _ordinary_rows(sampling, rng, dtype)
    columns = special_points(drawn, [d for _, d in sampling.domains], dtype, rng, BUDGET.mixed_points)
    columns = [np.concatenate([o, c]) for o, c in zip(ordinary, columns, strict=True)]
    return tuple(meeting_the_condition(sampling, columns))


def meeting_the_condition(sampling: Sampling, columns: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The rows of `columns` (one per variable of `sampling`) where the sampling's joint condition holds: all of
    them where it has none."""
    if sampling.condition is None or not len(columns[0]):
        return list(columns)
    condition = lambdified(sampling.variables, sampling.condition, modules="numpy")
    with np.errstate(all="ignore"):
        keep = np.broadcast_to(np.asarray(condition(*columns)) > 0.5, np.shape(columns[0]))
    return [np.asarray(c)[keep] for c in columns]


@functools.lru_cache(maxsize=64)
def _validation(expr: sp.Expr, sampling: Sampling, seed: int) -> tuple[tuple[_Points, tuple[np.ndarray, ...]], ...]:
    """Per dtype: the measured points with `expr`'s exact values, and every validation point's columns, those near
    where its parts leave the range included."""
    return tuple(
        (_sample(expr, sampling, BUDGET.validation_measured, seed + _VALIDATION_SEED, dtype), columns)
        for dtype, columns in _columns_near_range_edges(expr, sampling, seed)
    )


def _exact_at(
    derived: sp.Expr, variables: Sequence[sp.Symbol], columns: Sequence[np.ndarray], dtype: Any, points: np.ndarray
) -> Iterator[tuple[int, float | None]]:
    """Each of `points` with `derived`'s exact value there rounded to `dtype` (None where no real number)."""
    reference = _mpmath_function(derived, tuple(variables))
    which = 0 if np.dtype(dtype) == np.float64 else 1
    for j in points:
        value = _exact(reference, [float(c[j]) for c in columns])
        yield int(j), None if value is None else value[which]


def _finite_where_exact(
    ours: np.ndarray,
    theirs: np.ndarray,
    derived: sp.Expr,
    variables: Sequence[sp.Symbol],
    columns: Sequence[np.ndarray],
    dtype: Any,
) -> bool:
    """Whether the candidate (`ours`) is finite at every point where `derived` (`theirs`) is and the exact value
    is a finite float."""
    suspect = np.flatnonzero(np.isfinite(theirs) & ~np.isfinite(ours))
    return not any(
        exact is not None and math.isfinite(exact)
        for _, exact in _exact_at(derived, variables, columns, dtype, suspect)
    )


def _breaks_accurate_points(
    ours: np.ndarray,
    theirs: np.ndarray,
    derived: sp.Expr,
    variables: Sequence[sp.Symbol],
    columns: Sequence[np.ndarray],
    dtype: Any,
) -> bool:
    """Whether the candidate (`ours`) is `BUDGET.broken_bits` worse than `derived` (`theirs`) at a point where
    `derived` is within `BUDGET.accurate_bits` of the exact value (the columns' first rows, the ordinary ones,
    decided first).  As numpy computes only: as XLA does, a product of a form's factors passes through a subnormal
    or not by the order the printer writes them in (2*(w/(s*erfcx(w))) at a result of 1.7e-38 in float32;
    (p/r)*(q/r) of a Gamma KL's partial at p = 1e-300), not by the form, and the mean bits weigh it."""
    # Two forms within 2**broken_bits units in the last place of each other cannot be broken_bits apart in error
    # where one is right: only where they are further apart is the exact value needed.
    apart = 2.0 ** (BUDGET.broken_bits - np.finfo(dtype).nmant)
    with np.errstate(all="ignore"):
        differ = np.isfinite(theirs) & ~(np.abs(ours - theirs) <= apart * np.abs(theirs))
    suspect = np.flatnonzero(differ)[: BUDGET.disagreement_points]
    ordinary = _of_ordinary_size(columns)
    broken = mended = 0
    for j, value in _exact_at(derived, variables, columns, dtype, suspect):
        # A subnormal exact value has fewer bits to lose, and XLA flushes it anyway: no point to break there.  Nor
        # an exact 0, a root where every form that cancels is all bits wrong but for the one that rounds to 0
        # there by luck (at x = s, -1/s + 2 x**2/(s**3 (1 + x**2/s**2)) is 0, 1/s - 2s/hypot(x, s)**2 is 2e-16).
        if value is None or not np.finfo(dtype).tiny <= abs(value) < math.inf:
            continue
        exact = np.asarray([value])
        before = bits_of_error(theirs[j : j + 1], exact, dtype)[0]
        after = bits_of_error(ours[j : j + 1], exact, dtype)[0]
        if before <= BUDGET.accurate_bits and after > before + BUDGET.broken_bits:
            # At a point of ordinary size, or where it leaves fewer than half the bits right, a break refuses.
            if ordinary[j] or after > np.finfo(dtype).nmant / 2:
                return True
            broken += 1
        elif after <= BUDGET.accurate_bits and before > after + BUDGET.broken_bits:
            mended += 1
    # Where an input is huge or tiny, a point degraded (more than half its bits still right) is weighed against
    # the points mended: a Gamma KL's partial in p_rate with its products reordered loses 9 bits where p_c/p_rate
    # is subnormal (p_c = 3e-259, p_rate = 1.2e53) and mends every point where p_c*q_rate overflows.  Partial
    # fractions that cancel to 0 where the value is 1e-30 are refused, whatever they mend.
    return broken > mended


def _of_ordinary_size(columns: Sequence[np.ndarray]) -> np.ndarray:
    """Per point, whether every input is 0 or of a size code runs at: the ordinary rows' binades, one either side."""
    low, high = (2.0 ** (_ORDINARY_BINADES[0] - 1), 2.0 ** (_ORDINARY_BINADES[1] + 1))
    with np.errstate(all="ignore"):
        sizes = [(c == 0) | ((np.abs(c) >= low) & (np.abs(c) <= high)) for c in columns]
    return np.logical_and.reduce(sizes, axis=0) if sizes else np.zeros(0, bool)


# The gate, the repairs and the policies ask again for the forms they compare (the derived form at each candidate
# the gate weighs): cse is the cost.
@functools.lru_cache(maxsize=1024)
def as_computed(expr: sp.Expr) -> sp.Expr:
    """`expr` as generated code computes it: the planner's common subexpressions (`shared_subexpressions`), a
    power of a quotient taken whole and a quotient by the square of a name divided twice (as the printers write
    them: `power_of_a_quotient`, `divided_by_a_square`), put back
    without sympy evaluating the result again.  cse takes ((-2s)/h)/h apart as -2s*t**-2, t = h, which the
    printers compute as (-2s/t)/t and numpy would as -2s/t**2, whose square overflows where the divisions do not;
    and cse's own rebuilding (-sqrt(1/x)/(2x) as -(1/x)**(3/2)/2) is the generated code's too.  Each sum is
    added in the order the planners print it (`summed_in_order`, which both call)."""
    try:
        replacements, (reduced,) = shared_subexpressions(
            [summed_in_order(expr)], sp.numbered_symbols("_computed", cls=sp.Dummy)
        )
    except Exception:  # cse cannot take every expression apart; the planner's own cse then keeps it whole
        return expr
    # Each value names only the ones before it: put back in that order, each value is walked once (put back into
    # the whole form one at a time, a Beta KL's series took 26 s a form).
    values = [(symbol, _squares_divided(value)) for symbol, value in replacements]
    reduced = _squares_divided(reduced)
    put_back: dict[sp.Symbol, sp.Expr] = {}
    with sp.evaluate(False):
        for symbol, value in values:
            put_back[symbol] = value.xreplace(put_back)
        return reduced.xreplace(put_back)


def _squares_divided(expr: sp.Expr) -> sp.Expr:
    def twice(product: sp.Mul) -> sp.Expr:
        powered = power_of_a_quotient(product)
        if powered is not None:
            rest, u, v, k, e = powered
            return quotient_power(_squares_divided(rest), u, v, k, e, divided)
        found = divided_by_a_square(product)
        if found is None:
            return product
        rest, base = found
        return divided(divided(rest, base), base)

    return expr.replace(lambda e: isinstance(e, sp.Mul), twice)


def decided_again(
    ours: np.ndarray, theirs: np.ndarray, plain: tuple[np.ndarray, np.ndarray], columns: Sequence[np.ndarray]
) -> np.ndarray:
    """The candidate's flushed values (`ours`) where flushing changed either form's value (`plain`: both as numpy
    computes them), the derived form's flushed ones (`theirs`) elsewhere and where an input is subnormal: a point
    both forms compute alike either way was decided by the first pass (asking mpmath there again is the gate's
    cost), and one XLA reads as 0 is judged by no form (`read_as_zero`), as the `accuracy` check does not."""

    def same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return (a == b) | (np.isnan(a) & np.isnan(b))

    decided = same(ours, plain[0]) & same(theirs, plain[1]) | read_as_zero(columns, ours.dtype)
    return np.where(decided, theirs, ours)


def both_ways(
    values: Callable[[sp.Expr, bool], np.ndarray | None],
    candidate: sp.Expr,
    reference: sp.Expr,
    columns: Sequence[np.ndarray],
) -> Iterator[tuple[bool, np.ndarray | None, np.ndarray]]:
    """(flushed, the candidate's values, the reference's) for each way of computing where the reference has values
    (`values(expr, flushed)`): numpy's and torch's, then XLA's, which flushes subnormals, its candidate values
    `decided_again` against the first pass's; the candidate's None, and no pass after, where it has none."""
    plain: tuple[np.ndarray, np.ndarray] | None = None
    for flushed in (False, True):
        theirs = values(reference, flushed)
        if theirs is None:
            continue
        ours = values(candidate, flushed)
        if ours is not None and plain is not None:
            ours = decided_again(ours, theirs, plain, columns)
        yield flushed, ours, theirs
        if ours is None:
            return
        plain = ours, theirs


def admissible(candidate: sp.Expr, derived: sp.Expr, sampling: Sampling, seed: int = 0) -> bool:
    """Whether `candidate` may replace `derived`: on the validation sample (disjoint from the search's, special
    floats and mixed magnitudes included) it is finite wherever the exact value is a finite float of the dtype
    and `derived` is finite, both as the generated code computes them (`as_computed`), and no worse in mean bits
    (to within BUDGET.tie_bits) in either dtype.

    The invariant every chosen form keeps; the search decides on a few points, where a regime's threshold or a
    rescaling can look right and be nan one binade away (atan2's derivative split on |y| < 3.9e-14).
    """
    variables = sampling.variables
    candidate = as_computed(candidate)
    # Both forms as the generated code computes them: sympy writes (p/q)**2 as p**2/q**2, whose squares under-
    # and overflow where the printers' quotient does not, and the derived form measured so was finite where the
    # code shipped is inf.  The exact values are the derived form's, as written.
    computed = as_computed(derived)
    # A form of scaled products takes an infinite input into each term it scales, where a plain form of the same
    # terms would too, but the derived one shares it (the other families keep their terms as derived).
    if candidate.has(power_product) and _nan_at_an_infinite_input(candidate, derived, sampling, seed):
        return False
    for measured, columns in _validation(derived, sampling, seed):
        # Both forms at every validation point, once per way of computing: each test below reads them, the broken
        # points numpy's alone.
        def values(expr: sp.Expr, flushed: bool, columns: Sequence[np.ndarray] = columns, dtype: Any = measured.dtype):
            return _evaluated(expr, variables, columns, dtype, flushed=flushed)

        for flushed, ours, theirs in both_ways(values, candidate, computed, columns) if len(columns[0]) else ():
            if ours is None or not _finite_where_exact(ours, theirs, derived, variables, columns, measured.dtype):
                return False
            if not flushed and _breaks_accurate_points(ours, theirs, derived, variables, columns, measured.dtype):
                return False
        if not len(measured):
            continue
        after = _measured_bits(candidate, variables, measured)
        if after is None:
            return False
        before = _measured_bits(computed, variables, measured)
        if before is not None and after > before + BUDGET.tie_bits:
            return False
    return True


def _nan_at_an_infinite_input(candidate: sp.Expr, derived: sp.Expr, sampling: Sampling, seed: int) -> bool:
    """Whether `candidate` (as computed) is nan at an ordinary row with one input infinite, where the derived form
    with the factors its terms share taken out (`factor_terms`, as autodiff's chain rule takes them) is not nan,
    there and at the largest float of that sign (a limit, not pow's value at -inf: (-inf)**1.5 is inf).  No exact
    value decides there, and a sum of terms each scaled by the infinite input is inf - inf where the product by
    it is inf (sin_exp_mul's partial in x at y = inf: -inf, as autodiff computes it)."""
    variables = sampling.variables
    factored = as_computed(_attempt(lambda: sp.factor_terms(derived)) or derived)
    rows = [c[: BUDGET.ordinary_rows] for c in _columns(sampling, seed)[0][1]]
    largest = float(np.finfo(np.float64).max)
    for index, (_, domain) in enumerate(sampling.domains):
        for infinity in (math.inf, -math.inf):
            if not inside(domain, np.asarray([infinity]))[0]:
                continue
            at = [
                [np.full_like(c, end) if k == index else c for k, c in enumerate(rows)]
                for end in (infinity, math.copysign(largest, infinity))
            ]
            ours = _evaluated(candidate, variables, at[0], np.float64)
            theirs = [_evaluated(factored, variables, columns, np.float64) for columns in at]
            if ours is None or any(t is None for t in theirs):
                continue
            if (np.isnan(ours) & ~np.isnan(theirs[0]) & ~np.isnan(theirs[1])).any():
                return True
    return False


def nan_where_not(candidate: sp.Expr, form: sp.Expr, sampling: Sampling, seed: int = 0) -> bool:
    """Whether `candidate` is nan at a validation point (either dtype, as the generated code computes both) where
    `form` is not, whatever the exact value: where it is inf, the gate asks nothing, and a sum of scaled products
    each inf of its own sign is inf - inf where the form it repairs sums first (a Gumbel's partial in its scale,
    nan for inf at (x, loc, scale) = (-0.7, 2.1e275, 3.4e-91): 3.3 bits on average where it was 0.1)."""
    variables = sampling.variables
    for dtype, columns in _columns(sampling, seed):
        ours = _evaluated(as_computed(candidate), variables, columns, dtype)
        theirs = _evaluated(as_computed(form), variables, columns, dtype)
        if ours is None or theirs is None or (np.isnan(ours) & ~np.isnan(theirs)).any():
            return True
    return False


@functools.lru_cache(maxsize=64)
def _columns(sampling: Sampling, seed: int) -> tuple[tuple[Any, tuple[np.ndarray, ...]], ...]:
    """(dtype, the validation columns) per dtype: the gate's points without its measured ones (no mpmath)."""
    return tuple((dtype, _validation_columns(sampling, seed, dtype)) for dtype in _DTYPES)


@functools.lru_cache(maxsize=64)
def _columns_near_range_edges(
    derived: sp.Expr, sampling: Sampling, seed: int
) -> tuple[tuple[Any, tuple[np.ndarray, ...]], ...]:
    """`_columns`, and the rows where a part of `derived` is near where it leaves the range (`range_edges`)."""
    if not any(True for _ in _range_targets(derived, np.float64)) and not _weighted_terms(derived):
        return _columns(sampling, seed)
    found = []
    for dtype, columns in _columns(sampling, seed):
        edges = meeting_the_condition(sampling, range_edges(derived, sampling, columns, dtype))
        found.append((dtype, tuple(np.concatenate([c, e]) for c, e in zip(columns, edges, strict=True))))
    return tuple(found)


def range_edges(expr: sp.Expr, sampling: Sampling, columns: Sequence[np.ndarray], dtype: Any) -> list[np.ndarray]:
    """Rows where a part of `expr` is a few steps from where it leaves the float range: the argument of an
    exponential a few units from where it overflows or underflows, the base of an integer power (a square, a
    cube's reciprocal) a few binades from where the power does.  The first `BUDGET.range_edge_rows` rows of
    `columns`, with one input the argument or base is linear in moved there, every row inside every domain.

    A product of such a part and a small factor is in range where the part is not: a Gumbel's partial in x,
    expm1((loc - x)/s)/s, is 4e36 at (loc - x)/s = 90, s = 300 in float32, where expm1(90) overflows; a normal
    KL's partial in q_scale, 1/s - (p**2 + (m - n)**2)/s**3, is -2e38 at m - n = 2.3e20, s = 6.3, where
    (m - n)**2 overflows.  Drawn over the bit patterns, such a band is almost never hit."""
    variables = sampling.variables
    domains = [d for _, d in sampling.domains]
    rows = min(BUDGET.range_edge_rows, len(columns[0]) if columns else 0)
    made: list[list[np.ndarray]] = [[] for _ in variables]
    target_symbol = sp.Dummy("target")
    base = [np.asarray(c[:rows], np.float64) for c in columns]
    for u, targets in _range_targets(expr, dtype):
        for k, v in enumerate(variables):
            slope = sp.diff(u, v)
            if v not in u.free_symbols or v in slope.free_symbols:
                continue
            at = lambdified((*variables, target_symbol), v + (target_symbol - u) / slope, modules="numpy")
            for target in targets:
                with np.errstate(all="ignore"):
                    value = np.broadcast_to(np.asarray(at(*base, target), np.float64), (rows,)).astype(dtype)
                for j, column in enumerate(columns):
                    made[j].append(value if j == k else column[:rows])
    # A term of a sum, a weight times a log or a digamma, a little past the largest float: the sum is in range where
    # the other terms bring it back, and no power or exponential marks the row (a Beta KL's (p1 - q1) digamma(p1)
    # and (q1 + q0 - p1 - p0) digamma(p1 + p0), each past float32's range at q1 = 5.9e36, where the KL is 3.2e38).
    for j, moved in enumerate(_terms_past_the_range(_weighted_terms(expr), variables, base, dtype)):
        made[j] += moved
    return _rows_inside(made, domains, dtype)


def _rows_inside(made: Sequence[Sequence[np.ndarray]], domains: Sequence[Domain], dtype: Any) -> list[np.ndarray]:
    """The rows `made` (per variable, its columns' pieces), joined, where every input is finite and inside its
    domain."""
    if not made or not made[0]:
        return [np.empty(0, dtype) for _ in made]
    found = [np.concatenate(m) for m in made]
    keep = np.logical_and.reduce([inside(d, c) & np.isfinite(c) for d, c in zip(domains, found, strict=True)])
    return [c[keep] for c in found]


def _terms_past_the_range(
    terms: Sequence[sp.Expr], variables: Sequence[sp.Symbol], base: Sequence[np.ndarray], dtype: Any
) -> list[list[np.ndarray]]:
    """Per variable, the columns of the rows `base` (float64) with each of `terms` moved a little past `dtype`'s
    largest float (`_SUM_STEPS` binades, either sign) by one variable it is linear in at that row, the others as
    they are.  The line is read off the term's float64 values at v, 2v and 3v (a row where they do not lie on one is
    left out): a term's symbolic derivative costs more than the search whose form it probes (a Beta KL's series,
    each term a `where` of sums, took a minute).  The move is computed as v - u/slope + (largest/slope) 2**b: the
    target itself is past float64's range."""
    made: list[list[np.ndarray]] = [[] for _ in variables]
    largest = float(np.finfo(dtype).max)
    kept = [column.astype(dtype) for column in base]
    for u in terms:
        for k, v in enumerate(variables):
            if v not in u.free_symbols:
                continue
            u1, u2, u3 = (
                _evaluated(u, variables, [c * factor if j == k else c for j, c in enumerate(base)], np.float64)
                for factor in (1.0, 2.0, 3.0)
            )
            if u1 is None or u2 is None or u3 is None:
                continue
            with np.errstate(all="ignore"):
                slope = (u2 - u1) / base[k]
                linear = np.isfinite(slope) & (slope != 0) & np.isclose(u3 - u2, u2 - u1, rtol=1e-9, atol=0.0)
            if not linear.any():
                continue
            for target in (largest, -largest):
                for b in _SUM_STEPS:
                    with np.errstate(all="ignore"):
                        value = (base[k] - u1 / slope + (target / slope) * 2.0**b)[linear].astype(dtype)
                    for j, column in enumerate(kept):
                        made[j].append(value if j == k else column[linear])
    return made


#: How far past (or, the first, short of) where it leaves the range a part of the form is moved: units of an
#: exponential's argument, binades of a power's base.
_EDGE_STEPS = (-2.0, 1.0, 4.0, 16.0)


#: Binades past the largest float a term of a sum is moved to (`_terms_past_the_range`): the sum is in range only where
#: the other terms cancel a part of it, a part these span.
_SUM_STEPS = (0.05, 0.25, 1.0)
#: The functions a weight multiplies in a term of a sum that make such a term: logs and the gamma family's (a digamma
#: is at most a few hundred at any float), whose product with a weight near the largest float passes the range.
_SLOW = frozenset(
    {sp.log, sp.loggamma, sp.polygamma, sp.digamma, log1p, sp.atan, sp.asinh, softplus, logaddexp, log_ndtr, betaln}
)


def _range_targets(expr: sp.Expr, dtype: Any) -> Iterator[tuple[sp.Expr, tuple[float, ...]]]:
    """(u, the values u is moved to) for each exponential exp(u) and each integer power u**k (|k| >= 2) of `expr`."""
    info = np.finfo(dtype)
    edge = math.log(float(info.max))
    for power in sorted(expr.atoms(sp.exp), key=sp.default_sort_key):
        yield power.args[0], tuple(sign * (edge + step) for sign in (1.0, -1.0) for step in _EDGE_STEPS)
    top, bottom = math.log2(float(info.max)), math.log2(float(info.tiny))
    # u**2 and u**-2 leave the range at the same u (one at the top, one at the bottom): one set of rows for both.
    powers = {
        (p.base, abs(int(p.exp)))
        for p in expr.atoms(sp.Pow)
        if p.exp.is_Integer and abs(p.exp) >= 2 and p.base.free_symbols
    }
    for base, k in sorted(powers, key=lambda bk: (sp.default_sort_key(bk[0]), bk[1])):
        binades = [top / k + step for step in _EDGE_STEPS] + [bottom / k - step for step in _EDGE_STEPS]
        yield base, tuple(sign * 2.0**b for sign in (1.0, -1.0) for b in binades)


def _weighted_terms(expr: sp.Expr) -> list[sp.Expr]:
    """The terms of `expr`'s sums that weigh a function of slow growth (`_SLOW`): a log, a digamma."""
    found = {
        term
        for total in expr.atoms(sp.Add)
        for term in total.args
        if term.is_Mul and any(isinstance(f, sp.Function) and f.func in _SLOW for f in term.args)
    }
    return sorted(found, key=sp.default_sort_key)


def _not_finite(
    expr: sp.Expr, variables: Sequence[sp.Symbol], columns: Sequence[np.ndarray], dtype: Any, *, nan: bool = False
) -> np.ndarray:
    """Per point, whether `expr` as the generated code computes it is inf or nan (with `nan`, nan), numpy's way or
    XLA's (a point with a subnormal input not judged XLA's way); everywhere where numpy cannot evaluate it."""
    computed = as_computed(expr)
    plain = _evaluated(computed, variables, columns, dtype)
    xla = _evaluated(computed, variables, columns, dtype, flushed=True)
    if plain is None or xla is None:
        return np.ones(np.shape(columns[0]), bool)
    broken = np.isnan if nan else lambda values: ~np.isfinite(values)
    return broken(plain) | (broken(xla) & ~read_as_zero(columns, dtype))


@functools.lru_cache(maxsize=64)
def _edge_columns(sampling: Sampling, seed: int) -> tuple[tuple[Any, tuple[np.ndarray, ...]], ...]:
    """(dtype, columns) per dtype: each pair of inputs in the top binade with opposite signs (`measure.edge_pairs`),
    the other inputs as in the validation sample's first rows (ordinary ones), inside the joint condition.  Apart
    from the gate's own points: a form inf there where the derived one is not (a partial over one denominator, whose
    x - scale overflows at x = -1e308, scale = 1e308) is no worse than the search's other forms, all of which are
    inf somewhere there, and refusing it kept a form that cancels (0.1 -> 8 bits)."""
    found = []
    domains = [d for _, d in sampling.domains]
    for dtype, columns in _columns(sampling, seed):
        edges = meeting_the_condition(sampling, edge_pairs(columns, domains, dtype, BUDGET.edge_points))
        found.append((dtype, tuple(edges)))
    return tuple(found)


def _columns_of(
    derived: sp.Expr, sampling: Sampling, seed: int, edges: bool
) -> tuple[tuple[Any, tuple[np.ndarray, ...]], ...]:
    return _edge_columns(sampling, seed) if edges else _columns_near_range_edges(derived, sampling, seed)


@functools.lru_cache(maxsize=64)
def _inadmissible_rows(derived: sp.Expr, sampling: Sampling, seed: int, edges: bool = False) -> tuple[np.ndarray, ...]:
    """Per dtype, the validation points (with `edges`, the overflow edge's pairs instead, `_edge_columns`) where
    `derived` is inf or nan (`_not_finite`) and its exact value is a finite float of the dtype (of the first
    `BUDGET.repair_points` suspects: mpmath is the cost)."""
    return tuple(
        _broken_rows(derived, derived, sampling.variables, columns, dtype)
        for dtype, columns in _columns_of(derived, sampling, seed, edges)
    )


def _broken_rows(
    form: sp.Expr, derived: sp.Expr, variables: Sequence[sp.Symbol], columns: Sequence[np.ndarray], dtype: Any
) -> np.ndarray:
    """The rows of `columns` where `form` is inf or nan (`_not_finite`) and `derived`'s exact value is a finite
    float of the dtype (of the first `BUDGET.repair_points` suspects: mpmath is the cost)."""
    suspect = np.flatnonzero(_not_finite(form, variables, columns, dtype))
    # Most such points are where the exact value is past the float range too: where a wider float can say, only
    # those where it says the value is in range are asked.
    in_range = _in_range_wider(derived, variables, columns, dtype, suspect)
    suspect = (suspect if in_range is None else suspect[in_range])[: BUDGET.repair_points]
    exact = _exact_at(derived, variables, columns, dtype, suspect)
    return np.asarray([j for j, value in exact if value is not None and math.isfinite(value)], int)


def _in_range_wider(
    expr: sp.Expr, variables: Sequence[sp.Symbol], columns: Sequence[np.ndarray], dtype: Any, points: np.ndarray
) -> np.ndarray | None:
    """At `points`, whether `expr` computed in a wider float (float64 for float32, numpy's long double for
    float64, where its functions take one) is finite and within `dtype`'s range; None where no wider float can."""
    wider = np.float64 if np.dtype(dtype) == np.float32 else np.longdouble
    if np.finfo(wider).max <= np.finfo(dtype).max:
        return None  # a long double no wider than float64
    values = _evaluated(expr, variables, [c[points].astype(wider) for c in columns], wider)
    if values is None:
        return None
    with np.errstate(all="ignore"):
        return np.isfinite(values) & (np.abs(values) <= np.finfo(dtype).max)


def inadmissible_points(
    form: sp.Expr, derived: sp.Expr, sampling: Sampling, seed: int = 0, *, edges: bool = False
) -> int:
    """How many validation points (either dtype) where `derived` is inf or nan and the exact value is a finite
    float `form` is inf or nan at too, both as the generated code computes them.  A form finite where `derived`
    is not and not finite where it is (the gate's invariant) is right at more points by this count.

    A derived form can be inf at points the search's few never draw (a logistic log-density's -u - 2 softplus(-u)
    is inf - inf where 2|u| overflows, float32's top binade of u), and measure there as accurate as any form:
    this count is what a form must lower to replace it.  With `edges`, counted at the overflow edge's pairs
    (`_edge_columns`) instead."""
    broken = _inadmissible_rows(derived, sampling, seed, edges)
    points = [
        (dtype, [c[rows] for c in columns])
        for rows, (dtype, columns) in zip(broken, _columns_of(derived, sampling, seed, edges), strict=True)
    ]
    return not_finite_at(form, sampling.variables, points)


def a_term_passes_the_range(
    sums: Sequence[sp.Add], derived: sp.Expr, sampling: Sampling, seed: int = 0, *, edges: bool = False
) -> bool:
    """Whether at a validation point where `derived` is inf or nan and the exact value is a finite float (with
    `edges`, at the overflow edge's pairs), a term of one of `sums` is inf and none is nan: where computing the sum
    scaled (`families._sum_scaled`) mends it.  A term that is nan (inf * 0, x*y*exp(-x**2) at x = y = 1e308) is its
    product's order, which the generated code's own may not share and no scaling of the sum mends."""
    variables = sampling.variables
    broken = _inadmissible_rows(derived, sampling, seed, edges)
    for rows, (dtype, columns) in zip(broken, _columns_of(derived, sampling, seed, edges), strict=True):
        if not len(rows):
            continue
        at = [c[rows] for c in columns]
        for total in sums:
            terms = [_evaluated(t, variables, at, dtype) for t in total.args]
            if any(t is None for t in terms):
                continue
            values = np.stack([np.broadcast_to(t, np.shape(rows)) for t in terms])
            if (np.isinf(values).any(axis=0) & ~np.isnan(values).any(axis=0)).any():
                return True
    return False


@functools.lru_cache(maxsize=64)
def past_the_range(
    form: sp.Expr, sums: tuple[sp.Add, ...], derived: sp.Expr, sampling: Sampling, seed: int = 0
) -> tuple[tuple[Any, tuple[np.ndarray, ...]], ...]:
    """(dtype, columns) per dtype: the points where a term of one of `sums` (`form`'s own) is a little past the
    largest float (`_terms_past_the_range`, from the validation sample's first rows), `form` is inf or nan and the
    exact value is a finite float (of the first `BUDGET.repair_points` suspects).

    The validation rows near the range's edge are made from the derived form's terms; a chosen form's terms are
    its own, and pass the range elsewhere: a Beta KL's series, each group of arguments, weighs log(p0 + p1) -
    digamma(p1 + 1) by q1, 3.4e38 at q1 = 5.9e36, p0 = 1.7e26, p1 = 11 in float32, where the KL is 3.2e38 and no row
    of the derived form's lies.  From the first `BUDGET.own_sum_rows` rows."""
    variables = sampling.variables
    domains = [d for _, d in sampling.domains]
    terms = sorted({term for total in sums for term in total.args}, key=sp.default_sort_key)
    found = []
    for dtype, columns in _columns(sampling, seed):
        rows = min(BUDGET.own_sum_rows, len(columns[0]) if columns else 0)
        made = _terms_past_the_range(terms, variables, [np.asarray(c[:rows], np.float64) for c in columns], dtype)
        moved = meeting_the_condition(sampling, _rows_inside(made, domains, dtype))
        broken = _broken_rows(form, derived, variables, moved, dtype)
        found.append((dtype, tuple(c[broken] for c in moved)))
    return tuple(found)


def not_finite_at(
    form: sp.Expr,
    variables: Sequence[sp.Symbol],
    points: Sequence[tuple[Any, Sequence[np.ndarray]]],
    *,
    nan: bool = False,
) -> int:
    """At how many of `points` ((dtype, columns) per dtype) `form` is inf or nan (with `nan`, nan) as the generated
    code computes it."""
    return sum(
        int(_not_finite(form, variables, columns, dtype, nan=nan).sum()) for dtype, columns in points if len(columns[0])
    )


@functools.lru_cache(maxsize=64)
def nan_where_infinite(
    form: sp.Expr, derived: sp.Expr, sampling: Sampling, seed: int = 0
) -> tuple[tuple[Any, tuple[np.ndarray, ...]], ...]:
    """(dtype, columns) per dtype: the validation points where `form` is nan as the generated code computes it and
    the exact value is past the dtype's range, whose correctly rounded value is an infinity (of the first
    `BUDGET.repair_points` suspects: mpmath is the cost).  No promise of the gate's (the exact value is no finite
    float), but every bit wrong where the value is inf: expm1(x)/x's derivative, exp(x)/x - expm1(x)/x**2, is
    inf - inf from x = 723, where it is inf (the lead-term repair's targets, `search._mended_where_infinite`)."""
    variables = sampling.variables
    found = []
    for dtype, columns in _columns_near_range_edges(derived, sampling, seed):
        suspect = _distinct(columns, np.flatnonzero(_not_finite(form, variables, columns, dtype, nan=True)))
        exact = _exact_at(derived, variables, columns, dtype, suspect[: BUDGET.repair_points])
        rows = np.asarray([j for j, value in exact if value is not None and math.isinf(value)], int)
        found.append((dtype, tuple(c[rows] for c in columns)))
    return tuple(found)


def _distinct(columns: Sequence[np.ndarray], rows: np.ndarray) -> np.ndarray:
    """`rows` less each whose inputs repeat an earlier one's: the ordinary rows hold each ordinary number many times,
    and x = -1, a pole of 1/(x + 1)'s derivative, took every one of mpmath's turns where it is nan."""
    if len(rows) < 2:
        return rows
    _, first = np.unique(np.stack([np.asarray(c)[rows] for c in columns]), axis=1, return_index=True)
    return rows[np.sort(first)]


def _measured_bits(expr: sp.Expr, variables: Sequence[sp.Symbol], measured: _Points) -> float | None:
    """`expr`'s mean bits of error at the gate's measured points of one dtype, each point's the worse of numpy's
    and XLA's (`_bits`); None where numpy cannot evaluate it."""
    bits = _bits(expr, variables, measured)
    return None if bits is None else float(bits.mean()) if bits.size else 0.0


def validated_bits(candidate: sp.Expr, derived: sp.Expr, sampling: Sampling, seed: int = 0) -> float:
    """`candidate`'s mean bits of error on the gate's measured points, summed over the dtypes (inf where it cannot
    be evaluated): how admissible forms that the search's few points rank alike are told apart."""
    variables = sampling.variables
    candidate = as_computed(candidate)
    total = 0.0
    for measured, _ in _validation(derived, sampling, seed):
        if not len(measured):
            continue
        bits = _measured_bits(candidate, variables, measured)
        if bits is None:
            return math.inf
        total += bits
    return total
