"""Regimes: two forms joined by a `Piecewise` on a variable's magnitude or sign, placed by measurement."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import sympy as sp

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
_THRESHOLDS = (1e-36, 1e36)


@dataclass(frozen=True)
class _Split:
    """Take `inner` where |v| is below (or above) `threshold`, else `outer`; with `signed`, where v itself is below
    (or above) 0: a difference like -b + sqrt(b**2 - 4ac) cancels for one sign of b only."""

    v: sp.Symbol
    index: int
    below: bool
    threshold: float
    signed: bool = False

    def taken(self, v: Any) -> Any:
        """Where `inner` is taken, of a numpy array or a sympy symbol."""
        if self.signed:
            return v < 0 if self.below else v > 0
        magnitude = np.abs(v) if isinstance(v, np.ndarray) else sp.Abs(v)
        return magnitude < self.threshold if self.below else magnitude > self.threshold


def _regions(split: _Split, points: Sequence[_Points]) -> list[np.ndarray]:
    return [split.taken(p.columns[split.index].astype(np.float64)) for p in points]


def _split_score(split: _Split, outer: _Measured, inner: _Measured, points: Sequence[_Points]) -> float:
    return sum(
        float(np.mean(np.where(m, i, o))) if m.size else 0.0
        for m, i, o in zip(_regions(split, points), inner.bits, outer.bits, strict=True)
    )


def _best_split(
    outer: _Measured, inner: _Measured, variables: Sequence[sp.Symbol], points: Sequence[_Points]
) -> tuple[float, _Split] | None:
    """The split on one variable's magnitude that most lowers the sum of the dtypes' mean bits."""
    best: tuple[float, _Split] | None = None
    for index, v in enumerate(variables):
        candidates = sorted({float(abs(x)) for p in points for x in p.columns[index] if x != 0})
        for below in (True, False):
            if any((p.columns[index] < 0).any() for p in points) and any((p.columns[index] > 0).any() for p in points):
                signed = _Split(v, index, below, 0.0, signed=True)
                score = _split_score(signed, outer, inner, points)
                if best is None or score < best[0]:
                    best = (score, signed)
            for k in range(len(candidates) - 1):
                # Midway (geometrically) between two sampled magnitudes, to two significant digits.
                threshold = float(f"{math.sqrt(candidates[k] * candidates[k + 1]):.2g}")
                if not candidates[k] < threshold < candidates[k + 1]:
                    threshold = candidates[k + 1] if below else candidates[k]
                if not _THRESHOLDS[0] <= threshold <= _THRESHOLDS[1]:
                    continue
                split = _Split(v, index, below, threshold)
                score = _split_score(split, outer, inner, points)
                if best is None or score < best[0]:
                    best = (score, split)
    return best


def _refined(split: _Split, inner: sp.Expr, outer: sp.Expr, sampling: Sampling, points: Sequence[_Points]) -> _Split:
    """The split's threshold placed by fresh points between the two sampled magnitudes it fell between.

    The first threshold is only known to lie in a gap between sampled
    points, which can span many binades: here `BUDGET.refine_points` more are drawn
    inside that gap (over its bit patterns, of either sign the domain
    allows) and the threshold moves to where they put it.
    """
    if split.signed:
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
    threshold = min(max(float(f"{best[1]:.2g}"), _THRESHOLDS[0]), _THRESHOLDS[1])
    return _Split(split.v, split.index, split.below, threshold)


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
    """Whether `branch` and its derivative in the split's variable are finite at every sampled point not its own."""
    for expr in (branch, _attempt(lambda: sp.diff(branch, split.v))):
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
) -> sp.Expr:
    """where(|v| below/above t, inner, outer).

    A branch that is inf or nan (or has such a derivative) at sampled points
    where it is not taken is fed a point of its own region there instead
    (the double-`where`): `where` passes no value of it on, but a derivative
    of the whole multiplies its derivative by 0, and 0 * inf is nan.
    """
    taken = split.taken(split.v)
    if split.signed:
        inside, outside = (sp.Float(-1.0 if split.below else 1.0, 3), sp.Float(1.0 if split.below else -1.0, 3))
    else:
        inside, outside = (
            _safe_point(domain, split.threshold / 2 if split.below else split.threshold * 2),
            _safe_point(domain, split.threshold * 2 if split.below else split.threshold / 2),
        )
    masks = _regions(split, points)
    if not _finite_where_untaken(inner, split, masks, variables, points):
        inner = _fed(inner, split.v, sp.Piecewise((split.v, taken), (inside, True)))
    if not _finite_where_untaken(outer, split, [~m for m in masks], variables, points):
        outer = _fed(outer, split.v, sp.Piecewise((outside, taken), (split.v, True)))
    return sp.Piecewise((inner, taken), (outer, True))


def _fed(branch: sp.Expr, v: sp.Symbol, safe: sp.Piecewise) -> sp.Expr:
    """`branch` of `safe` for `v`, unevaluated: sympy would copy the selection into every power of v."""
    with sp.evaluate(False):
        return branch.xreplace({v: safe})


def _with_regimes(
    best: _Measured, pool: Sequence[_Measured], sampling: Sampling, points: Sequence[_Points]
) -> _Measured:
    variables = sampling.variables
    domains = dict(sampling.domains)
    current = best
    for _ in range(BUDGET.regime_splits):
        if current.expr.has(sp.Piecewise, sp.Min, sp.Max):
            break  # a form with regimes (or a clamp) of its own is not split again
        options = []
        for inner in pool:
            if inner.expr == current.expr or inner.expr.has(sp.Piecewise, sp.Min, sp.Max):
                continue
            found = _best_split(current, inner, variables, points)
            if found is not None:
                options.append((found[0], found[1], inner))
        if not options:
            break
        score, split, inner = min(options, key=lambda o: o[0])
        if score > current.score - BUDGET.regime_margin_bits:
            break
        split = _refined(split, inner.expr, current.expr, sampling, points)
        joined = _joined(inner.expr, current.expr, split, domains[split.v], variables, points)
        measured = _measure(joined, f"regimes ({current.family} | {inner.family})", variables, points)
        if measured is None or measured.score > current.score - BUDGET.regime_margin_bits:
            break
        current = dataclasses.replace(measured, branches=(*current.branches, current, inner))
    return current
