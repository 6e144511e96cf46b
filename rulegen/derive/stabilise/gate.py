"""The acceptance gate: a form the search chose replaces the derived one only where points it never saw prove it.

The search decides on `BUDGET.search_points` points per dtype, where a regime's threshold or a rescaling can
look right and be nan one binade away (atan2's derivative split on |y| < 3.9e-14 was nan at x = 1e-200,
y = 1e-20).  Each chosen form is validated on a second sample, drawn with a seed of its own over the same float
line, with each input's special floats (0, the smallest subnormal and normal, the largest float, either sign)
and, for two inputs or more, pairs of mixed magnitudes (|a| << |b|, |b| << |a|, a ~ b):

- at every validation point (`BUDGET.validation_points` drawn, the special ones on top) the form is finite
  wherever the derived form is finite and the exact value is a finite float of the dtype: numpy says where the
  forms are finite, mpmath is asked only where the candidate is not;
- on `BUDGET.validation_measured` of them (mpmath at each, the costly part) its mean bits of error are no worse
  than the derived form's, to within `BUDGET.tie_bits`, in either dtype.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import sympy as sp

from rulegen.derive.expr import lambdified
from rulegen.derive.measure import bits_of_error, sample_floats, special_points
from rulegen.derive.stabilise.budget import BUDGET
from rulegen.derive.stabilise.points import (
    _DTYPES,
    Sampling,
    _evaluated,
    _exact,
    _mpmath_function,
    _Points,
    _sample,
)

#: Added to a search's seed for the gate's points: a form is proven on points it was not chosen on.
_VALIDATION_SEED = 0x5EED


def _validation_columns(sampling: Sampling, seed: int, dtype: Any) -> tuple[np.ndarray, ...]:
    """BUDGET.validation_points drawn points of `dtype`, each variable's special floats and the mixed magnitudes on top,
    inside the sampling's joint condition."""
    rng = np.random.default_rng([seed + _VALIDATION_SEED, np.dtype(dtype).itemsize])
    with np.errstate(over="ignore"):  # a bound beyond float32's range is its largest float
        drawn = [sample_floats(domain, BUDGET.validation_points, rng, dtype) for _, domain in sampling.domains]
    columns = special_points(drawn, [d for _, d in sampling.domains], dtype, rng, BUDGET.mixed_points)
    if sampling.condition is not None:
        condition = lambdified(sampling.variables, sampling.condition, modules="numpy")
        with np.errstate(all="ignore"):
            keep = np.broadcast_to(np.asarray(condition(*columns)) > 0.5, columns[0].shape)
        columns = [c[keep] for c in columns]
    return tuple(columns)


@functools.lru_cache(maxsize=64)
def _validation(expr: sp.Expr, sampling: Sampling, seed: int) -> tuple[tuple[_Points, tuple[np.ndarray, ...]], ...]:
    """Per dtype: the measured points with `expr`'s exact values, and every validation point's columns."""
    return tuple(
        (
            _sample(expr, sampling, BUDGET.validation_measured, seed + _VALIDATION_SEED, dtype),
            _validation_columns(sampling, seed, dtype),
        )
        for dtype in _DTYPES
    )


def _finite_where_exact(
    candidate: sp.Expr, derived: sp.Expr, variables: Sequence[sp.Symbol], columns: Sequence[np.ndarray], dtype: Any
) -> bool:
    """Whether `candidate` is finite at every point where `derived` is and the exact value is a finite float."""
    if not len(columns[0]):
        return True
    theirs = _evaluated(derived, variables, columns, dtype)
    if theirs is None:
        return True
    ours = _evaluated(candidate, variables, columns, dtype)
    if ours is None:
        return False
    suspect = np.flatnonzero(np.isfinite(theirs) & ~np.isfinite(ours))
    if not suspect.size:
        return True
    reference = _mpmath_function(derived, tuple(variables))
    which = 0 if np.dtype(dtype) == np.float64 else 1
    for j in suspect:
        value = _exact(reference, [float(c[j]) for c in columns])
        if value is not None and math.isfinite(value[which]):
            return False
    return True


def as_computed(expr: sp.Expr) -> sp.Expr:
    """`expr` as generated code computes it: after `sympy.cse`, whose substitutions sympy evaluates again
    (-sqrt(1/x)/(2x) becomes -(1/x)**(3/2)/2, which overflows in float32 where the first does not)."""
    try:
        replacements, (reduced,) = sp.cse([expr])
    except Exception:  # cse cannot take every expression apart; the planner's own cse then keeps it whole
        return expr
    for symbol, value in reversed(replacements):
        reduced = reduced.subs(symbol, value)
    return reduced


def admissible(candidate: sp.Expr, derived: sp.Expr, sampling: Sampling, seed: int = 0) -> bool:
    """Whether `candidate` may replace `derived`: on the validation sample (disjoint from the search's, special
    floats and mixed magnitudes included) it is finite wherever the exact value is a finite float of the dtype
    and `derived` is finite, and no worse in mean bits (to within BUDGET.tie_bits) in either dtype.

    The invariant every chosen form keeps; the search decides on a few points, where a regime's threshold or a
    rescaling can look right and be nan one binade away (atan2's derivative split on |y| < 3.9e-14).
    """
    variables = sampling.variables
    candidate = as_computed(candidate)
    for measured, columns in _validation(derived, sampling, seed):
        if not _finite_where_exact(candidate, derived, variables, columns, measured.dtype):
            return False
        if not len(measured):
            continue
        theirs = _evaluated(derived, variables, measured.columns, measured.dtype)
        ours = _evaluated(candidate, variables, measured.columns, measured.dtype)
        if ours is None:
            return False
        if theirs is None:
            continue
        before = bits_of_error(theirs, measured.exact, measured.dtype).mean()
        after = bits_of_error(ours, measured.exact, measured.dtype).mean()
        if after > before + BUDGET.tie_bits:
            return False
    return True
