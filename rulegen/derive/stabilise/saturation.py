"""Saturation: a form that overflows on the way to a limit it has reached, its inputs clamped short of that, or the
argument of a function it calls (a reduced argument like (x - loc) / scale) where that decides the limit."""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Sequence
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
    _evaluated,
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
    for point in _points_beyond(points, index, bound):
        # One evaluation wide enough to resolve a difference of terms near 1 down to float64's least subnormal
        # (exact_value's doubling would chase exp(-1e48) for ever).
        value = value_at(reference, point, initial_precision(point) + 1100)
        if value is None or to_floats(value) != (0.0, 0.0):
            return False
        checked += 1
    return checked > 0


def _points_beyond(points: Sequence[_Points], index: int, bound: float) -> Iterator[list[float]]:
    """The sampled points where input `index` is beyond `bound` in magnitude, the nearest and the farthest of each
    dtype's (`BUDGET.flat_points` of each at most)."""
    for p in points:
        magnitudes = np.abs(p.columns[index].astype(np.float64))
        beyond = np.flatnonzero(magnitudes > bound)
        beyond = beyond[np.argsort(magnitudes[beyond])]
        for j in dict.fromkeys([*beyond[: BUDGET.flat_points // 2], *beyond[-(BUDGET.flat_points // 2) :]]):
            yield [float(c[j]) for c in p.columns]


def _in_range_held(
    expr: sp.Expr, v: sp.Symbol, index: int, bound: float, variables: Sequence[sp.Symbol], points: Sequence[_Points]
) -> bool:
    """Whether `expr` of v held at +-bound overflows nowhere, in whatever order a backend multiplies or adds: at the
    sampled points moved there, each product's factors beyond 1 multiply to a float of the dtype and each sum's terms
    add to one in magnitude (x**3 * sigmoid(-x**3) at 1e16 is 0 in float64 and inf * 0 in float32).  A product's
    divisor (its factors of negative power, which the code divides by) may overflow, where what it divides is
    finite, and none of its factors is 0: 2 w / (sqrt(pi) scale erfcx(w)) at w = -100 is 0 at the least subnormal
    scale, where 1 / scale is inf."""
    nodes = [e for e in sp.preorder_traversal(expr) if isinstance(e, (sp.Mul, sp.Add))]
    parts = sp.Tuple(*(a for e in nodes for a in _divided(e)))
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
            count = len(_divided(e))
            found, k = values[k : k + count], k + count
            args = [a for f, a in zip(e.args, found, strict=False) if not _is_divisor(f)]
            divisors = found[len(e.args) :]
            if not all(np.isfinite(a).all() for a in args):
                return False
            if any(((d == 0) | np.isnan(d)).any() for d in divisors):
                return False
            with np.errstate(all="ignore"):
                if isinstance(e, sp.Mul):
                    reach = sum((np.log2(np.maximum(a, 1.0)) for a in args), np.zeros(1))
                else:
                    reach = np.log2(np.maximum(sum(args), 1.0))
            if (np.asarray(reach) >= limit).any():
                return False
    return True


def _is_divisor(factor: sp.Expr) -> bool:
    return bool(factor.is_Pow and factor.exp.is_negative)


def _divided(node: sp.Expr) -> list[sp.Expr]:
    """A sum's terms; a product's factors, then the divisor's factors (the bases of those of negative power)."""
    if not isinstance(node, sp.Mul):
        return list(node.args)
    return [*node.args, *(f.base ** (-f.exp) for f in node.args if _is_divisor(f))]


def _saturated(
    pool: Sequence[_Measured],
    sampling: Sampling,
    points: Sequence[_Points],
    free: frozenset[sp.Expr] | None = None,
) -> list[_Measured]:
    """Forms not finite at some sampled magnitude, each input clamped short of it, where that measures better than
    the best form of `pool` and is exact: x**3 * sigmoid(-x**3) is inf * 0 past x = 1e102 (float64), on the
    way to the 0 it has reached by x = 30.  The measure says whether the value at the bound is the value beyond it;
    `_flat_beyond`, whether the derivative's is (0, which is what the frameworks' derivative of a clamp gives).
    Where `free` is given (what the forward computes, `cost.reused`: the `fast` policy's searches), besides, each
    form with v clamped in some factors of a product only (`_factor_saturated`), from the same forms and from
    those that read what the forward computes, which such a clamp keeps.  Such a form is finite where the exact
    value is, but its derivative (a second derivative, where the form is a partial) differentiates what the
    forward computes at an input not clamped, which may overflow where a clamp of the whole input is 0 at every
    order: `fast` alone trades that for the read."""
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
        (m for m in pool if id(m) in starts and _breaks(m, points)),
        key=lambda m: sum(_finite_mean(b, p.dtype) for b, p in zip(m.bits, points, strict=True)),
    )
    found: list[_Measured] = []
    # An argument clamped in the best forms, broken on these points or not: a form whose argument overflows (a
    # ratio of two inputs) is nan on few points of the whole line, which the gate's may hold.
    plain = sorted((m for m in pool if not m.expr.has(sp.Piecewise, sp.Min, sp.Max)), key=lambda m: m.score)
    for m in [m for m in plain if _reduced_arguments(m.expr)][: BUDGET.saturation_starts]:
        found += _argument_saturated(m, variables, points, least)
    first = broken[: BUDGET.saturation_starts]
    if free is not None:
        reading = [m for m in broken[BUDGET.saturation_starts :] if _reads(m.expr, free)][: BUDGET.saturation_starts]
        for m in [*reading, *first]:
            for index, v in enumerate(variables):
                found += _factor_saturated(m, v, index, domains[v], starts[id(m)][index], variables, points, least)
    for m in first:
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


def _reads(expr: sp.Expr, free: frozenset[sp.Expr]) -> bool:
    """Whether `expr` holds a subexpression of `free`."""
    return any(node in free for node in sp.preorder_traversal(expr))


def _factor_saturated(
    m: _Measured,
    v: sp.Symbol,
    index: int,
    domain: Domain,
    start: float,
    variables: Sequence[sp.Symbol],
    points: Sequence[_Points],
    least: float,
) -> list[_Measured]:
    """`m` with v clamped in some factors of one product only: the factor that is not finite where `m` is not and
    the exact value is, alone, or with every factor of the product that calls no function (those that grow
    without bound, whose partial products may overflow before a factor that has reached 0 multiplies them).
    The rest of the form keeps v, and with it what the forward computes of v.  The derivative of x sigmoid(u),
    u = k (x + c x**3), x (1 - s) (1 + 3c x**2) k s + s, is 0 * inf = nan past x**2's overflow on the way to the
    0 its product has reached, and x (1 + 3c x**2) overflows before s = 0 multiplies it: with x clamped in x
    and (1 + 3c x**2) alone, its s is the forward's.  Kept where it measures better than the best form of the
    pool (`least`) and, at the sampled points beyond the bound, its value and its derivative in v (the
    frameworks' derivative of a clamped factor: the factor a constant there) round as the exact ones do in
    every dtype."""
    broken = [
        (bits >= np.dtype(p.dtype).itemsize * 8) & np.isfinite(p.exact) for bits, p in zip(m.bits, points, strict=True)
    ]
    found: list[_Measured] = []
    for product, held in _overflowing_factors(m.expr, v, variables, points, broken):
        for bound in (b for b in BUDGET.saturation_bounds if b < start):
            clamped = sp.Mul(*(_clamped(f, v, domain, bound) if f in held else f for f in product.args))
            candidate = m.expr.xreplace({product: clamped})
            measured = _measure(candidate, f"{m.family}, factors clamped at {bound:g}", variables, points)
            if measured is None or measured.score > least - BUDGET.margin_bits:
                continue
            if _factors_held_beyond(m.expr, product, held, v, index, bound, variables, points):
                found.append(measured)
                break
    return found


def _overflowing_factors(
    expr: sp.Expr,
    v: sp.Symbol,
    variables: Sequence[sp.Symbol],
    points: Sequence[_Points],
    broken: Sequence[np.ndarray],
) -> list[tuple[sp.Mul, frozenset[sp.Expr]]]:
    """(product, factors) for each factor of `expr`'s products that holds v and is not finite at a `broken`
    point: that factor alone, and with the product's other factors in v that call no function.  None that
    holds every v of `expr` (clamping it is clamping the input)."""
    found: list[tuple[sp.Mul, frozenset[sp.Expr]]] = []
    for product in dict.fromkeys(e for e in sp.preorder_traversal(expr) if isinstance(e, sp.Mul)):
        algebraic = frozenset(f for f in product.args if v in f.free_symbols and not f.has(sp.Function))
        for factor in product.args:
            if v not in factor.free_symbols or not _not_finite_at(factor, variables, points, broken):
                continue
            for held in (frozenset({factor}), algebraic | {factor}):
                rest = expr.xreplace({product: sp.Mul(*(sp.Dummy() if f in held else f for f in product.args))})
                if v in rest.free_symbols and (product, held) not in found:
                    found.append((product, held))
            if len(found) >= BUDGET.saturation_starts:
                return found[: BUDGET.saturation_starts]
    return found


def _not_finite_at(
    factor: sp.Expr, variables: Sequence[sp.Symbol], points: Sequence[_Points], broken: Sequence[np.ndarray]
) -> bool:
    """Whether `factor` is inf or nan (numpy, in the points' dtype) at some `broken` point."""
    for p, where in zip(points, broken, strict=True):
        if where.any():
            values = _evaluated(factor, variables, [c[where] for c in p.columns], p.dtype)
            if values is not None and not np.isfinite(values).all():
                return True
    return False


def _factors_held_beyond(
    expr: sp.Expr,
    product: sp.Mul,
    held: frozenset[sp.Expr],
    v: sp.Symbol,
    index: int,
    bound: float,
    variables: Sequence[sp.Symbol],
    points: Sequence[_Points],
) -> bool:
    """Whether `expr` with v held at +-bound in the `held` factors of `product` alone rounds as `expr` does,
    value and derivative in v, at the sampled points beyond the bound (`BUDGET.flat_points` of each dtype at
    most), in every dtype."""
    exact = _attempt(functools.partial(sp.diff, expr, v))
    if exact is None:
        return False
    reference = [_mpmath_function(e, tuple(variables)) for e in (expr, exact)]
    sides = {}
    for sign in (-1.0, 1.0):
        at = sp.Float(sign * bound)
        kept = expr.xreplace({product: sp.Mul(*(f.xreplace({v: at}) if f in held else f for f in product.args))})
        derivative = _attempt(functools.partial(sp.diff, kept, v))
        if derivative is None:
            return False
        sides[sign] = [_mpmath_function(e, tuple(variables)) for e in (kept, derivative)]
    checked = 0
    for point in _points_beyond(points, index, bound):
        precision = initial_precision(point) + 1100
        for there_fn, here_fn in zip(reference, sides[math.copysign(1.0, point[index])], strict=True):
            there, here = value_at(there_fn, point, precision), value_at(here_fn, point, precision)
            if there is None or here is None or to_floats(there) != to_floats(here):
                return False
        checked += 1
    return checked > 0


def _breaks(m: _Measured, points: Sequence[_Points]) -> bool:
    """Whether `m` is not finite at a sampled point where the exact value is."""
    return math.isfinite(_non_finite_from(m, 0, points))


def _beyond(p: _Points, sign: float, bound: float) -> _Points:
    """The sampled points with the first variable moved beyond +-bound (`sign`), the others as sampled: twice the
    bound, the square root of the dtype's largest float and the largest.  The search's points need not reach
    there (they keep where the exact value is not 0, and a partial past w = -39 is), nor sample every input's
    magnitude there."""
    top = float(np.finfo(p.dtype).max)
    magnitudes = [m for m in (2 * bound, math.sqrt(top), top) if m > bound]
    rows = np.arange(min(len(p), BUDGET.flat_points))
    first = np.repeat(np.asarray(magnitudes) * sign, len(rows))
    rest = tuple(np.tile(c[rows], len(magnitudes)) for c in p.columns[1:])
    return _Points(p.dtype, (first, *rest), np.zeros(len(first)))


def _reduced_arguments(expr: sp.Expr) -> list[sp.Expr]:
    """The arguments of `expr`'s function calls that are rational functions of two inputs or more:
    erfcx(sqrt(2) (loc - x) / (2 scale))'s."""
    found = {
        a
        for f in expr.atoms(sp.Function)
        for a in f.args
        if not a.is_Atom
        and len(a.free_symbols) >= 2
        and not a.has(sp.Function, sp.Piecewise)
        and a.is_rational_function()
    }
    return sorted(found, key=sp.default_sort_key)


def _solutions(equation: sp.Expr, v: sp.Symbol) -> sp.Expr:
    return sp.Tuple(*sp.solve(equation, v))


def _in_argument(expr: sp.Expr, argument: sp.Expr, w: sp.Symbol) -> sp.Expr | None:
    """`expr` in w = `argument` and the inputs but one (which `argument` is solved for), or None where no input of
    it leaves `expr` when solved for: sqrt(2) (loc - x) / (sqrt(pi) scale**2 erfcx(sqrt(2) (loc - x) / (2 scale)))
    is 2 w / (sqrt(pi) scale erfcx(w))."""
    for v in sorted(argument.free_symbols, key=sp.default_sort_key):
        solved = _attempt(functools.partial(_solutions, argument - w, v))
        if solved is None or len(solved) != 1:
            continue
        rewritten = _attempt(functools.partial(expr.xreplace, {v: solved[0]}))
        if (
            rewritten is not None
            and v not in rewritten.free_symbols
            and not rewritten.has(sp.nan, sp.zoo)
            and rewritten.atoms(sp.Function)
            <= expr.atoms(sp.Function) | {f.xreplace({argument: w}) for f in expr.atoms(sp.Function)}
            and sp.count_ops(rewritten) <= sp.count_ops(expr)
        ):
            return rewritten
    return None


def _same_beyond(
    expr: sp.Expr, others: Sequence[sp.Symbol], bound: float, variables: Sequence[sp.Symbol], points: Sequence[_Points]
) -> bool:
    """Whether `expr`'s exact derivative in each of `others` rounds alike, in every dtype, at the sampled points
    beyond `bound` (in the first variable) and at those points held at +-bound: there the frameworks' derivative of
    the clamped form is the held one's."""
    for u in others:
        derivative = _attempt(functools.partial(sp.diff, expr, u))
        if derivative is None:
            return False
        reference = _mpmath_function(derivative, tuple(variables))
        for p in points:
            magnitudes = np.abs(p.columns[0].astype(np.float64))
            beyond = np.flatnonzero(magnitudes > bound)
            beyond = beyond[np.argsort(magnitudes[beyond])]
            for j in dict.fromkeys([*beyond[: BUDGET.flat_points // 2], *beyond[-(BUDGET.flat_points // 2) :]]):
                point = [float(c[j]) for c in p.columns]
                held = [math.copysign(bound, point[0]), *point[1:]]
                there = value_at(reference, point, initial_precision(point) + 1100)
                here = value_at(reference, held, initial_precision(held) + 1100)
                if there is None or here is None or to_floats(there) != to_floats(here):
                    return False
    return True


def _argument_saturated(
    m: _Measured, variables: Sequence[sp.Symbol], points: Sequence[_Points], least: float
) -> list[_Measured]:
    """`m` written in the argument w of a function it calls, w clamped on each side where `m` has reached its
    limit: there its derivative in w rounds to 0 beyond the bound, its derivatives in the other inputs round as at
    the bound, and held at the bound nothing overflows.  A normal log-CDF's partial in its scale, sqrt(2) (loc -
    x) / (sqrt(pi) scale**2 erfcx(w)) with w = (loc - x) / (sqrt(2) scale), is 0 where scale**2 overflows and
    nan where it underflows (inf * 0), or where w does (x = 2.4e93, scale = 2e-308), on the way to the 0 it has
    reached by w = -39 at any scale: in w, 2 w / (sqrt(pi) scale erfcx(w)), held at w = -100, it is right on the
    whole line.  No one input's magnitude says where: the argument's does.  Kept where it measures no worse than
    the best form (`least`, the sum of the dtypes' mean bits); the gate proves it on points of its own."""
    w = sp.Dummy("w", real=True)
    for argument in _reduced_arguments(m.expr):
        rewritten = _in_argument(m.expr, argument, w)
        if rewritten is None:
            continue
        others = [v for v in variables if v in rewritten.free_symbols]
        local = (w, *others)
        fn = _numpy_function(argument, tuple(variables))
        if fn is None:
            continue
        reduced = []
        for p in points:
            with np.errstate(all="ignore"):
                column = np.broadcast_to(np.asarray(fn(*p.columns), dtype=np.float64), p.exact.shape)
            # An argument past the largest float (w at x = 2.4e93, scale = 2e-308) is checked at the largest.
            column = np.where(np.isinf(column), np.copysign(np.finfo(np.float64).max, column), column)
            rest = tuple(p.columns[variables.index(v)] for v in others)
            reduced.append(_Points(p.dtype, (np.array(column), *rest), p.exact))
        # Not past a magnitude where the form is already broken (its value at the bound would be the broken one).
        start = _non_finite_from(m, 0, reduced)
        for bound in (b for b in BUDGET.saturation_bounds if b < start):
            # Measured clamped on both sides first, which the search's points see as they see either side's clamp
            # (they rarely reach beyond the bound): the checks beyond it, by mpmath, only where that is no worse.
            both = _measure(_clamped(rewritten, w, Domain(), bound).xreplace({w: argument}), "", variables, points)
            if both is None or both.score > least:
                continue
            sides = [
                sign
                for sign in (-1.0, 1.0)
                if _limit_reached(rewritten, others, bound, local, [_beyond(p, sign, bound) for p in reduced])
            ]
            if not sides:
                continue
            held = Domain(ge=None if -1.0 in sides else 0.0, le=None if 1.0 in sides else 0.0)
            candidate = _clamped(rewritten, w, held, bound).xreplace({w: argument})
            measured = _measure(candidate, f"{m.family}, argument clamped at {bound:g}", variables, points)
            if measured is not None and measured.score <= least:
                return [measured]
    return []


def _limit_reached(
    expr: sp.Expr, others: Sequence[sp.Symbol], bound: float, variables: Sequence[sp.Symbol], points: Sequence[_Points]
) -> bool:
    """Whether `expr` (of the first variable and `others`) may be held at +-bound in the first variable, at the
    sampled `points` beyond it (`_flat_beyond`, `_same_beyond`, `_in_range_held`)."""
    first = variables[0]
    return (
        _flat_beyond(expr, first, 0, bound, variables, points)
        and _same_beyond(expr, others, bound, variables, points)
        and _in_range_held(expr, first, 0, bound, variables, points)
    )
