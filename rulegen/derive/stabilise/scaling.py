"""Overflow-safe scaling of homogeneous expressions: inputs divided by powers of two, the result scaled back."""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import mpmath
import numpy as np
import sympy as sp

from rulegen.derive.functions import binade, divided, power_product
from rulegen.derive.stabilise.budget import BUDGET
from rulegen.derive.stabilise.families import _finishing
from rulegen.derive.stabilise.points import Sampling, _measure, _Measured, _mpmath_function, _Points


@dataclass(frozen=True)
class _Homogeneity:
    """expr(t**w1 x1, t**w2 x2, ...) = t**degree expr(x) for every t > 0: `weights` (-1, 0 or 1 each) and `degree`."""

    weights: tuple[int, ...]
    degree: int


def _homogeneities(expr: sp.Expr, sampling: Sampling) -> list[_Homogeneity]:
    """The scalings under which `expr` is homogeneous: all inputs at once, or some balanced against others.

    The quadratic formula's roots are of degree 0 in (a, b, c) together and
    of degree -1 in (a, c) with weights (1, -1) (x is a root of a x**2 +
    b x + c exactly when x/t is one of (a t) y**2 + b y + c/t).  Tested at
    `BUDGET.homogeneity_points` points of magnitude about 1 (of the sign each
    domain allows), in mpmath: a float evaluation of an expression that
    cancels scales by 3 only roughly.
    """
    variables = sampling.variables
    if len(variables) < 2:
        return []  # c x**k: nothing to scale
    fn = _mpmath_function(expr, tuple(variables))
    rng = np.random.default_rng(len(variables))
    signs = [
        rng.choice([-1.0, 1.0], BUDGET.homogeneity_points)
        if d.lo < 0 < d.hi
        else np.full(BUDGET.homogeneity_points, 1.0 if d.hi > 0 else -1.0)
        for _, d in sampling.domains
    ]
    magnitudes = 2.0 ** rng.uniform(-1, 1, (len(variables), BUDGET.homogeneity_points))
    points = [tuple(float(x) for x in point) for point in (np.asarray(signs) * magnitudes).T]
    found = []
    for weights in itertools.product((1, 0, -1), repeat=len(variables)):
        if all(w == 0 for w in weights) or next(w for w in weights if w) < 0:
            continue  # (w) and (-w) are one scaling
        if any(w and v not in expr.free_symbols for v, w in zip(variables, weights, strict=True)):
            continue  # an input the expression does not read scales nothing
        if sum(1 for w in weights if w) < 2:
            continue  # y g(x) scaled in y alone computes the same product in another order
        degree = _degree(fn, weights, points)
        if degree is not None:
            found.append(_Homogeneity(weights, degree))
    return found


def _degree(fn: Callable[..., Any], weights: Sequence[int], points: Sequence[tuple[float, ...]]) -> int | None:
    """The degree k with fn(t**w x) = t**k fn(x) at every point where fn is a nonzero real, None where there is none
    (or no point is such)."""
    degrees = set()
    with mpmath.workdps(BUDGET.homogeneity_digits):
        for point in points:
            try:
                values = [fn(*(mpmath.mpf(t) ** w * x for w, x in zip(weights, point, strict=True))) for t in (1, 2, 3)]
            except (ValueError, ZeroDivisionError, TypeError, OverflowError):
                continue
            if not all(isinstance(v, mpmath.mpf) and v != 0 and mpmath.isfinite(v) for v in values):
                continue
            degree = round(float(mpmath.log(abs(values[1] / values[0]), 2)))
            expected = mpmath.mpf(3) ** degree
            if abs(values[2] / values[0] - expected) > mpmath.mpf(10) ** (5 - BUDGET.homogeneity_digits) * expected:
                return None
            degrees.add(degree)
    if len(degrees) != 1:
        return None
    return degrees.pop()


def _magnitude(inputs: Sequence[sp.Expr]) -> sp.Expr:
    return sp.Max(*(sp.Abs(x) for x in inputs)) if len(inputs) > 1 else sp.Abs(inputs[0])


def _rescaled(
    expr: sp.Expr,
    variables: Sequence[sp.Symbol],
    scalings: Sequence[_Homogeneity],
    magnitude: Callable[[Sequence[sp.Expr]], sp.Expr] | None = None,
) -> sp.Expr:
    """`expr` computed on its inputs scaled by powers of two (`binade`), one scaling after another, and the result
    scaled back in the reverse order: no square or product of the scaled inputs overflows or underflows where it
    matters, and no multiplication or division rounds.

    A scaling of all inputs at once divides them by the binade of their
    largest magnitude; one with weights of both signs brings the largest of
    each side to the same magnitude, t = sqrt(largest -1 / largest +1)
    (the quadratic's a and c to sqrt|ac|), for the joint scaling after it.
    `magnitude`: the joint scaling's magnitude of the inputs scaled so far (None: the largest of them).
    """
    inputs: list[sp.Expr] = list(variables)
    undo: list[tuple[sp.Expr, int]] = []  # per scaling, (s, k): expr = expr(scaled) * s**k
    for scaling in scalings:
        weights = scaling.weights
        if min(weights) < 0:
            # Each side's largest magnitude meets at their geometric mean: x+ times down/up, x- times up/down, with
            # up and down the binades of the sides' square roots, so both reciprocals are in range (binade(p/n) and
            # binade(n/p), the way before, multiply to 1/2 where p/n is no power of two: no homogeneity at all).
            up, down = (
                binade(sp.sqrt(_magnitude([x for x, w in zip(inputs, weights, strict=True) if side * w > 0])))
                for side in (1, -1)
            )
            inputs = [
                divided(divided(x, up), divided(1, down))
                if w > 0
                else divided(divided(x, down), divided(1, up))
                if w < 0
                else x
                for x, w in zip(inputs, weights, strict=True)
            ]
            # With t = down/up, expr(scaled) = t**degree expr: scaled back by the one power of two up/down, where
            # multiplying by up and then dividing by down overflows on the way for a large value (the quadratic's
            # other root, -b/a).
            undo.append((divided(up, down), scaling.degree))
        else:
            if magnitude is None:
                scale = binade(_magnitude([x for x, w in zip(inputs, weights, strict=True) if w]))
            else:
                scale = binade(magnitude(inputs))
            inputs = [divided(x, scale) if w else x for x, w in zip(inputs, weights, strict=True)]
            undo.append((scale, scaling.degree))
    if isinstance(expr, sp.Piecewise):
        # Each branch scaled, the regimes' conditions left on the inputs as they are: a threshold on |v| was
        # placed by the unscaled magnitudes, and sympy folds a condition on a selection into one on its pieces.
        return sp.Piecewise(*((_scaled_back(_substituted(e, variables, inputs), undo), c) for e, c in expr.args))
    return _scaled_back(_substituted(expr, variables, inputs), undo)


def _sums_rescaled(expr: sp.Expr, variables: Sequence[sp.Symbol], scaling: _Homogeneity) -> sp.Expr | None:
    """`expr`, a product, with each of its sums that is a homogeneous polynomial computed on the inputs scaled by
    the binade of their largest magnitude and the powers of that binade put back once, after the sums' quotient;
    its other factors (a monomial, a function) as they stand.

    (d**2 - s**2) / (s (s**2 + d**2)) is then 1/s times a quotient of two sums of degree 2 whose scalings cancel:
    where s is below every other input by more than the float range, the joint scaling takes s to 0 and the
    quotient to inf, but s alone stays what it is.  None where no factor is such a sum.
    """
    scaled_inputs = [v for v, w in zip(variables, scaling.weights, strict=True) if w]
    if min(scaling.weights) < 0 or not expr.is_Mul:
        return None
    scale = binade(_magnitude(scaled_inputs))
    substitution = {v: divided(v, scale) for v in scaled_inputs}
    kept, sums, degree = [], [], 0
    for factor in expr.args:
        base, exponent = factor.as_base_exp()
        order = _polynomial_order(base, scaled_inputs) if base.is_Add and exponent.is_Integer else None
        if order is None:
            kept.append(factor)
            continue
        sums.append(base.xreplace(substitution) ** exponent)
        degree += order * int(exponent)
    if not sums:
        return None
    return sp.Mul(*kept) * _scaled_back(sp.Mul(*sums), [(scale, degree)])


@functools.lru_cache(maxsize=64)
def _radicand_homogeneities(radicand: sp.Expr, sampling: Sampling) -> list[_Homogeneity]:
    """`_homogeneities` of a radicand, once: the forms of one search share their discriminant."""
    return _homogeneities(radicand, sampling)


def _radicands_rescaled(expr: sp.Expr, sampling: Sampling) -> sp.Expr | None:
    """`expr` with each square root (or its power, 1/sqrt) of a radicand homogeneous of an even degree in all its
    inputs at once computed on the inputs scaled (`_rescaled`, balanced first where the radicand keeps its value
    under a balancing, by its largest monomial where it is of degree 2), the rest of `expr` as it is.  The
    quadratic formula's (sqrt(b**2 - 4ac) - b)/(2a) scaled whole passes through 1/a'' = 1e316 at a = -4e-168,
    b = -5.8e140, c = -3e-183, where its value is -1.4e308: only its discriminant needs the scaling, b**2 and 4ac
    over- and underflowing, and the root is in range wherever the value is.  None where no root is such."""
    roots = sorted(
        (p for p in expr.atoms(sp.Pow) if p.exp.is_Rational and p.exp.q == 2 and p.base.free_symbols),
        key=sp.default_sort_key,
    )[: BUDGET.radicand_roots]
    replaced = {}
    for root in roots:
        # A regime's stand-ins (Piecewise((1.0, b <= 0), (b, True))) are their inputs where the branch runs.
        plain = root.base.replace(lambda e: isinstance(e, sp.Piecewise), lambda e: e.args[-1].expr)
        found = _radicand_homogeneities(plain, sampling)
        joint = [h for h in found if min(h.weights) >= 0 and h.degree > 0 and h.degree % 2 == 0][:1]
        if not joint:
            continue
        balancing = [h for h in found if min(h.weights) < 0 and h.degree == 0][:1]
        # The root's own degrees: its radicand's times its exponent (-1 for 1/sqrt of a discriminant).
        powered = [_Homogeneity(h.weights, int(h.degree * root.exp)) for h in (*balancing, *joint)]
        magnitude = _monomials_magnitude(plain, sampling.variables, joint[0].weights)
        replaced[root] = _rescaled(root, sampling.variables, powered, magnitude)
    return expr.xreplace(replaced) if replaced else None


def _monomials_magnitude(
    radicand: sp.Expr, variables: Sequence[sp.Symbol], weights: Sequence[int]
) -> Callable[[Sequence[sp.Expr]], sp.Expr] | None:
    """For a radicand homogeneous of degree 2 in the inputs of `weights`, the magnitude of its largest monomial's
    square root, |b| for b**2 and sqrt|a| sqrt|c| for a c, taken of the inputs given; None for another radicand.
    The largest input would be a alone where c is 0 (a = 1e34, b = 4e-4): b/a squared is 0 in float32, and the
    discriminant b**2 with it."""
    scaled = [v for v, w in zip(variables, weights, strict=True) if w]
    try:
        poly = sp.Poly(radicand, *scaled)
    except (sp.PolificationFailed, sp.PolynomialError):
        return None
    if not poly.is_homogeneous or poly.homogeneous_order() != 2:
        return None
    monomials = poly.monoms()
    where = [variables.index(v) for v in scaled]

    def magnitude(inputs: Sequence[sp.Expr]) -> sp.Expr:
        roots = [
            sp.Mul(
                *(
                    sp.Abs(inputs[k]) if e == 2 else sp.sqrt(sp.Abs(inputs[k]))
                    for k, e in zip(where, m, strict=True)
                    if e
                )
            )
            for m in monomials
        ]
        return sp.Max(*roots) if len(roots) > 1 else roots[0]

    return magnitude


def _polynomial_order(base: sp.Expr, inputs: Sequence[sp.Symbol]) -> int | None:
    """The degree of `base` where it is a homogeneous polynomial in `inputs` (its other symbols coefficients)."""
    try:
        poly = sp.Poly(base, *inputs)
    except (sp.PolificationFailed, sp.PolynomialError):
        return None
    if len(poly.terms()) < 2 or not poly.is_homogeneous:
        return None
    order = poly.homogeneous_order()
    return None if order is None else int(order)


def _scaled_back(value: sp.Expr, undo: Sequence[tuple[sp.Expr, int]]) -> sp.Expr:
    """value * s**k for every (s, k) of `undo`, the last scaling's first, one exact step at a time: each passes
    through the expression's own value at the inputs scaled so far, where the product of the factors first could
    overflow."""
    for scale, k in reversed(undo):
        for _ in range(abs(k)):
            value = divided(value, scale) if k < 0 else divided(value, divided(1, scale))
    return value


def _substituted(expr: sp.Expr, variables: Sequence[sp.Symbol], inputs: Sequence[sp.Expr]) -> sp.Expr:
    """`expr` on the scaled `inputs`, its `where`s' conditions on the inputs as they are: a regime's stand-in
    Piecewise((1.0, b <= 0), (b, True)) fed b = 1.1e-306 scaled by 2**-438 took its 1.0, and the quadratic's
    discriminant was 1 + 4ac for 4ac."""
    mapping = dict(zip(variables, inputs, strict=True))

    def substituted(e: sp.Basic) -> sp.Basic:
        if isinstance(e, sp.Piecewise):
            return sp.Piecewise(*((substituted(value), condition) for value, condition in e.args))
        if not e.args or not e.free_symbols & mapping.keys():
            return e.xreplace(mapping)
        return e.func(*(substituted(a) for a in e.args))

    return substituted(expr)


#: The families whose forms are scaled first: the derived form and the sums over one denominator.
_SIMPLEST = frozenset({"as derived", "together", "cancel"})


def radicands_scaled(pool: Sequence[_Measured], sampling: Sampling, points: Sequence[_Points]) -> list[_Measured]:
    """The best forms of `pool` with their square roots of homogeneous radicands computed scaled, measured: before
    the regimes, which join them (the quadratic's partial in b is (b/s - 1)/(2a) for b <= 0 and 2(c/(b + s))/s
    for b > 0, s its discriminant's root, and each overflows in s alone)."""
    ranked = sorted(pool, key=lambda m: m.score)[: BUDGET.radicand_starts]
    found = ((m, _radicands_rescaled(m.expr, sampling)) for m in ranked)
    measured = (
        _measure(e, f"{m.family}, radicands scaled", sampling.variables, points) for m, e in found if e is not None
    )
    return [m for m in measured if m is not None]


def _with_scaling(
    best: _Measured, pool: Sequence[_Measured], expr: sp.Expr, sampling: Sampling, points: Sequence[_Points]
) -> _Measured:
    """The best of `best` and the scaled forms of it and of the pool's next best, where `expr` is homogeneous."""
    variables = sampling.variables
    found = sorted(_homogeneities(expr, sampling), key=lambda h: -sum(map(abs, h.weights)))
    joint = [h for h in found if min(h.weights) >= 0][:1]
    balancing = [h for h in found if min(h.weights) < 0][:1]
    options = [o for o in (joint, balancing, balancing + joint) if o]
    if not options:
        return best
    # The expression as derived and over one denominator among the starts: scaled, the simplest form is often the
    # best, though unscaled it measured worst (a sum over one denominator overflows first).
    # A form of scaled products (`power_product`) keeps its products in range already: it starts no scaling.
    ranked = sorted(
        (m for m in pool if m is not best and not m.expr.has(power_product)),
        key=lambda m: (m.family not in _SIMPLEST, m.score),
    )
    starts = [best, *ranked[: BUDGET.regime_starts]]
    scaled = [
        _measure(_rescaled(m.expr, variables, scalings), f"{m.family}, scaled", variables, points)
        for m in starts
        for scalings in options
    ]
    sums_scaled = (_sums_rescaled(m.expr, variables, scaling) for m in starts for scaling in joint)
    scaled += [_measure(e, "sums scaled", variables, points) for e in sums_scaled if e is not None]
    # The pool's own forms came with their radicands scaled (`radicands_scaled`, before the regimes): only a form
    # the regimes joined is new here.
    measured_already = {m.expr for m in pool}
    scaled += radicands_scaled([m for m in starts if m.expr not in measured_already], sampling, points)
    measured = sorted((m for m in scaled if m is not None), key=lambda m: m.score)
    # The scaling keeps the scaled sums in range, not the products it leaves: sympy joins a factor kept outside
    # the scaling with the sums' quotient, and (d'**2 - s'**2)/(s (d'**2 + s'**2)) multiplies s = 1.4e-288 by a
    # scaled sum of 5e-32 into a subnormal (0 under XLA, 0 in numpy below 5e-324): inf, where dividing by one
    # and then the other is 7e287.  Each of the best scaled forms with its products reassociated, as the search's
    # own forms are before scaling.
    reassociated = (
        _measure(e, f"{m.family}, reassociated", variables, points)
        for m in measured[: BUDGET.reassociated_starts]
        for e in _finishing("reassociated", m.expr)
    )
    chosen = min([*measured, *(m for m in reassociated if m is not None)], key=lambda m: m.score, default=None)
    # The margin of a regime: the scaling costs a binade and a division per input, paid only for a bit.
    if chosen is None or chosen.score > best.score - BUDGET.regime_margin_bits:
        return best
    return dataclasses.replace(chosen, branches=best.branches)
