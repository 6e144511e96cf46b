"""Bits of error, as Herbie measures them: floats sampled over their bit patterns, exact values in mpmath.

Points are sampled uniformly over the float bit patterns inside a domain,
so that every magnitude from the smallest subnormal to the largest float is
visited as often as the numbers near 1; the error of a result is log2(1 +
the number of floats between it and the correctly rounded exact value).  The
derive stage's stabilising search (rulegen.derive.stabilise) measures candidate
forms with these, and `rulegen accuracy` (rulegen.check.accuracy) the generated code.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rulegen.spec.rules import Domain, Input

# Bit patterns as integers of the float's width, the sign bit cleared by this mask.
_PATTERNS = {np.dtype(np.float64): (np.int64, 0x7FFF_FFFF_FFFF_FFFF), np.dtype(np.float32): (np.int32, 0x7FFF_FFFF)}

# Working precisions in bits; a reference that has not converged by the last is dropped.
_PRECISION_STEPS = 4
# Bits beyond the first precision at which an exact zero is believed: every bit of a difference can cancel
# at the first precisions (1 + erf(-24.6) is 0 to 880 bits, 2.2e-266 beyond), where two evaluations agree
# on a 0 that is wrong.  The first precision covers the inputs' exponents; a remainder below 2**-1280 of
# the terms is under float64's smallest subnormal (2**-1074) even multiplied back by them.
_ZERO_BITS = 1280


# ---------------------------------------------------------------- bits of error


def ordinals(values: np.ndarray) -> np.ndarray:
    """Each float's position on the float line as an int64: consecutive floats differ by 1, -0.0 and 0.0 are 0."""
    values = np.asarray(values)
    signed, magnitude_mask = _PATTERNS[values.dtype]
    patterns = values.view(signed).astype(np.int64)
    magnitude = patterns & magnitude_mask
    return np.where(patterns < 0, -magnitude, magnitude)


def from_ordinals(positions: np.ndarray, dtype: Any) -> np.ndarray:
    """The floats of `dtype` at these positions of the float line (the inverse of `ordinals`)."""
    signed, _ = _PATTERNS[np.dtype(dtype)]
    positions = np.asarray(positions, dtype=np.int64)
    magnitude = np.abs(positions)
    sign = np.where(positions < 0, np.int64(1) << (np.dtype(dtype).itemsize * 8 - 1), 0)
    return (magnitude | sign).astype(signed).view(dtype)


def bits_of_error(got: np.ndarray, exact: np.ndarray, dtype: Any) -> np.ndarray:
    """log2(1 + floats of `dtype` between `got` and `exact`, both in `dtype`), the width where `got` is nan."""
    got, exact = np.asarray(got, dtype=dtype), np.asarray(exact, dtype=dtype)
    a, b = ordinals(got), ordinals(exact)
    # Two positions of opposite signs can be 2**64 apart: count in unsigned integers.
    magnitude_a, magnitude_b = np.abs(a).astype(np.uint64), np.abs(b).astype(np.uint64)
    same_side = (a >= 0) == (b >= 0)
    apart = np.where(
        same_side,
        np.maximum(magnitude_a, magnitude_b) - np.minimum(magnitude_a, magnitude_b),
        magnitude_a + magnitude_b,
    )
    bits = np.log2(1.0 + apart.astype(np.float64))
    return np.where(np.isnan(got), float(np.dtype(dtype).itemsize * 8), bits)


# ---------------------------------------------------------------- sampling


def _inward(bound: float, dtype: Any, *, lower: bool) -> float:
    """The float of `dtype` nearest `bound` inside it (float32 rounds 0.1 outward otherwise)."""
    rounded = np.asarray(bound, dtype=dtype)
    if lower and float(rounded) < bound:
        rounded = np.nextafter(rounded, np.asarray(np.inf, dtype=dtype))
    if not lower and float(rounded) > bound:
        rounded = np.nextafter(rounded, np.asarray(-np.inf, dtype=dtype))
    return float(rounded)


def sample_floats(domain: Domain, count: int, rng: np.random.Generator, dtype: Any) -> np.ndarray:
    """`count` floats of `dtype` uniform over the bit patterns inside `domain` (no infinities, no nan).

    Every binade is drawn about as often as every other: as many points lie
    in [1e-300, 1e-299] as in [1, 10].
    """
    largest = float(np.finfo(dtype).max)
    lo = _inward(max(domain.lo, -largest), dtype, lower=True)
    hi = _inward(min(domain.hi, largest), dtype, lower=False)
    first, last = (int(ordinals(np.asarray(v, dtype=dtype))) for v in (lo, hi))
    first += domain.lo_open and domain.lo == lo
    last -= domain.hi_open and domain.hi == hi
    if first > last:
        raise ValueError(f"domain {domain.describe()} holds no float of {np.dtype(dtype).name}")
    excluded = np.asarray([float(x) for x in domain.exclude], dtype=dtype)
    found = np.empty(0, dtype=dtype)
    while len(found) < count:
        drawn = from_ordinals(rng.integers(first, last, size=count, endpoint=True), dtype)
        found = np.concatenate([found, drawn[~np.isin(drawn, excluded)]])
    return found[:count]


# ---------------------------------------------------------------- the exact values


def initial_precision(args: Sequence[float]) -> int:
    """Enough bits that a sum of the inputs and small constants is exact: 1 + 1e-300 needs about 1000."""
    exponents = [abs(math.frexp(a)[1]) for a in args if a != 0]
    return 2 * max(exponents, default=0) + 128


def exact_value(fn: Callable[..., Any], args: Sequence[float]) -> tuple[float, float] | None:
    """`fn` at `args`, correctly rounded to float64 and to float32; None where it is no finite real number.

    The precision doubles until two evaluations round alike in both dtypes,
    and an exact zero until it is _ZERO_BITS past the first precision (a
    total cancellation looks converged).
    """
    start = precision = initial_precision(args)
    previous = None
    for step in range(_PRECISION_STEPS + 4):
        value = value_at(fn, args, precision)
        if value is None:
            return None
        rounded, zero = to_floats(value), not value
        if rounded == previous and (not zero or precision >= start + _ZERO_BITS):
            return rounded
        if step >= _PRECISION_STEPS - 1 and not zero:
            return None
        previous, precision = rounded, 2 * precision
    return None


def value_at(fn: Callable[..., Any], args: Sequence[float], precision: int) -> Any:
    """`fn` at `args` in mpmath at `precision` bits (an mpf); None where it is no finite real number."""
    import mpmath

    with mpmath.workprec(precision):
        try:
            value = fn(*[mpmath.mpf(a) for a in args])
        except (ValueError, ZeroDivisionError, OverflowError, TypeError):
            return None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            # Max(0, x) at x < 0 is Python's max: the int 0, an exact value that was dropped as no number at all,
            # so that no measure (nor the search's sample) saw the half-line where relu is 0.
            value = mpmath.mpf(value)
        if not isinstance(value, mpmath.mpf) or not mpmath.isfinite(value):
            return None
        return value


#: Per dtype: bits of the significand, and the exponent of the smallest normal float.
_FORMATS = {"float64": (53, -1022), "float32": (24, -126)}


def to_floats(value: Any) -> tuple[float, float]:
    """An mpf to the nearest float64 and the nearest float32, each rounded once."""
    return _nearest(value, *_FORMATS["float64"]), _nearest(value, *_FORMATS["float32"])


def _nearest(value: Any, significand_bits: int, smallest_normal_exponent: int) -> float:
    """`value` rounded to the nearest float of the format, ties to even, subnormals included.

    Rounding to the significand's bits and then to the subnormals' coarser
    grid would round twice (1.4999 ulps would become 1.5, then 2).
    """
    import mpmath

    with mpmath.workprec(max(mpmath.mp.prec, significand_bits)):
        if abs(value) < mpmath.ldexp(1, smallest_normal_exponent):
            step = smallest_normal_exponent - significand_bits + 1
            return float(mpmath.nint(mpmath.ldexp(value, -step))) * 2.0**step
    with mpmath.workprec(significand_bits):
        nearest = float(+value)
    if significand_bits < 53:
        with np.errstate(over="ignore"):
            # Exact unless beyond float32's range, where it is inf as it should be.
            nearest = float(np.float32(nearest))
    return nearest


_ASSUMED_BOUNDS = {
    "positive": Domain(gt=0),
    "nonnegative": Domain(ge=0),
    "negative": Domain(lt=0),
    "nonpositive": Domain(le=0),
    "nonzero": Domain(exclude=(0,)),
}


def probe_values(domains: Sequence[Domain], magnitudes: Sequence[float]) -> list[tuple[int, float]]:
    """(variable's index, value) for each variable and each of `magnitudes`, of either sign, that its domain holds."""
    found = []
    for index, domain in enumerate(domains):
        for value in (v for m in magnitudes for v in (m, -m)):
            inside = domain.lo < value < domain.hi or (value == domain.lo and not domain.lo_open)
            if inside and value not in domain.exclude:
                found.append((index, value))
    return found


def probe_points(
    drawn: Sequence[np.ndarray], domains: Sequence[Domain], magnitudes: Sequence[float], dtype: Any
) -> list[np.ndarray]:
    """One column per variable: each variable at each of its `probe_values`, the others at points of `drawn`."""
    columns: list[list[float]] = [[] for _ in drawn]
    for index, value in probe_values(domains, magnitudes):
        for k, column in enumerate(columns):
            column.append(value if k == index else float(drawn[k][len(column) % len(drawn[k])]))
    return [np.asarray(c, dtype=dtype) for c in columns]


def with_probes(
    drawn: Sequence[np.ndarray], domains: Sequence[Domain], magnitudes: Sequence[float], dtype: Any
) -> list[np.ndarray]:
    """`drawn` (one column per variable) after its `probe_points`."""
    probes = probe_points(drawn, domains, magnitudes, dtype)
    return [np.concatenate([p, d]) for p, d in zip(probes, drawn, strict=True)]


def sampled_domain(spec: Input) -> Domain:
    """Where `spec` is sampled: the domain the rule wrote, else the whole float line less what `assume` excludes."""
    if spec.domain_given:
        return spec.bounds
    return assumed_domain(spec)


def assumed_domain(spec: Input) -> Domain:
    """The whole float line less what `spec`'s `assume` excludes: where the generated function must be right."""
    bounds = [_ASSUMED_BOUNDS[a] for a in spec.assume]
    return Domain(
        gt=next((b.gt for b in bounds if b.gt is not None), None),
        ge=next((b.ge for b in bounds if b.ge is not None and not any(c.gt is not None for c in bounds)), None),
        lt=next((b.lt for b in bounds if b.lt is not None), None),
        le=next((b.le for b in bounds if b.le is not None and not any(c.lt is not None for c in bounds)), None),
        exclude=tuple(x for b in bounds for x in b.exclude),
    )


def softplus(x: np.ndarray) -> np.ndarray:
    """log(1 + exp(x)) in numpy, as the frameworks' fused softplus computes it: no overflow, no cancellation."""
    return np.logaddexp(np.zeros_like(x), x)


# ---------------------------------------------------------------- special values


def special_magnitudes(dtype: Any) -> tuple[float, ...]:
    """0, the smallest subnormal, the smallest normal and the largest float of `dtype`: where forms break."""
    info = np.finfo(dtype)
    return (0.0, float(info.smallest_subnormal), float(info.tiny), float(info.max))


#: Powers of two by which one input is smaller than another in the mixed-magnitude pairs (|a| << |b|): a form
#: split on one input's magnitude, or one that squares a ratio, fails on some of them.
MIXED_RATIOS = (2.0**-12, 2.0**-40, 2.0**-100, 2.0**-300, 2.0**-700)


def inside(domain: Domain, values: np.ndarray) -> np.ndarray:
    above = values > domain.lo if domain.lo_open else values >= domain.lo
    below = values < domain.hi if domain.hi_open else values <= domain.hi
    return above & below & ~np.isin(values, np.asarray(domain.exclude, dtype=values.dtype))


def edge_pairs(drawn: Sequence[np.ndarray], domains: Sequence[Domain], dtype: Any, count: int) -> list[np.ndarray]:
    """For each pair of variables and either order of signs, `count` points where one is in the top binade of
    `dtype` (max/2 to max) and the other in the top binade of the other sign, the others as drawn, every point
    inside every domain: where their difference overflows and a quotient of it need not ((x - loc)/scale at
    x = 1e308, loc = -1e308, scale = 1e10 is 2e298; x - loc is inf).  Drawn over the float bit patterns, a pair
    lands there once in four million.  The significands come from a generator of their own, so that adding these
    points changes no other draw."""
    count = min(count, len(drawn[0]) if drawn else 0)
    if len(drawn) < 2 or not count:
        return [np.empty(0, dtype) for _ in drawn]
    rng = np.random.default_rng([len(drawn), count, np.dtype(dtype).itemsize])
    top = float(np.finfo(dtype).max)
    made: list[list[np.ndarray]] = [[] for _ in drawn]
    for (i, j), sign in itertools.product(itertools.combinations(range(len(drawn)), 2), (1.0, -1.0)):
        edge = {i: sign, j: -sign}
        for k, column in enumerate(drawn):
            if k in edge:
                # The top binade's significands, uniform as the bit patterns are there.
                made[k].append((edge[k] * top * rng.uniform(0.5, 1.0, count)).astype(dtype))
            else:
                made[k].append(column[:count])
    pairs = [np.concatenate(m) for m in made]
    keep = np.logical_and.reduce([inside(d, c) for d, c in zip(domains, pairs, strict=True)])
    return [p[keep] for p in pairs]


def special_points(
    drawn: Sequence[np.ndarray],
    domains: Sequence[Domain],
    dtype: Any,
    rng: np.random.Generator,
    mixed: int,
    *,
    special_floats: bool = True,
) -> list[np.ndarray]:
    """`drawn` after each variable's special floats (either sign; with `special_floats`) and, for two variables
    or more, each pair's mixed magnitudes at `mixed` of the drawn points: a = b * r and a = b * (1 + eps) for
    each ratio r, the others as drawn, every point inside every domain."""
    columns = list(drawn)
    if special_floats:
        specials = probe_points(drawn, domains, special_magnitudes(dtype), dtype)
        columns = [np.concatenate(c) for c in zip(specials, drawn, strict=True)]
    n = min(len(drawn[0]), mixed)
    pairs: list[list[np.ndarray]] = [[] for _ in drawn]
    made_nonzero: list[np.ndarray] = []
    for i, j in itertools.permutations(range(len(drawn)), 2):
        with np.errstate(all="ignore"):
            ratios = [*(r for r in MIXED_RATIOS if r > np.finfo(dtype).tiny), 1 + float(np.finfo(dtype).eps)]
            for r in ratios:
                signs = rng.choice(np.asarray([-1.0, 1.0], dtype=dtype), size=n)
                made = (drawn[j][:n] * dtype(r) * signs).astype(dtype)
                made_nonzero.append((made != 0) | (drawn[j][:n] == 0))
                for k, column in enumerate(drawn):
                    pairs[k].append(made if k == i else column[:n])
    if pairs[0]:
        made_pairs = [np.concatenate(p) for p in pairs]
        keep = np.logical_and.reduce([inside(d, c) for d, c in zip(domains, made_pairs, strict=True)])
        # A ratio that underflowed to 0 is no mixed magnitude: zero is a special float, where a kink's convention
        # (prelu's derivative at -0) decides, not a ratio.
        keep &= np.concatenate(made_nonzero)
        columns = [np.concatenate([c, m[keep]]) for c, m in zip(columns, made_pairs, strict=True)]
    return columns
