"""Saturation: a form that overflows on the way to a limit it has reached, its inputs clamped short of that."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import sympy as sp

from rulegen.derive.measure import (
    initial_precision,
    to_floats,
    value_at,
)
from rulegen.derive.stabilise.budget import BUDGET
from rulegen.derive.stabilise.points import (
    Sampling,
    _attempt,
    _measure,
    _Measured,
    _mpmath_function,
    _numpy_function,
    _Points,
)
from rulegen.spec.rules import Domain


def _non_finite_from(m: _Measured, index: int, points: Sequence[_Points]) -> float:
    """The least |v| (v the index-th input) at which the form is not finite where the exact value is; inf if none."""
    least = math.inf
    for bits, p in zip(m.bits, points, strict=True):
        width = float(np.dtype(p.dtype).itemsize * 8)
        broken = (bits >= width) & np.isfinite(p.exact)
        if broken.any():
            least = min(least, float(np.min(np.abs(p.columns[index][broken].astype(np.float64)))))
    return least


def _finite_mean(bits: np.ndarray, dtype: Any) -> float:
    """Mean bits of error, a point where the form is not finite counted as none."""
    return float(np.mean(np.where(bits >= np.dtype(dtype).itemsize * 8, 0.0, bits))) if bits.size else 0.0


def _clamped(expr: sp.Expr, v: sp.Symbol, domain: Domain, bound: float) -> sp.Expr:
    """`expr` of v held within [-bound, bound] (the sides of it the domain reaches)."""
    held: sp.Expr = v
    if domain.lo < -bound:
        held = sp.Max(held, sp.Float(-bound))
    if domain.hi > bound:
        held = sp.Min(held, sp.Float(bound))
    return expr.xreplace({v: held})


def _flat_beyond(
    expr: sp.Expr, v: sp.Symbol, index: int, bound: float, variables: Sequence[sp.Symbol], points: Sequence[_Points]
) -> bool:
    """Whether the exact derivative of `expr` in v rounds to 0 in every dtype at the sampled points beyond `bound`
    (`BUDGET.flat_points` of each dtype at most): there the frameworks' derivative of a clamped form is 0, at every
    order."""
    derivative = _attempt(lambda: sp.diff(expr, v))
    if derivative is None:
        return False
    reference = _mpmath_function(derivative, tuple(variables))
    checked = 0
    for p in points:
        magnitudes = np.abs(p.columns[index].astype(np.float64))
        beyond = np.flatnonzero(magnitudes > bound)
        beyond = beyond[np.argsort(magnitudes[beyond])]
        for j in dict.fromkeys([*beyond[: BUDGET.flat_points // 2], *beyond[-(BUDGET.flat_points // 2) :]]):
            # One evaluation wide enough to resolve a difference of terms near 1 down to float64's least subnormal
            # (exact_value's doubling would chase exp(-1e48) for ever).
            point = [float(c[j]) for c in p.columns]
            value = value_at(reference, point, initial_precision(point) + 1100)
            if value is None or to_floats(value) != (0.0, 0.0):
                return False
            checked += 1
    return checked > 0


def _in_range_held(
    expr: sp.Expr, v: sp.Symbol, index: int, bound: float, variables: Sequence[sp.Symbol], points: Sequence[_Points]
) -> bool:
    """Whether `expr` of v held at +-bound overflows nowhere, in whatever order a backend multiplies or adds: at the
    sampled points moved there, each product's factors beyond 1 multiply to a float of the dtype and each sum's terms
    add to one in magnitude (x**3 * sigmoid(-x**3) at 1e16 is 0 in float64 and inf * 0 in float32)."""
    nodes = [e for e in sp.preorder_traversal(expr) if isinstance(e, (sp.Mul, sp.Add))]
    parts = sp.Tuple(*(a for e in nodes for a in e.args))
    fn = _numpy_function(parts, tuple(variables))
    if fn is None:
        return False
    for p in points:
        held = p.columns[index].copy()
        beyond = np.abs(held.astype(np.float64)) > bound
        if not beyond.any():
            continue
        held[beyond] = np.sign(held[beyond]) * bound
        columns = [held[beyond] if k == index else c[beyond] for k, c in enumerate(p.columns)]
        try:
            with np.errstate(all="ignore"):
                values = [np.abs(np.asarray(a, dtype=np.float64)) for a in fn(*columns)]
        except Exception:
            return False
        limit = math.log2(float(np.finfo(p.dtype).max))
        k = 0
        for e in nodes:
            args = values[k : k + len(e.args)]
            k += len(e.args)
            if not all(np.isfinite(a).all() for a in args):
                return False
            with np.errstate(all="ignore"):
                if isinstance(e, sp.Mul):
                    reach = sum(np.log2(np.maximum(a, 1.0)) for a in args)
                else:
                    reach = np.log2(np.maximum(sum(args), 1.0))
            if (np.asarray(reach) >= limit).any():
                return False
    return True


def _saturated(pool: Sequence[_Measured], sampling: Sampling, points: Sequence[_Points]) -> list[_Measured]:
    """Forms not finite at some sampled magnitude, each input clamped short of it, where that measures better than
    the best form of `pool` and is exact: x**3 * sigmoid(-x**3) is inf * 0 past x = 1e102 (float64), on the
    way to the 0 it has reached by x = 30.  The measure says whether the value at the bound is the value beyond it;
    `_flat_beyond`, whether the derivative's is (0, which is what the frameworks' derivative of a clamp gives)."""
    variables = sampling.variables
    domains = dict(sampling.domains)
    least = min(m.score for m in pool)
    starts = {
        id(m): [_non_finite_from(m, index, points) for index in range(len(variables))]
        for m in pool
        if not m.expr.has(sp.Piecewise, sp.Min, sp.Max)
    }
    # Best first by what a clamp could make of them: their error where they are finite.
    broken = sorted(
        (m for m in pool if any(math.isfinite(start) for start in starts.get(id(m), ()))),
        key=lambda m: sum(_finite_mean(b, p.dtype) for b, p in zip(m.bits, points, strict=True)),
    )
    found: list[_Measured] = []
    for m in broken[: BUDGET.saturation_starts]:
        for index, v in enumerate(variables):
            for bound in (b for b in BUDGET.saturation_bounds if b < starts[id(m)][index]):
                candidate = _clamped(m.expr, v, domains[v], bound)
                measured = _measure(candidate, f"{m.family}, clamped at {bound:g}", variables, points)
                if measured is None or measured.score > least - BUDGET.margin_bits:
                    continue
                if _flat_beyond(m.expr, v, index, bound, variables, points) and _in_range_held(
                    m.expr, v, index, bound, variables, points
                ):
                    found.append(measured)
                    break
    return found
