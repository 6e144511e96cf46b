"""Stage 2, after differentiation: each expression the backends compute, in the form with the least measured error.

Herbie's method (Panchekha et al., PLDI 2015) applied to derivatives as well
as values: points are sampled over the float bit patterns inside each
input's domain (as `rulegen accuracy` samples them), the expression's exact
value at each comes from mpmath, and candidate rewrites are scored by their
bits of error when numpy evaluates them in float64 and in float32.  The
candidates come from rewrite families, none of which knows any particular
expression:

- algebraic: `cancel`, `together`, `factor`, `expand`, the canonical fused
  forms, and `cancel` of the expression with log1p and expm1 written out;
- identities for differences of like functions (sin, cos, tan, atan, log,
  log1p, exp, roots: `sqrt(a) - sqrt(b)` is `(a - b)/(sqrt(a) + sqrt(b))`;
  powers of any other exponent: `a**p - b**p` is
  `b**p * expm1(p*log1p((a - b)/b))`) and of a function and a constant
  (`1 - cos(u)` is `2*sin(u/2)**2`); sines and cosines of a sum in several
  variables by angle addition; the conjugate of a sum with a square root;
- overflow-safe scaling: each polynomial in a variable divided through by
  its leading power, so `x**2*(x - 1)**2` is `x**4*(1 - 1/x)**2`, whose
  parts overflow to inf (and a quotient to 0) instead of making inf/inf;
  a quotient divided through by an exponential in it (or its square root);
- series: Taylor at 0 and the expansion at infinity in each variable, of
  elementary functions only;
- forms the caller knows (`alternatives`: the forward as written, the
  derivatives of the forward's good forms), and the families again from
  the best of those.

Candidates are evaluated by numpy, the registered functions by their numpy
or scipy implementations (rulegen.derive.functions: `numpy_name`).  The best
candidate may then be joined with another by regimes: a `Piecewise` on
|variable| below or above a threshold found by measurement, or on a
variable's sign, tried from the three best forms.  Each branch is evaluated
at a point of its own region where it is not taken (the double-`where`), so
that a branch which is nan where it is not taken cannot make a higher
derivative nan.

The form as derived stays unless a candidate is measurably better; ties go
to the one with fewer operations.  An expression already within `GOOD_BITS`
at a few screening points (float32 against float64, and mpmath where
float64 is exactly 0) is not searched at all.

The result is a pure function of the expression and its sampling: points
are seeded, and the work is bounded by sizes, never by time (the machine's
load would then decide which searches finish).  An expression larger than
`SEARCH_OPS` operations or in more than `SEARCH_SYMBOLS` variables is kept
as derived, a family is skipped above its own bound, at most
`CANDIDATES_PER_EXPRESSION` candidates are measured per expression and at
most `SEARCHES_PER_RULE` expressions per rule (rulegen.derive.partials).  The derive
stage's time limit stays the one guard against a sympy step that hangs:
it fails the build at the rule, it does not keep another form.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import mpmath
import numpy as np
import sympy as sp
from sympy.codegen.cfunctions import expm1, log1p

from rulegen.derive.expr import lambdified
from rulegen.derive.forms import canonical
from rulegen.derive.functions import REGISTRY, binade, divided, sigmoid
from rulegen.derive.measure import (
    bits_of_error,
    exact_value,
    initial_precision,
    probe_points,
    sample_floats,
    to_floats,
    value_at,
    with_probes,
)
from rulegen.spec.rules import Domain

#: Points per dtype at which candidates are compared, and the float32 points at which an expression is screened.
SEARCH_POINTS = 32
SCREEN_POINTS = 256
#: Mean bits of error (in each dtype) below which an expression is not searched.
GOOD_BITS = 0.5
#: A candidate replaces the derived form only when it saves at least this many bits (float64 + float32 means).
MARGIN_BITS = 0.5
#: Mean bits (per dtype) within which two forms measure alike.
TIE_BITS = 0.125
#: Work limits, in place of time limits, so that what is chosen cannot depend on the machine's load.  Operations
#: (`sp.count_ops`) and variables above which an expression is not searched; operations above which the costlier
#: families (factoring, series) are skipped, and variables above which series are (sympy's series in one variable
#: of an expression in two costs ten times that in one); candidates measured per expression; expressions searched
#: per rule.
SEARCH_OPS = 60
SEARCH_SYMBOLS = 3
FACTOR_OPS = 40
SERIES_OPS = 30
SERIES_SYMBOLS = 1
CANDIDATES_PER_EXPRESSION = 24
CANDIDATES_PER_ALTERNATIVE = 12
SEARCHES_PER_RULE = 16
#: Terms of each series expansion.
SERIES_ORDER = 8
#: Points per dtype and side drawn between two sampled magnitudes to place a regime's threshold.
REFINE_POINTS = 24
#: Splits into regimes, at most, and the bits each must save: a `where` costs a pass over memory.
REGIME_SPLITS = 1
#: Forms (the best, then the next by score) from which a regime split is tried.
REGIME_STARTS = 3
REGIME_MARGIN_BITS = 1.0

_DTYPES = (np.float64, np.float32)


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
    #: The measured forms without regimes within RUNNER_UP_BITS of the chosen one, best first (the chosen one, or
    #: the branches it joins, among them): a derivative of each is a candidate for the derivative of this expression
    #: (rulegen.derive.partials), whose own form may cancel where theirs do not.
    good_forms: tuple[sp.Expr, ...] = ()

    @property
    def changed(self) -> bool:
        return self.chosen != self.derived

    @property
    def more_accurate(self) -> bool:
        """Whether the chosen form measured better than the derived one, not merely as good and shorter."""
        return self.changed and sum(self.bits_after) <= sum(self.bits_before) - MARGIN_BITS


@dataclass(frozen=True)
class Sampling:
    """Where an expression's variables are sampled: one domain per variable, and a joint condition (or None)."""

    domains: tuple[tuple[sp.Symbol, Domain], ...]
    condition: sp.Expr | None = None

    @property
    def variables(self) -> tuple[sp.Symbol, ...]:
        return tuple(s for s, _ in self.domains)


# ---------------------------------------------------------------- sympy steps


def _attempt(make: Callable[[], sp.Expr | None]) -> sp.Expr | None:
    """`make()`, or None where sympy fails on it (deterministically: no step is timed)."""
    try:
        return make()
    except (Exception, RecursionError):
        return None


# ---------------------------------------------------------------- the points and their exact values


@dataclass(frozen=True)
class _Points:
    """Sampled points of one dtype, one array per variable, and the expression's correctly rounded values there."""

    dtype: Any
    columns: tuple[np.ndarray, ...]
    exact: np.ndarray

    def __len__(self) -> int:
        return len(self.exact)


@functools.lru_cache(maxsize=256)
def _mpmath_function(expr: sp.Expr, variables: tuple[sp.Symbol, ...]) -> Callable[..., Any]:
    """`expr` as an mpmath function: the exact reference of the screen, the samples and the regimes' refinement."""
    from rulegen.derive.functions import MPMATH_IMPLEMENTATIONS

    return lambdified(variables, expr, modules=[dict(MPMATH_IMPLEMENTATIONS), "mpmath"])


def _sample(expr: sp.Expr, sampling: Sampling, count: int, seed: int, dtype: Any) -> _Points:
    variables = sampling.variables
    reference = _mpmath_function(expr, tuple(variables))
    condition = sampling.condition and lambdified(variables, sampling.condition, modules="numpy")
    rng = np.random.default_rng([seed, np.dtype(dtype).itemsize, count])
    which = 0 if np.dtype(dtype) == np.float64 else 1
    kept: list[list[float]] = [[] for _ in variables]
    values: list[float] = []
    wanted = count
    for attempt in range(4):
        with np.errstate(over="ignore"):  # a bound beyond float32's range is its largest float
            drawn = [sample_floats(domain, count, rng, dtype) for _, domain in sampling.domains]
        if attempt == 0:
            drawn = _with_probes(drawn, sampling, dtype)
            wanted = count + len(drawn[0]) - count
        if condition is not None:
            with np.errstate(all="ignore"):
                keep = np.broadcast_to(np.asarray(condition(*drawn)) > 0.5, drawn[0].shape)
            drawn = [d[keep] for d in drawn]
        growing = _growth_arguments(expr, tuple(variables))
        far = np.zeros(len(drawn[0]) if drawn else 0, dtype=bool)
        if growing is not None:
            with np.errstate(all="ignore"):
                reach = np.broadcast_to(np.asarray(growing(*drawn), dtype=np.float64), drawn[0].shape)
            far = reach > GROWTH_ARGUMENT_LIMIT
        for j in range(len(drawn[0]) if drawn else 0):
            point = [float(d[j]) for d in drawn]
            value = _underflowed(expr, tuple(variables), point) if far[j] else _exact(reference, point)
            if value is None:
                continue
            for column, x in zip(kept, point, strict=True):
                column.append(x)
            values.append(value[which])
            if len(values) == wanted:
                break
        if len(values) == wanted:
            break
    columns = tuple(np.asarray(c, dtype=dtype) for c in kept)
    return _Points(dtype, columns, np.asarray(values, dtype=np.float64))


#: The largest |u| of exp(u) (expm1, sinh, cosh) at which a sampled point's exact value is computed: past it
#: mpmath takes a second per exp(1e600) at the thousands of bits such points need, and a point is kept only
#: where an interval shows the value is 0 in every float (`_underflowed`).
GROWTH_ARGUMENT_LIMIT = 1e4
#: How far below 1 (log2) that interval must lie: float64's least subnormal is 2**-1074.
_UNDERFLOW_BITS = 1200


#: Functions whose interval extensions mpmath has (or that are written with them): what `_underflowed` bounds.
_INTERVAL_FUNCTIONS: dict[type, Callable[..., Any]] = {
    sp.exp: mpmath.iv.exp,
    sp.log: mpmath.iv.log,
    sp.sin: mpmath.iv.sin,
    sp.cos: mpmath.iv.cos,
    expm1: lambda a: mpmath.iv.exp(a) - 1,
    log1p: lambda a: mpmath.iv.log(1 + a),
    sp.sinh: lambda a: (mpmath.iv.exp(a) - mpmath.iv.exp(-a)) / 2,
    sp.cosh: lambda a: (mpmath.iv.exp(a) + mpmath.iv.exp(-a)) / 2,
}


@functools.lru_cache(maxsize=256)
def _interval_function(expr: sp.Expr, variables: tuple[sp.Symbol, ...]) -> Callable[..., Any] | None:
    """`expr` in mpmath's interval arithmetic; None where it calls a function with no interval extension here."""
    if not all(type(f) in _INTERVAL_FUNCTIONS for f in expr.atoms(sp.Function)):
        return None
    names = {f.__name__: g for f, g in _INTERVAL_FUNCTIONS.items()}
    return lambdified(variables, expr, modules=[{**names, "mpf": mpmath.iv.mpf, "pi": mpmath.iv.pi}, "mpmath"])


def _underflowed(expr: sp.Expr, variables: tuple[sp.Symbol, ...], point: Sequence[float]) -> tuple[float, float] | None:
    """(0.0, 0.0) where `expr` at `point` lies, by interval arithmetic, within +-2**-_UNDERFLOW_BITS; else None.

    Past GROWTH_ARGUMENT_LIMIT an exact value costs a second, but a value that underflows every float by a wide
    margin needs no correct rounding: x exp(-x**2) at 1e160 is 0, and a form of its derivative that is inf * 0 =
    nan there (where autodiff computes 0) must be measured as the failure it is.  An interval, not a value at a
    moderate precision: exp(x + y) / (exp(x) exp(y)) at x = 1e234 is 1, and 512 bits put it below 2**-1200.
    """
    fn = _interval_function(expr, variables)
    if fn is None:
        return None
    saved, mpmath.iv.prec = mpmath.iv.prec, 256
    try:
        value = fn(*[mpmath.iv.mpf(p) for p in point])
    except Exception:
        return None
    finally:
        mpmath.iv.prec = saved
    if not isinstance(value, mpmath.iv.mpf):
        return None
    low, high = value.a, value.b
    tiny = mpmath.mpf(2) ** -_UNDERFLOW_BITS
    if not (mpmath.isfinite(low) and mpmath.isfinite(high)) or max(abs(low), abs(high)) >= tiny:
        return None
    return 0.0, 0.0  # the measure counts -0 and 0 alike


_GROWING = (sp.exp, expm1, sp.sinh, sp.cosh)


@functools.lru_cache(maxsize=256)
def _growth_arguments(expr: sp.Expr, variables: tuple[sp.Symbol, ...]) -> Callable[..., Any] | None:
    """numpy's largest |u| over the exponentials exp(u) in `expr` (nan counts as past any limit); None if none."""
    arguments = sorted({f.args[0] for f in expr.atoms(*_GROWING)}, key=sp.default_sort_key)
    if not arguments:
        return None
    reach = _numpy_function(sp.Tuple(*arguments), variables)
    if reach is None:
        return None

    def largest(*columns: np.ndarray) -> np.ndarray:
        found = np.abs(np.asarray(np.broadcast_arrays(*reach(*columns)), dtype=np.float64))
        return np.where(np.isnan(found), np.inf, found).max(axis=0)

    return largest


def _looks_accurate(expr: sp.Expr, sampling: Sampling, seed: int) -> bool:
    """Whether float32 evaluation is within GOOD_BITS of float64 at float32 points: no mpmath, so cheap.

    float64 stands in for the exact value: an expression whose float32
    result keeps up with its float64 one neither cancels nor overflows
    where float32 is sampled, and the search is skipped.  Where the float64
    value is not finite the expression is searched, since no exact
    reference was asked.
    """
    variables = sampling.variables
    fn = _numpy_function(expr, tuple(variables))
    if fn is None:
        return True  # nothing numpy can evaluate can be measured either
    rng = np.random.default_rng([seed, SCREEN_POINTS])
    try:
        with np.errstate(over="ignore"):  # a bound beyond float32's range is its largest float
            columns = [sample_floats(domain, SCREEN_POINTS, rng, np.float32) for _, domain in sampling.domains]
    except ValueError:
        return True
    # The probes' moderate magnitudes too, judged apart: drawn over every binade, few points land where erf(x)
    # rounds to -1 in float32 and not in float64 (gelu's 1 + erf(x/sqrt(2)) at x = -5.5 loses 18 bits), and the
    # mean over 256 drawn points hid them.  The other variables are held at the first drawn point.
    domains = [d for _, d in sampling.domains]
    probes = probe_points([c[:1] for c in columns], domains, _magnitudes(np.float32), np.float32)
    return _screened(expr, fn, sampling, columns) and _screened(expr, fn, sampling, probes)


def _screened(expr: sp.Expr, fn: Callable[..., Any], sampling: Sampling, columns: list[np.ndarray]) -> bool:
    """Whether float32 keeps up with float64 at the points `columns`, on the mean (see `_looks_accurate`)."""
    variables = sampling.variables
    if sampling.condition is not None:
        holds = _numpy_function(sampling.condition, tuple(variables))
        if holds is None:
            return True
        with np.errstate(all="ignore"):
            keep = np.broadcast_to(np.asarray(holds(*columns)) > 0.5, columns[0].shape)
        columns = [c[keep] for c in columns]
    try:
        with np.errstate(all="ignore"):
            wide = np.asarray(fn(*[c.astype(np.float64) for c in columns]), dtype=np.float64)
            narrow = np.asarray(fn(*columns), dtype=np.float32)
    except Exception:
        return True
    wide, narrow = np.broadcast_arrays(wide, narrow)
    if not wide.size:
        return True
    with np.errstate(all="ignore"):
        reference = wide.astype(np.float32)
    if np.isnan(wide).any() and not np.isnan(wide).all():
        return False  # nan inside the domain: 0/0 or inf - inf, which a rewrite may avoid
    finite = np.isfinite(reference) & np.isfinite(wide)
    if wide.shape == columns[0].shape and _zero_where_not(
        expr, variables, [c[finite] for c in columns], wide[finite] == 0
    ):
        return False
    bits = bits_of_error(narrow[finite], reference[finite], np.float32)
    return bool(bits.size == 0 or np.mean(bits) <= GOOD_BITS)


#: Points where float64 gives an exact 0 that the screen asks mpmath about.
ZERO_PROBES = 8


def _zero_where_not(
    expr: sp.Expr, variables: Sequence[sp.Symbol], columns: Sequence[np.ndarray], zero: np.ndarray
) -> bool:
    """Whether float64's exact 0 at some of the points is, correctly rounded, no 0: a difference that cancels
    completely in float32 and float64 alike (log1p(N) - log(N) past N = 1e16, which is 1/N), where float64
    cannot stand in for the exact value.  One mpmath evaluation at each of the first ZERO_PROBES such points."""
    where = np.flatnonzero(zero)
    if not where.size:
        return False
    # The smallest inputs first (a total cancellation begins where the inputs are moderate: sigmoid(x) written as
    # 1 - 1/(exp(x) + 1) is 0 in float64 from x = -37, truly 0 only past -745), then some spread over the rest.
    magnitude = np.max(np.abs(np.stack([c[where].astype(np.float64) for c in columns])), axis=0)
    ordered = where[np.argsort(magnitude, kind="stable")]
    spread = ordered[np.linspace(0, len(ordered) - 1, ZERO_PROBES // 2).astype(int)]
    where = np.asarray(list(dict.fromkeys([*ordered[: ZERO_PROBES // 2], *spread])))
    reference = _attempt(lambda: _mpmath_function(expr, tuple(variables)))
    if reference is None:
        return False
    for j in where:
        point = [float(c[j]) for c in columns]
        value = value_at(reference, point, initial_precision(point) + 64)
        if value is not None and to_floats(value)[0] != 0:
            return True
    return False


#: Magnitudes every search also measures at, beside the points drawn over the bit patterns: those put about
#: one point in a thousand between 1 and 10, where most inputs are, and a series can be wrong there unseen.
PROBES = tuple(1.37 * 2.0**k for k in range(-8, 9))


#: Fractions of the dtype's largest float probed too: 2x + 1 and x**2 overflow there, and a quotient of the two is
#: nan where it should be 0; drawn points reach the top binade once in a thousand.
TOP_PROBES = (0.7, 0.2)


def _magnitudes(dtype: Any) -> tuple[float, ...]:
    """The probe magnitudes in `dtype`: PROBES, and TOP_PROBES of its largest float."""
    return (*PROBES, *(f * float(np.finfo(dtype).max) for f in TOP_PROBES))


def _with_probes(drawn: list[np.ndarray], sampling: Sampling, dtype: Any) -> list[np.ndarray]:
    """`drawn` with, per variable, each probe magnitude of either sign the domain holds; the others as drawn."""
    return with_probes(drawn, [domain for _, domain in sampling.domains], _magnitudes(dtype), dtype)


def _exact(fn: Callable[..., Any], point: Sequence[float]) -> tuple[float, float] | None:
    """`fn` at `point` rounded to float64 and float32, in one mpmath evaluation: None where not a finite real.

    measure.exact_value doubles the precision until two evaluations agree,
    four times the cost; here one evaluation 64 bits wider than its first
    is enough to rank candidates, which `rulegen accuracy` then measures.
    """
    value = value_at(fn, point, initial_precision(point) + 64)
    if value is None:
        return None
    # An exact zero may be a difference whose every bit cancelled at this precision: that one is raised.
    return to_floats(value) if value else exact_value(fn, point)


@functools.lru_cache(maxsize=1024)
def _numpy_function(expr: sp.Expr, variables: tuple[sp.Symbol, ...]) -> Callable[..., Any] | None:
    try:
        return lambdified(variables, expr, modules=[_numpy_implementations(), "numpy"])
    except Exception:
        return None


@functools.cache
def _numpy_implementations() -> dict[str, Callable[..., Any]]:
    """log1p, expm1 and every registered function with a numpy or scipy implementation, by the name lambdify prints."""
    import importlib

    from rulegen.derive.functions import NUMPY_IMPLEMENTATIONS

    found: dict[str, Callable[..., Any]] = {"log1p": np.log1p, "expm1": np.expm1}
    for name, dotted in NUMPY_IMPLEMENTATIONS.items():
        module, _, attribute = dotted.rpartition(".")
        found[name] = getattr(importlib.import_module(module), attribute)
    return found


def _bits(expr: sp.Expr, variables: Sequence[sp.Symbol], points: _Points) -> np.ndarray | None:
    """Bits of error of `expr` evaluated by numpy in the points' dtype; None where numpy cannot evaluate it."""
    fn = _numpy_function(expr, tuple(variables))
    if fn is None:
        return None
    try:
        with np.errstate(all="ignore"):
            result = np.asarray(fn(*points.columns))
    except Exception:
        return None
    if np.iscomplexobj(result):
        return None  # a candidate that leaves the reals (a root of a negative number) is no candidate
    with np.errstate(over="ignore"):  # a float64 result past float32's range is inf there, as float32 code computes
        got = np.broadcast_to(result.astype(points.dtype), points.exact.shape)
    return bits_of_error(got, points.exact, points.dtype)


@dataclass(frozen=True)
class _Measured:
    """A candidate, the family it comes from, and its bits of error at every point of each dtype."""

    expr: sp.Expr
    family: str
    bits: tuple[np.ndarray, ...]
    #: A form joined by regimes: the measured forms it joins (unfed).
    branches: tuple[_Measured, ...] = ()

    @property
    def means(self) -> tuple[float, ...]:
        return tuple(float(np.mean(b)) if b.size else 0.0 for b in self.bits)

    @property
    def score(self) -> float:
        return sum(self.means)

    @functools.cached_property
    def ops(self) -> int:
        return int(sp.count_ops(self.expr))


def _lineage(m: _Measured) -> str:
    """The family of the form a candidate reassociates (its own where it reassociates none)."""
    return m.family.removesuffix(", reassociated")


def _measure(expr: sp.Expr, family: str, variables: Sequence[sp.Symbol], points: Sequence[_Points]) -> _Measured | None:
    found = [_bits(expr, variables, p) for p in points]
    if any(b is None for b in found):
        return None
    return _Measured(expr, family, tuple(b for b in found if b is not None))


# ---------------------------------------------------------------- rewrite families


def _tidy(expr: sp.Expr) -> sp.Expr:
    """A difference of arguments brought to its simplest: (x + e) - x is e."""
    simpler = sp.cancel(sp.expand(expr))
    return min((simpler, sp.factor(simpler)), key=sp.count_ops)


def _root_difference(a: sp.Expr, b: sp.Expr, exponent: sp.Rational) -> sp.Expr | None:
    """a**e - b**e without cancellation, for e = 1/n or -1/n: (a - b) over the sum that rationalises it."""
    if exponent.p == -1:
        # a**(-1/n) - b**(-1/n) = (b**(1/n) - a**(1/n)) / (a*b)**(1/n)
        inner = _root_difference(b, a, -exponent)
        return None if inner is None else inner * a**exponent * b**exponent
    if exponent.p != 1 or exponent.q > 4:
        return None
    n = exponent.q
    total = sp.Add(*(a ** sp.Rational(k, n) * b ** sp.Rational(n - 1 - k, n) for k in range(n)))
    return _tidy(a - b) / total


#: f(a) - f(b) for one-argument functions, as identities that leave no difference of two close values.
_DIFFERENCES: Mapping[type, Callable[[sp.Expr, sp.Expr], sp.Expr]] = {
    sp.sin: lambda a, b: 2 * sp.cos(_tidy((a + b) / 2)) * sp.sin(_tidy((a - b) / 2)),
    sp.cos: lambda a, b: -2 * sp.sin(_tidy((a + b) / 2)) * sp.sin(_tidy((a - b) / 2)),
    sp.tan: lambda a, b: sp.sin(_tidy(a - b)) / (sp.cos(a) * sp.cos(b)),
    sp.atan: lambda a, b: sp.atan(_tidy(a - b) / _tidy(1 + a * b)),
    sp.log: lambda a, b: log1p(_tidy((a - b) / b)),
    log1p: lambda a, b: log1p(_tidy((a - b) / (1 + b))),
    sp.exp: lambda a, b: sp.exp(b) * expm1(_tidy(a - b)),
}


def _power_difference(a: sp.Expr, b: sp.Expr, exponent: sp.Expr) -> sp.Expr:
    """a**p - b**p for an exponent p that is no integer: rationalised where p is 1/n or -1/n, else
    b**p * expm1(p * log1p((a - b)/b)); nothing cancels in either."""
    if exponent.is_Rational:
        rationalised = _root_difference(a, b, exponent)
        if rationalised is not None:
            return rationalised
    return b**exponent * expm1(exponent * log1p(_tidy((a - b) / b)))


def _difference(f: sp.Expr, g: sp.Expr) -> sp.Expr | None:
    """f - g rewritten without the cancellation of two like functions, or None where no identity applies."""
    if f.is_Pow and g.is_Pow:
        if f.exp != g.exp or f.exp.is_Integer:
            return None
        return _power_difference(f.base, g.base, f.exp)
    identity = _DIFFERENCES.get(f.func)
    if identity is None or f.func != g.func or len(f.args) != 1:
        return None
    return identity(f.args[0], g.args[0])


def _minus_constant(f: sp.Expr, c: sp.Expr) -> sp.Expr | None:
    """f - c for a function f and c = 1 or -1 where the difference cancels at some argument."""
    if isinstance(f, sp.cos) and c in (1, -1):
        # cos(u) - 1 cancels near u = 0, cos(u) + 1 near pi.
        half = f.args[0] / 2
        return -2 * sp.sin(half) ** 2 if c == 1 else 2 * sp.cos(half) ** 2
    if isinstance(f, sp.tanh) and c in (1, -1):
        # tanh(u) -+ 1 rounds to 0 past |u| = 19 (float64) on the side where tanh(u) nears -+1; tanh(u) is
        # 2 sigmoid(2u) - 1.
        return -c * 2 * sigmoid(-c * 2 * f.args[0])
    if isinstance(f, sp.exp) and c == 1:
        return expm1(f.args[0])
    if isinstance(f, sigmoid) and c == 1:
        # 1 - sigmoid(u) rounds to 0 past u = 37 (float64), where sigmoid(-u) keeps its digits.
        return -sigmoid(-f.args[0])
    if f.is_Pow and f.exp == 2 and isinstance(f.base, sp.tanh) and c == 1:
        # 1 - tanh(u)**2 loses log2(1 / (1 - tanh(u)**2)) bits (13 at u = 5) and is 0 past 19; tanh(u) is
        # 2 sigmoid(2u) - 1.  Not 1 / cosh(u)**2: its derivative is 0 * inf = nan where cosh overflows.
        u = f.base.args[0]
        return -4 * sigmoid(2 * u) * sigmoid(-2 * u)
    if f.is_Pow and not f.exp.is_Integer and c == 1:
        return _power_difference(f.base, sp.S.One, f.exp)
    return None


def _split_term(term: sp.Expr) -> list[tuple[sp.Expr, sp.Expr]]:
    """Each (coefficient, function) factorisation of a term, one per factor that is a function or a root."""
    factors = sp.Mul.make_args(term)
    found = []
    for k, f in enumerate(factors):
        if (
            isinstance(f, sp.Function)
            or (f.is_Pow and not f.exp.is_Integer and f.base.free_symbols)
            or (f.is_Pow and f.exp == 2 and isinstance(f.base, sp.tanh))
        ):
            found.append((sp.Mul(*(factors[:k] + factors[k + 1 :])), f))
    return found


def _rewrite_sum(total: sp.Expr) -> sp.Expr:
    """The first pair of terms of a sum that is a difference of like functions (or of one and its constant), joined."""
    terms = list(total.args)
    for i, t in enumerate(terms):
        for coefficient, f in _split_term(t):
            for j, u in enumerate(terms):
                if j == i:
                    continue
                joined = None
                for other_coefficient, g in _split_term(u):
                    if sp.expand(coefficient + other_coefficient) == 0 and g != f:
                        joined = _difference(f, g)
                        if joined is not None:
                            break
                if joined is None and u.is_number and sp.expand(u + coefficient) == 0:
                    joined = _minus_constant(f, sp.S.One)
                if joined is None and u.is_number and sp.expand(u - coefficient) == 0:
                    joined = _minus_constant(f, sp.S.NegativeOne)
                if joined is not None:
                    rest = [v for k, v in enumerate(terms) if k not in (i, j)]
                    return sp.Add(coefficient * joined, *rest)
    return total


def _identities(expr: sp.Expr) -> sp.Expr:
    """Every sum's cancelling pairs joined by the identities above, bottom up, twice (a join can make another)."""
    for _ in range(2):
        expr = expr.replace(lambda e: e.is_Add, _rewrite_sum)
    return expr


def _scaled(expr: sp.Expr, v: sp.Symbol, *, factored: bool = True) -> sp.Expr:
    """Each polynomial in `v` (of degree 1 or more, not a monomial) as v**degree * (the polynomial / v**degree).

    `factored`: of `expr` factored first (a sum of quotients over one
    denominator); else of the polynomials as they stand in it.
    """

    def scale(e: sp.Expr) -> sp.Expr:
        try:
            poly = sp.Poly(e, v)
        except sp.PolificationFailed:
            return e
        degree = poly.degree()
        if degree < 1 or len(poly.terms()) < 2:
            return e
        return v**degree * sp.expand(e / v**degree)

    return (sp.factor(expr) if factored else expr).replace(lambda e: e.is_Add and e.has(v), scale)


#: Functions whose series sympy expands in closed form quickly; a series of the registered special functions
#: (ndtri, log_ndtr, ...) goes through their derivatives term by term and costs a minute.
_ELEMENTARY = (sp.exp, sp.log, log1p, expm1, sp.sin, sp.cos, sp.tan, sp.atan, sp.sinh, sp.cosh, sp.tanh, sp.asin)


def _elementary(expr: sp.Expr) -> bool:
    return all(isinstance(f, _ELEMENTARY) for f in expr.atoms(sp.Function))


def _series(expr: sp.Expr, v: sp.Symbol, point: sp.Expr) -> sp.Expr | None:
    expansion = sp.series(expr, v, point, SERIES_ORDER)
    result = expansion.removeO()
    if result.has(sp.Order, sp.Subs, sp.Derivative) or result == 0:
        return None
    return sp.expand(result)


def _plain(expr: sp.Expr) -> sp.Expr:
    """`expr` with log1p and expm1 written out, so that a difference of logs (or exponentials) shows as one."""
    return expr.replace(lambda e: isinstance(e, log1p), lambda e: sp.log(1 + e.args[0])).replace(
        lambda e: isinstance(e, expm1), lambda e: sp.exp(e.args[0]) - 1
    )


def _angles_added(expr: sp.Expr) -> sp.Expr:
    """Each sine, cosine and tangent of a sum in several variables as the angle-addition formula's products.

    cos(x + e) computes x + e rounded, which for |x| far above |e| loses e
    and every bit of the result: cos(x)cos(e) - sin(x)sin(e) reduces each
    argument exactly.
    """

    def several(e: sp.Expr) -> bool:
        return (
            isinstance(e, (sp.sin, sp.cos, sp.tan))
            and e.args[0].is_Add
            and len({frozenset(t.free_symbols) for t in e.args[0].args if t.free_symbols}) > 1
        )

    return expr.replace(several, lambda e: sp.expand_trig(e))


def _conjugate(total: sp.Expr) -> sp.Expr:
    """A sum with a square root, c*sqrt(A) + R, as (c**2 A - R**2) / (c*sqrt(A) - R): the difference cancels in closed
    form (-b + sqrt(b**2 - 4ac) is -4ac / (b + sqrt(b**2 - 4ac)))."""
    for term in total.args:
        roots = [f for f in sp.Mul.make_args(term) if _has_root(f)]
        if len(roots) != 1:
            continue
        c = term / roots[0]
        rest = total - term
        numerator = _tidy(c**2 * roots[0].base - rest**2)
        return numerator / (term - rest)
    return total


def _has_root(term: sp.Expr) -> bool:
    return any(f.is_Pow and f.exp == sp.S.Half and f.base.free_symbols for f in sp.Mul.make_args(term))


def _conjugated(expr: sp.Expr) -> sp.Expr:
    return expr.replace(lambda e: e.is_Add and any(_has_root(t) for t in e.args), _conjugate)


def _exp_scaled(expr: sp.Expr) -> Iterator[sp.Expr]:
    """A quotient with exponentials, its numerator and denominator divided by each exp(u) in it, or by its square
    root, which a root in the denominator takes inside: exp(x)/(exp(x) - 1) is 1/(1 - exp(-x)), and
    exp(x)/sqrt(exp(x) + 1) is exp(x/2)/sqrt(1 + exp(-x)), neither overflowing to inf/inf."""
    numerator, denominator = sp.fraction(sp.together(_plain(expr)))
    if denominator == 1:
        return
    for e in sorted(expr.atoms(sp.exp), key=sp.default_sort_key)[:2]:
        for power in (sp.S.One, sp.S.Half):
            scale = sp.exp(-power * e.args[0])
            top = sp.powsimp(sp.expand(numerator * scale))
            yield canonical(top / _times_into_root(denominator, scale))


def _partial_fractions(expr: sp.Expr) -> Iterator[sp.Expr]:
    """A rational function of exponentials as partial fractions in each exp(u), each fraction divided through by
    the exponential above its line: eps (exp((a+b) eps) - 1)/((exp(a eps) - 1)(exp(b eps) - 1)) is
    eps/(exp(a eps) - 1) + eps exp(b eps)/(exp(b eps) - 1), which is -eps/expm1(-b eps) + eps/expm1(a eps): no
    product of exponentials overflows, and each quotient is in range wherever the whole is."""
    plain = _plain(expr).replace(lambda e: isinstance(e, sp.exp), lambda e: sp.exp(sp.expand(e.args[0])))
    plain = sp.expand_power_exp(plain)
    atoms = sorted(plain.atoms(sp.exp), key=sp.default_sort_key)
    if not atoms or len(atoms) > 3:
        return
    x = sp.Dummy("x")
    for atom in atoms:
        rational = plain.xreplace({atom: x})
        if not rational.is_rational_function(x) or not sp.fraction(sp.together(rational))[1].has(x):
            continue
        fractions = sp.apart(rational, x).xreplace({x: atom})
        yield canonical(sp.Add(*(_divided_through(t) for t in sp.Add.make_args(fractions))))


def _divided_through(term: sp.Expr) -> sp.Expr:
    """`term`, a quotient with an exponential above and below its line, divided through by the one above."""
    numerator, denominator = sp.fraction(term)
    above = sorted(numerator.atoms(sp.exp) & denominator.atoms(sp.exp), key=sp.default_sort_key)
    if not above:
        return term
    scale = sp.exp(-above[0].args[0])
    return sp.powsimp(sp.expand(numerator * scale)) / sp.powsimp(sp.expand(denominator * scale))


def _times_into_root(product: sp.Expr, scale: sp.Expr) -> sp.Expr:
    """`product * scale` for a positive `scale`, taken into its first square root as scale**2 where it has one."""
    factors = list(sp.Mul.make_args(product))
    for k, f in enumerate(factors):
        if f.is_Pow and f.exp == sp.S.Half:
            factors[k] = sp.sqrt(sp.powsimp(sp.expand(f.base * scale**2)))
            return sp.Mul(*factors)
    return sp.powsimp(sp.expand(product * scale))


def _bases(expr: sp.Expr, ops: int) -> Iterator[tuple[str, sp.Expr]]:
    """(family, form) for each algebraic form of `expr`, which the identities then start from as well."""
    plain = _attempt(functools.partial(_plain, expr))
    algebraic: dict[str, Callable[[], sp.Expr | None]] = {
        # The fused forms (softplus, sigmoid, log1p, expm1) of a partial the rule states, which the planner's own
        # pass would write: measured here, so that the search's choice is made knowing them.
        "canonical": lambda: canonical(expr),
        "cancel": lambda: sp.cancel(expr),
        "together": lambda: sp.together(expr),
        "factor": lambda: sp.factor(expr),
        "expand": lambda: sp.expand(expr),
        # log1p and expm1 written out: (exp(2x) - 1)/(exp(x) - 1) cancels to exp(x) + 1, the expm1 forms do not.
        "cancel written out": lambda: _inside(sp.cancel, plain) if plain is not None and plain != expr else None,
        "angle addition": lambda: _angles_added(expr),
    }
    if ops > FACTOR_OPS:
        algebraic.pop("factor")
        algebraic.pop("expand")
    if plain is not None and plain != expr:
        yield "written out", plain
    for family, make in algebraic.items():
        found = _attempt(make)
        if found is not None:
            yield family, found
            if family == "cancel written out":
                yield family, canonical(found)


def _inside(rewrite: Callable[[sp.Expr], sp.Expr], expr: sp.Expr) -> sp.Expr:
    """`rewrite` of `expr` and of every function's argument and root's base in it."""
    expr = expr.replace(
        lambda e: (isinstance(e, sp.Function) and len(e.args) == 1) or (e.is_Pow and not e.exp.is_Integer),
        lambda e: e.func(rewrite(e.args[0]), *e.args[1:]),
    )
    return rewrite(expr)


def _identity_forms(base: sp.Expr) -> Iterator[sp.Expr]:
    joined = _attempt(functools.partial(_identities, base))
    if joined is None:
        return
    yield joined
    yield canonical(joined)
    added = _attempt(functools.partial(_angles_added, joined))
    if added is not None:
        yield added
    if not joined.has(sp.Function) and sp.count_ops(joined) <= FACTOR_OPS:
        tidied = _attempt(functools.partial(_factored, joined))
        if tidied is not None:
            yield tidied


def _candidates(expr: sp.Expr, variables: Sequence[sp.Symbol]) -> Iterator[tuple[str, sp.Expr]]:
    """(family, candidate) for every rewrite of `expr` the families make, in order of cost.

    Factoring and series are skipped above their bounds on operations: their
    cost grows fastest with the expression.
    """
    ops = sp.count_ops(expr)
    bases = [expr]
    for family, base in _bases(expr, ops):
        bases.append(base)
        yield family, base
    for base in bases:
        for joined in _identity_forms(base):
            yield "identities", joined
    conjugated = _attempt(functools.partial(_conjugated, expr))
    if conjugated is not None and conjugated != expr:
        yield "conjugate", conjugated
        for v in variables:
            # The sum under the root may overflow where the difference no longer cancels: b**2 - 4ac at |b| > 1e154.
            scaled = _attempt(functools.partial(_scaled, conjugated, v, factored=False))
            if scaled is not None:
                yield "conjugate, scaled", scaled
    yield from _exponential_forms(expr, ops)
    if ops <= FACTOR_OPS:
        for v in variables:
            scaled = _attempt(functools.partial(_scaled, expr, v))
            if scaled is not None:
                yield "scaling", scaled
    if ops <= SERIES_OPS and len(expr.free_symbols) <= SERIES_SYMBOLS and _elementary(expr):
        for v in variables:
            for point, family in ((sp.S.Zero, "series at 0"), (sp.oo, "series at infinity")):
                found = _attempt(functools.partial(_series, expr, v, point))
                if found is not None:
                    yield family, found


def _exponential_forms(expr: sp.Expr, ops: int) -> Iterator[tuple[str, sp.Expr]]:
    for scaled in _attempt(lambda: sp.Tuple(*_exp_scaled(expr))) or ():
        yield "exponential scaling", scaled
    if ops <= FACTOR_OPS:
        for fractions in _attempt(lambda: sp.Tuple(*_partial_fractions(expr))) or ():
            yield "partial fractions", fractions


def _factored(expr: sp.Expr) -> sp.Expr:
    return sp.factor(sp.cancel(expr))


# ---------------------------------------------------------------- reassociated products

#: How many of the best forms the reassociation starts from.
REASSOCIATED_STARTS = 3
#: A power above this is not split into factors to pair.
_PAIRED_POWER = 4


def _reassociations(expr: sp.Expr) -> Iterator[sp.Expr]:
    """`expr` with each quotient of products computed as a product of quotients, each factor below the line
    divided into one above it: tan(x)**2 (x - sin x) / (x - tan x)**2 as (tan(x) / (x - tan x))**2 (x - sin x),
    whose square never overflows where the quotient is in range.  Two pairings: the factors above in sympy's
    order and reversed."""
    if expr.has(sp.Piecewise):
        return
    for reverse in (False, True):
        found = _attempt(functools.partial(_each_product_paired, expr, reverse=reverse))
        if found is not None and found != expr:
            yield found


def _each_product_paired(expr: sp.Expr, *, reverse: bool) -> sp.Expr:
    return expr.replace(lambda e: e.is_Mul, functools.partial(_paired, reverse=reverse))


def _paired(product: sp.Expr, *, reverse: bool) -> sp.Expr:
    above: list[sp.Expr] = []
    below: list[sp.Expr] = []
    rest: list[sp.Expr] = []
    for factor in sp.Mul.make_args(product):
        base, exponent = factor.as_base_exp()
        if factor.is_number or not exponent.is_Integer or abs(exponent) > _PAIRED_POWER:
            rest.append(factor)
        elif exponent > 0:
            above += [base] * int(exponent)
        else:
            below += [base] * int(-exponent)
    if not below or len(below) + len(above) < 2:
        return product
    if reverse:
        above.reverse()
    # A power below beyond the factors above is divided into 1: 1/x**3 as (1/x)**3, in range where x**3 is not.
    below.sort(key=lambda b: -below.count(b))
    above += [sp.S.One] * sum(1 for b in below[len(above) :] if below.count(b) > 1)
    pairs = [divided(a, b) for a, b in zip(above, below, strict=False)]
    n = len(pairs)
    return sp.Mul(*rest, *pairs, *above[n:]) / sp.Mul(*below[n:])


# ---------------------------------------------------------------- scaling of homogeneous expressions


#: Points and decimal digits of the homogeneity test (scaling by 2 gives the degree, by 3 confirms it).
HOMOGENEITY_POINTS = 8
HOMOGENEITY_DIGITS = 40


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
    HOMOGENEITY_POINTS points of magnitude about 1 (of the sign each
    domain allows), in mpmath: a float evaluation of an expression that
    cancels scales by 3 only roughly.
    """
    variables = sampling.variables
    if len(variables) < 2:
        return []  # c x**k: nothing to scale
    fn = _mpmath_function(expr, tuple(variables))
    rng = np.random.default_rng(len(variables))
    signs = [
        rng.choice([-1.0, 1.0], HOMOGENEITY_POINTS)
        if d.lo < 0 < d.hi
        else np.full(HOMOGENEITY_POINTS, 1.0 if d.hi > 0 else -1.0)
        for _, d in sampling.domains
    ]
    magnitudes = 2.0 ** rng.uniform(-1, 1, (len(variables), HOMOGENEITY_POINTS))
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
    with mpmath.workdps(HOMOGENEITY_DIGITS):
        for point in points:
            try:
                values = [fn(*(mpmath.mpf(t) ** w * x for w, x in zip(weights, point, strict=True))) for t in (1, 2, 3)]
            except (ValueError, ZeroDivisionError, TypeError, OverflowError):
                continue
            if not all(isinstance(v, mpmath.mpf) and v != 0 and mpmath.isfinite(v) for v in values):
                continue
            degree = round(float(mpmath.log(abs(values[1] / values[0]), 2)))
            expected = mpmath.mpf(3) ** degree
            if abs(values[2] / values[0] - expected) > mpmath.mpf(10) ** (5 - HOMOGENEITY_DIGITS) * expected:
                return None
            degrees.add(degree)
    if len(degrees) != 1:
        return None
    return degrees.pop()


def _magnitude(inputs: Sequence[sp.Expr]) -> sp.Expr:
    return sp.Max(*(sp.Abs(x) for x in inputs)) if len(inputs) > 1 else sp.Abs(inputs[0])


def _rescaled(expr: sp.Expr, variables: Sequence[sp.Symbol], scalings: Sequence[_Homogeneity]) -> sp.Expr:
    """`expr` computed on its inputs scaled by powers of two (`binade`), one scaling after another, and the result
    scaled back in the reverse order: no square or product of the scaled inputs overflows or underflows where it
    matters, and no multiplication or division rounds.

    A scaling of all inputs at once divides them by the binade of their
    largest magnitude; one with weights of both signs brings the largest of
    each side to the same magnitude, t = sqrt(largest -1 / largest +1)
    (the quadratic's a and c to sqrt|ac|), for the joint scaling after it.
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
            scale = binade(_magnitude([x for x, w in zip(inputs, weights, strict=True) if w]))
            inputs = [divided(x, scale) if w else x for x, w in zip(inputs, weights, strict=True)]
            undo.append((scale, scaling.degree))
    if isinstance(expr, sp.Piecewise):
        # Each branch scaled, the regimes' conditions left on the inputs as they are: a threshold on |v| was
        # placed by the unscaled magnitudes, and sympy folds a condition on a selection into one on its pieces.
        return sp.Piecewise(*((_scaled_back(_substituted(e, variables, inputs), undo), c) for e, c in expr.args))
    return _scaled_back(_substituted(expr, variables, inputs), undo)


def _scaled_back(value: sp.Expr, undo: Sequence[tuple[sp.Expr, int]]) -> sp.Expr:
    """value * s**k for every (s, k) of `undo`, the last scaling's first, one exact step at a time: each passes
    through the expression's own value at the inputs scaled so far, where the product of the factors first could
    overflow."""
    for scale, k in reversed(undo):
        for _ in range(abs(k)):
            value = divided(value, scale) if k < 0 else divided(value, divided(1, scale))
    return value


def _substituted(expr: sp.Expr, variables: Sequence[sp.Symbol], inputs: Sequence[sp.Expr]) -> sp.Expr:
    return expr.xreplace(dict(zip(variables, inputs, strict=True)))


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
    # The expression as derived among the starts: scaled, the simplest form is often the best.
    ranked = sorted((m for m in pool if m is not best), key=lambda m: (m.family != "as derived", m.score))
    starts = [best, *ranked[:REGIME_STARTS]]
    scaled = [
        _measure(_rescaled(m.expr, variables, scalings), f"{m.family}, scaled", variables, points)
        for m in starts
        for scalings in options
    ]
    chosen = min((m for m in scaled if m is not None), key=lambda m: m.score, default=None)
    # The margin of a regime: the scaling costs a binade and a division per input, paid only for a bit.
    if chosen is None or chosen.score > best.score - REGIME_MARGIN_BITS:
        return best
    return dataclasses.replace(chosen, branches=best.branches)


# ---------------------------------------------------------------- regimes


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
    points, which can span many binades: here REFINE_POINTS more are drawn
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
                refined.append(_sample(outer, narrowed, REFINE_POINTS, int(rng.integers(1 << 30)), dtype))
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
    for _ in range(REGIME_SPLITS):
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
        if score > current.score - REGIME_MARGIN_BITS:
            break
        split = _refined(split, inner.expr, current.expr, sampling, points)
        joined = _joined(inner.expr, current.expr, split, domains[split.v], variables, points)
        measured = _measure(joined, f"regimes ({current.family} | {inner.family})", variables, points)
        if measured is None or measured.score > current.score - REGIME_MARGIN_BITS:
            break
        current = dataclasses.replace(measured, branches=(*current.branches, current, inner))
    return current


# ---------------------------------------------------------------- saturation


#: Where an input may be clamped, |v| at most, and how many of the search's forms that are not finite somewhere
#: are tried clamped.  The bounds are Python numbers in torch code, which torch refuses beside a tensor whose dtype
#: cannot hold them: within float16's range (65504), where every exponential has long saturated.
SATURATION_BOUNDS = (1e4, 1e2)
SATURATION_STARTS = 4
FLAT_POINTS = 4


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
    (FLAT_POINTS of each dtype at most): there the frameworks' derivative of a clamped form is 0, at every order."""
    derivative = _attempt(lambda: sp.diff(expr, v))
    if derivative is None:
        return False
    reference = _mpmath_function(derivative, tuple(variables))
    checked = 0
    for p in points:
        magnitudes = np.abs(p.columns[index].astype(np.float64))
        beyond = np.flatnonzero(magnitudes > bound)
        beyond = beyond[np.argsort(magnitudes[beyond])]
        for j in dict.fromkeys([*beyond[: FLAT_POINTS // 2], *beyond[-(FLAT_POINTS // 2) :]]):
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
    for m in broken[:SATURATION_STARTS]:
        for index, v in enumerate(variables):
            for bound in (b for b in SATURATION_BOUNDS if b < starts[id(m)][index]):
                candidate = _clamped(m.expr, v, domains[v], bound)
                measured = _measure(candidate, f"{m.family}, clamped at {bound:g}", variables, points)
                if measured is None or measured.score > least - MARGIN_BITS:
                    continue
                if _flat_beyond(m.expr, v, index, bound, variables, points) and _in_range_held(
                    m.expr, v, index, bound, variables, points
                ):
                    found.append(measured)
                    break
    return found


# ---------------------------------------------------------------- the search


#: Functions whose exact value takes unbounded time at some floats (mpmath's polygamma(1, x) far out on the
#: negative axis runs for minutes): an expression calling one is not sampled over the whole float line.
_UNBOUNDED = tuple(f.sympy for f in REGISTRY if f.refuses_large_numbers and isinstance(f.sympy, type))


def searchable(expr: sp.Expr, sampling: Sampling) -> bool:
    """Whether `expr` is searched at all: in the sampled variables, no Piecewise, within the work limits, and
    with an exact value in bounded time."""
    return (
        bool(sampling.variables)
        and len(sampling.variables) <= SEARCH_SYMBOLS
        and expr.free_symbols <= set(sampling.variables)
        and not expr.has(sp.Piecewise, *_UNBOUNDED)
        and sp.count_ops(expr) <= SEARCH_OPS
    )


def stabilise(
    expr: sp.Expr,
    sampling: Sampling,
    *,
    quantity: str = "",
    seed: int = 0,
    points: int = SEARCH_POINTS,
    alternatives: tuple[tuple[str, sp.Expr], ...] = (),
) -> Choice:
    """The form of `expr` with the least measured error, and the bits before and after.

    `expr` is its own reference: each candidate must equal it, and one that
    does not is as far off as its values are.  `alternatives` are (family,
    form) pairs measured before the rewrite families' own candidates: other
    forms of the same value that the caller knows (the forward as written, a
    derivative of another form of the forward).  Keeps `expr` where it is
    not `searchable`, where numpy cannot evaluate it, where no point has a
    finite value, or where nothing is measurably better.
    """
    unchanged = Choice(quantity, expr, expr, "as derived", (math.nan, math.nan), (math.nan, math.nan))
    if not searchable(expr, sampling):
        return unchanged
    key = (expr, sampling, seed, points, alternatives)
    found = _SEARCHED.get(key)
    if found is None:
        found = _search(expr, sampling, seed, points, alternatives)
        _SEARCHED[key] = found
    return Choice(quantity, *found)


#: Searches done in this process, by what decides them: an expression met again (a JVP's partial is the VJP's) is
#: searched once.
_SEARCHED: dict[tuple[Any, ...], tuple[Any, ...]] = {}

#: How far (sum of the dtypes' mean bits) behind the chosen form another good form may be, and how many are kept.
RUNNER_UP_BITS = 2.0
GOOD_FORMS = 4


def _search(
    expr: sp.Expr, sampling: Sampling, seed: int, count: int, alternatives: tuple[tuple[str, sp.Expr], ...]
) -> tuple[Any, ...]:
    """(derived, chosen, family, bits before, bits after, good forms) for `expr`."""
    variables = sampling.variables
    nothing = (expr, expr, "as derived", (math.nan, math.nan), (math.nan, math.nan))
    if _looks_accurate(expr, sampling, seed):
        return nothing
    search = [_sample(expr, sampling, count, seed + 1, dtype) for dtype in _DTYPES]
    derived = _measure(expr, "as derived", variables, search)
    if derived is None:
        return nothing
    pool = [derived]
    seen = {expr}

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

    measured_from(
        itertools.chain(alternatives, _candidates(expr, variables)), CANDIDATES_PER_EXPRESSION + len(alternatives)
    )
    # The families again from the best alternative, which may be a better start than the expression itself (the
    # derivative of a simpler form of the forward): its own budget.
    known = set(alternatives)
    start = min((m for m in pool if (m.family, m.expr) in known), key=lambda m: m.score, default=None)
    if start is not None and searchable(start.expr, sampling):
        found = _candidates(start.expr, variables)
        measured_from(((f"{start.family}, {family}", c) for family, c in found), CANDIDATES_PER_ALTERNATIVE)
    # Products reassociated in the best forms found: a family that rewrites what the others made.
    leaders = sorted(pool, key=lambda m: m.score)[:REASSOCIATED_STARTS]
    measured_from(
        ((f"{m.family}, reassociated", c) for m in leaders for c in _reassociations(m.expr)), REASSOCIATED_STARTS * 2
    )
    # Inputs clamped where forms overflow on the way to a limit they have reached.
    pool += _saturated(pool, sampling, search)
    # Least error first; within MARGIN_BITS of the least, the fewest operations.
    least = min(m.score for m in pool)
    best = min((m for m in pool if m.score <= least + MARGIN_BITS / 2), key=lambda m: (m.ops, m.score))
    # Regimes from the best and from the next ones too: the pair that joins best need not include the best alone
    # (the derived form for x < 0 and a derivative of the conjugate for x > 0 beat an expanded form on its own).
    regime_starts = [best]
    for m in sorted((m for m in pool if m is not best), key=lambda m: m.score):
        # One start per form and its reassociations, which fail where it does and would join the same way.
        if len(regime_starts) < REGIME_STARTS and _lineage(m) not in {_lineage(t) for t in regime_starts}:
            regime_starts.append(m)
    joined = [_with_regimes(m, pool, sampling, search) for m in regime_starts]
    plain = best
    best = min(
        (j for j in joined if j.branches and j.score <= plain.score - REGIME_MARGIN_BITS),
        key=lambda m: m.score,
        default=plain,
    )
    # Overflow-safe scaling last: it takes the regimes' conditions along (a sign is kept by the scaling).
    best = _with_scaling(best, pool, expr, sampling, search)
    if best.score > derived.score - MARGIN_BITS:
        # Nothing measurably better: the simplest form no worse than the derived one at any dtype's mean (to within
        # TIE_BITS, the noise of 32 points: a factored form 0.016 bits behind is as good, and prints shorter).
        no_worse = [m for m in pool if all(a <= b + TIE_BITS for a, b in zip(m.means, derived.means, strict=True))]
        best = min(no_worse, key=lambda m: (m.ops, m is not derived, m.score))
    # Forms without regimes: a derivative of a `where` of fed branches multiplies selections; a partial's own
    # search joins the branches' derivatives by regimes of its own.
    ranked = [best.expr] if not best.expr.has(sp.Piecewise) else []
    ranked += [m.expr for m in sorted(pool, key=lambda m: m.score) if m.score <= best.score + RUNNER_UP_BITS]
    ranked += [m.expr for m in best.branches]
    good_forms = tuple(e for e in dict.fromkeys(ranked) if not e.has(sp.Piecewise))[:GOOD_FORMS]
    return (expr, best.expr, best.family, derived.means, best.means, good_forms)


def sampling_for(
    variables: Mapping[str, sp.Symbol], domains: Mapping[str, Domain], condition: sp.Expr | None
) -> Sampling:
    return Sampling(tuple((variables[name], domains[name]) for name in domains), condition)
