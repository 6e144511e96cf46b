"""Regimes: two forms joined by a `Piecewise` on a variable's magnitude or sign, or on the ratio of two variables'
magnitudes, placed by measurement.

Every threshold printed into the generated code is a power of two: a
magnitude's threshold is rounded to the nearest one (to 2**-126 .. 2**126,
where float32 holds it and its half and double), a ratio's `k` in
|a| < k |b| is one of `_RATIOS`.  A split on one input's magnitude cannot
say |y| << |x|; for an expression homogeneous in a and b together, where only
their ratio decides which form is accurate, the ratio split can.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import sympy as sp

from rulegen.derive.functions import Piecewise, binade
from rulegen.derive.measure import inside, special_magnitudes
from rulegen.derive.stabilise.budget import BUDGET
from rulegen.derive.stabilise.points import (
    _DTYPES,
    Sampling,
    _attempt,
    _bits,
    _measure,
    _Measured,
    _numpy_function,
    _Points,
    _sample,
)
from rulegen.spec.rules import Domain

#: Where a regime's threshold may lie: it, half and twice it are constants of the generated code, which torch
#: refuses beside a float32 tensor beyond float32's range.
_THRESHOLDS = (2.0**-120, 2.0**120)
#: The k of a ratio split |a| < k |b|: powers of two.
_RATIOS = tuple(2.0**e for e in range(-12, 13, 4))


def _power_of_two(t: float) -> float:
    """`t` rounded to the nearest power of two (geometrically), within `_THRESHOLDS`."""
    if not 0 < t < math.inf:
        return _THRESHOLDS[0]
    # The exponent clamped before it is raised: between two magnitudes of the top binade it rounds to 2**1024.
    low, high = (round(math.log2(b)) for b in _THRESHOLDS)
    return 2.0 ** min(max(round(math.log2(t)), low), high)


@dataclass(frozen=True)
class _Split:
    """Take `inner` where |v| is below (or above) `threshold`, else `outer`; with `signed`, where v itself is below
    (or above) 0: a difference like -b + sqrt(b**2 - 4ac) cancels for one sign of b only."""

    v: sp.Symbol
    index: int
    below: bool
    threshold: float
    signed: bool = False
    #: A ratio split: |v| below (or above) `threshold` |over|, `over` the variable at `over_index`.
    over: sp.Symbol | None = None
    over_index: int = -1

    def taken(self, v: Any, w: Any = None) -> Any:
        """Where `inner` is taken, of numpy arrays or sympy symbols (`w`: the `over` variable's)."""
        if self.signed:
            return v < 0 if self.below else v > 0
        numeric = isinstance(v, np.ndarray)
        magnitude = np.abs(v) if numeric else sp.Abs(v)
        bound: Any = self.threshold
        if self.over is not None:
            bound = self.threshold * np.abs(w) if numeric else sp.Float(self.threshold, 3) * sp.Abs(w)
        return magnitude < bound if self.below else magnitude > bound

    def condition(self) -> Any:
        return self.taken(self.v, self.over)


def _regions(split: _Split, points: Sequence[_Points]) -> list[np.ndarray]:
    with np.errstate(over="ignore"):  # k |b| past the largest float is inf, above every |a|
        return _masks(split, points)


def _masks(split: _Split, points: Sequence[_Points]) -> list[np.ndarray]:
    return [
        split.taken(
            p.columns[split.index].astype(np.float64),
            p.columns[split.over_index].astype(np.float64) if split.over is not None else None,
        )
        for p in points
    ]


def _split_scores(
    splits: Sequence[_Split], outer: _Measured, inner: _Measured, points: Sequence[_Points]
) -> np.ndarray:
    """Each split's sum of the dtypes' mean bits, `inner` where it is taken, `outer` elsewhere: the splits' masks
    (`_regions`) as the rows of one array per dtype, those on a magnitude compared all at once, and each row's mean
    as numpy takes a row's."""
    others = [k for k, s in enumerate(splits) if s.signed or s.over is not None]
    by_index: dict[int, list[int]] = {}
    for k, s in enumerate(splits):
        if not (s.signed or s.over is not None):
            by_index.setdefault(s.index, []).append(k)
    bounds = {index: np.array([splits[k].threshold for k in ks])[:, None] for index, ks in by_index.items()}
    below = {index: np.array([splits[k].below for k in ks])[:, None] for index, ks in by_index.items()}
    total = np.zeros(len(splits))
    for p, i, o in zip(points, inner.bits, outer.bits, strict=True):
        if not p.columns[0].size:
            continue
        rows = np.empty((len(splits), p.columns[0].size), dtype=bool)
        for k in others:
            (rows[k],) = _regions(splits[k], [p])
        for index, ks in by_index.items():
            magnitude = np.abs(p.columns[index].astype(np.float64))
            rows[ks] = np.where(below[index], magnitude < bounds[index], magnitude > bounds[index])
        total += np.where(rows, i, o).mean(axis=1)
    return total


def _splits(
    variables: Sequence[sp.Symbol], points: Sequence[_Points], ratios: Sequence[tuple[int, int]] = ()
) -> list[_Split]:
    """The splits `_best_split` scores, in its order: on each variable's sign where it takes both, and its magnitude
    midway (geometrically, a power of two) between two sampled magnitudes, each way; on the ratio of each pair in
    `ratios` at each of `_RATIOS`."""
    splits: list[_Split] = []
    for index, v in enumerate(variables):
        candidates = sorted({float(abs(x)) for p in points for x in p.columns[index] if x != 0})
        thresholds = [
            t
            for lo, hi in itertools.pairwise(candidates)
            if lo <= (t := _power_of_two(math.sqrt(lo) * math.sqrt(hi))) <= hi
        ]
        both_signs = any((p.columns[index] < 0).any() for p in points) and any(
            (p.columns[index] > 0).any() for p in points
        )
        for below in (True, False):
            if both_signs:
                splits.append(_Split(v, index, below, 0.0, signed=True))
            splits += [_Split(v, index, below, t) for t in thresholds]
    for index, over_index in ratios:
        for ratio in _RATIOS:
            for below in (True, False):
                splits.append(
                    _Split(variables[index], index, below, ratio, over=variables[over_index], over_index=over_index)
                )
    return splits


def _best_split(
    outer: _Measured,
    inner: _Measured,
    variables: Sequence[sp.Symbol],
    points: Sequence[_Points],
    ratios: Sequence[tuple[int, int]] = (),
) -> tuple[float, _Split] | None:
    """The split on one variable's magnitude (or sign), or on the ratio of a pair in `ratios`, that most lowers the
    sum of the dtypes' mean bits (`_splits`, `_split_scores`); the first of those that lower it most."""
    splits = _splits(variables, points, ratios)
    if not splits:
        return None
    scores = _split_scores(splits, outer, inner, points)
    # As a scan that keeps the first and takes a later split only where it is strictly lower: a nan is never lower,
    # and a nan first stands.
    best = 0 if np.isnan(scores[0]) else int(np.nanargmin(scores))
    return float(scores[best]), splits[best]


def _ratio_pairs(expr: sp.Expr, sampling: Sampling) -> list[tuple[int, int]]:
    """(i, j) for each two variables the expression is homogeneous in together (scaled alike): where their ratio,
    not either magnitude, decides between two forms."""
    from rulegen.derive.stabilise.scaling import _homogeneities

    pairs: set[tuple[int, int]] = set()
    for found in _homogeneities(expr, sampling):
        scaled = [i for i, w in enumerate(found.weights) if w == 1]
        pairs |= {(i, j) for i in scaled for j in scaled if i != j}
    return sorted(pairs)


def _refined(split: _Split, inner: sp.Expr, outer: sp.Expr, sampling: Sampling, points: Sequence[_Points]) -> _Split:
    """The split's threshold placed by fresh points between the two sampled magnitudes it fell between.

    The first threshold is only known to lie in a gap between sampled
    points, which can span many binades: here `BUDGET.refine_points` more are drawn
    inside that gap (over its bit patterns, of either sign the domain
    allows) and the threshold moves to where they put it.
    """
    if split.signed or split.over is not None:
        return split
    magnitudes = sorted({float(abs(x)) for p in points for x in p.columns[split.index] if x != 0})
    lower = max((m for m in magnitudes if m < split.threshold), default=0.0)
    upper = min((m for m in magnitudes if m > split.threshold), default=split.threshold)
    if not lower < upper:
        return split
    domain = dict(sampling.domains)[split.v]
    gap = Domain(ge=lower, le=upper)
    mirrored = Domain(ge=-upper, le=-lower)
    sides = [d for d in (gap, mirrored) if d.lo >= domain.lo and d.hi <= domain.hi]
    if not sides:
        return split
    rng = np.random.default_rng([len(magnitudes), split.index])
    refined = []
    for side in sides:
        narrowed = Sampling(tuple((v, side if v == split.v else d) for v, d in sampling.domains), sampling.condition)
        for dtype in _DTYPES:
            try:
                refined.append(_sample(outer, narrowed, BUDGET.refine_points, int(rng.integers(1 << 30)), dtype))
            except ValueError:
                continue
    variables = sampling.variables
    measured = [(_bits(inner, variables, p), _bits(outer, variables, p)) for p in refined]
    inner_bits = [i for i, _ in measured if i is not None]
    outer_bits = [o for _, o in measured if o is not None]
    if not refined or len(inner_bits) < len(refined) or len(outer_bits) < len(refined):
        return split
    best = (math.inf, split.threshold)
    for candidate in sorted({float(abs(x)) for p in refined for x in p.columns[split.index]} | {split.threshold}):
        trial = _Split(split.v, split.index, split.below, candidate)
        score = sum(
            float(np.sum(np.where(m, i, o)))
            for m, i, o in zip(_regions(trial, refined), inner_bits, outer_bits, strict=True)
        )
        best = min(best, (score, candidate))
    return _Split(split.v, split.index, split.below, _power_of_two(best[1]))


def _safe_point(domain: Domain, magnitude: float) -> sp.Float:
    """A point of `domain` at `magnitude`, positive where the domain allows it."""
    return sp.Float(magnitude if domain.lo <= magnitude <= domain.hi else -magnitude, 3)


def _finite_where_untaken(
    branch: sp.Expr,
    split: _Split,
    taken: Sequence[np.ndarray],
    variables: Sequence[sp.Symbol],
    points: Sequence[_Points],
) -> bool:
    """Whether `branch`, its derivative in the split's variables and every intermediate value it computes are
    finite at every sampled point not its own.

    The intermediate values too: reverse mode multiplies each one's local derivative by the zero cotangent the
    `where` gives the branch, and 1/(sqrt(x - 1) sqrt(x + 1)) at x = inf is 0 with a derivative sympy finds finite,
    where autodiff's is 0 * inf = nan (sqrt(inf) in the product's partial).
    """
    derivatives = [_attempt(functools.partial(sp.diff, branch, v)) for v in (split.v, split.over) if v is not None]
    intermediate = sorted(
        {n for n in sp.preorder_traversal(branch) if isinstance(n, sp.Expr) and n.free_symbols and not n.is_Atom},
        key=sp.default_sort_key,
    )
    for expr in (branch, *derivatives, *intermediate):
        if expr is None:
            return False
        fn = _numpy_function(expr, tuple(variables))
        if fn is None:
            return False
        for mask, p in zip(taken, points, strict=True):
            try:
                with np.errstate(all="ignore"):
                    values = np.broadcast_to(np.asarray(fn(*p.columns), dtype=p.dtype), p.exact.shape)
            except Exception:
                return False
            if not np.isfinite(values[~mask]).all():
                return False
    return True


def _joined(
    inner: sp.Expr,
    outer: sp.Expr,
    split: _Split,
    domain: Domain,
    variables: Sequence[sp.Symbol],
    points: Sequence[_Points],
) -> sp.Expr | None:
    """where(|v| below/above t, inner, outer).

    A branch that is inf or nan (or has such a derivative) at sampled points
    where it is not taken is fed a point of its own region there instead
    (the double-`where`): `where` passes no value of it on, but a derivative
    of the whole multiplies its derivative by 0, and 0 * inf is nan.
    """
    taken = split.condition()
    if split.over is not None:
        return _joined_on_ratio(inner, outer, split, variables, points)
    if split.signed:
        inside, outside = (sp.Float(-1.0 if split.below else 1.0, 3), sp.Float(1.0 if split.below else -1.0, 3))
    else:
        inside, outside = (
            _safe_point(domain, split.threshold / 2 if split.below else split.threshold * 2),
            _safe_point(domain, split.threshold * 2 if split.below else split.threshold / 2),
        )
    points = [_with_special_values(p, split.index, domain) for p in points]
    masks = _regions(split, points)
    if not _finite_where_untaken(inner, split, masks, variables, points):
        inner = _fed(inner, split.v, _stand_in(split.v, taken, inside, where_taken=False))
    if not _finite_where_untaken(outer, split, [~m for m in masks], variables, points):
        outer = _fed(outer, split.v, _stand_in(split.v, taken, outside, where_taken=True))
    return sp.Piecewise((inner, taken), (outer, True))


def _with_special_values(points: _Points, index: int, domain: Domain) -> _Points:
    """`points` after rows with the split variable at each special float of its dtype inside `domain`, either sign
    and infinities included (the others as in the first rows), for `_finite_where_untaken`: the sampled points are
    finite floats, and a branch's derivative is nan at inf as well."""
    magnitudes = (*special_magnitudes(points.dtype), math.inf)
    values = np.asarray([s * m for m in magnitudes for s in (1.0, -1.0)], dtype=points.dtype)
    values = values[inside(domain, values)]
    if not len(values) or not len(points):
        return points
    rows = np.arange(len(values)) % len(points)
    columns = tuple(np.concatenate([c, values if k == index else c[rows]]) for k, c in enumerate(points.columns))
    return dataclasses.replace(points, columns=columns, exact=np.concatenate([points.exact, points.exact[rows]]))


def _joined_on_ratio(
    inner: sp.Expr, outer: sp.Expr, split: _Split, variables: Sequence[sp.Symbol], points: Sequence[_Points]
) -> sp.Expr | None:
    """where(|a| below/above k |b|, inner, outer), or None where a branch is not finite where it is not taken (no
    one point of a ratio's region is fed to it)."""
    masks = _regions(split, points)
    if not _finite_where_untaken(inner, split, masks, variables, points):
        return None
    if not _finite_where_untaken(outer, split, [~m for m in masks], variables, points):
        return None
    return sp.Piecewise((inner, split.condition()), (outer, True))


def _stand_in(v: sp.Symbol, taken: sp.Expr, value: sp.Expr, *, where_taken: bool) -> sp.Expr:
    """`v`, but `value` where `taken` is (or is not): a Piecewise that keeps a negative power outside it, as sympy's
    would not once anything evaluates it: 1/where(|q| > 2, 1, q) as where(|q| > 2, 1, 1/q) computes 1/q, inf at a
    subnormal float32 q, in the branch taken (a Bernoulli KL's partial in q, -p/q, is -1.1e12 there)."""
    return Piecewise((value, taken), (v, True)) if where_taken else Piecewise((v, taken), (value, True))


def _fed(branch: sp.Expr, v: sp.Symbol, safe: sp.Piecewise) -> sp.Expr:
    """`branch` of `safe` for `v`, unevaluated: sympy would copy the selection into every power of v."""
    with sp.evaluate(False):
        return branch.xreplace({v: safe})


def _has_regimes(expr: sp.Expr) -> bool:
    """Whether `expr` has regimes or a clamp of its own: a scaling's binade of the largest input is neither."""
    return expr.replace(lambda e: isinstance(e, binade), lambda _: sp.S.One).has(sp.Piecewise, sp.Min, sp.Max)


def _with_regimes(
    best: _Measured, pool: Sequence[_Measured], sampling: Sampling, points: Sequence[_Points]
) -> _Measured:
    variables = sampling.variables
    domains = dict(sampling.domains)
    current = best
    ratios = _attempt(lambda: sp.Tuple(*(sp.Tuple(*pair) for pair in _ratio_pairs(best.expr, sampling))))
    pairs = [(int(i), int(j)) for i, j in ratios] if ratios is not None else []
    for _ in range(BUDGET.regime_splits):
        if _has_regimes(current.expr):
            break  # a form with regimes (or a clamp) of its own is not split again
        options = []
        for inner in pool:
            if inner.expr == current.expr or _has_regimes(inner.expr):
                continue
            found = _best_split(current, inner, variables, points, pairs)
            if found is not None:
                options.append((found[0], found[1], inner))
        if not options:
            break
        score, split, inner = min(options, key=lambda o: o[0])
        if score > current.score - BUDGET.regime_margin_bits:
            break
        split = _refined(split, inner.expr, current.expr, sampling, points)
        joined = _joined(inner.expr, current.expr, split, domains[split.v], variables, points)
        if joined is None:
            break
        measured = _measure(joined, f"regimes ({current.family} | {inner.family})", variables, points)
        if measured is None or measured.score > current.score - BUDGET.regime_margin_bits:
            break
        current = dataclasses.replace(measured, branches=(*current.branches, current, inner))
    return current
