"""The points a search measures at: sampled, probed, their exact values (mpmath), and bits of error there."""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import mpmath
import numpy as np
import sympy as sp
from sympy.codegen.cfunctions import expm1, log1p

from rulegen.derive.expr import lambdified
from rulegen.derive.functions import power_product, sigmoid
from rulegen.derive.measure import (
    bits_of_error,
    exact_value,
    initial_precision,
    inside,
    probe_points,
    sample_floats,
    to_floats,
    value_at,
    with_probes,
)
from rulegen.derive.stabilise.budget import BUDGET
from rulegen.derive.stabilise.flushed import flush, flushed_call, read_as_zero
from rulegen.spec.rules import Domain

#: The dtypes every candidate is measured in, as the frameworks compute it.
_DTYPES = (np.float64, np.float32)


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


def exact_floats(expr: sp.Expr) -> sp.Expr:
    """`expr` with each Float the rational it is exactly (a rule's 0.5 is 1/2): mpmath's intervals cannot read a
    Float as lambdify prints it, and 0.5 - 1/2 cancels to 0 only between rationals."""
    return expr.xreplace({f: sp.Rational(f) for f in expr.atoms(sp.Float)})


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
    condition = None if sampling.condition is None else lambdified(variables, sampling.condition, modules="numpy")
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
            far = reach > BUDGET.growth_argument_limit
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
    sigmoid: lambda a: 1 / (1 + mpmath.iv.exp(-a)),
}


def _interval_constant(value: Any) -> Any:
    """A float constant as lambdify prints it (an mpf's tuple, which `iv.mpf` refuses) as an interval."""
    return mpmath.iv.mpf(mpmath.mpf(value))


@functools.lru_cache(maxsize=256)
def _interval_function(expr: sp.Expr, variables: tuple[sp.Symbol, ...]) -> Callable[..., Any] | None:
    """`expr` in mpmath's interval arithmetic; None where it calls a function with no interval extension here."""
    if not all(type(f) in _INTERVAL_FUNCTIONS for f in expr.atoms(sp.Function)):
        return None
    names = {f.__name__: g for f, g in _INTERVAL_FUNCTIONS.items()}
    return lambdified(
        variables,
        expr,
        modules=[{**names, "mpf": _interval_constant, "pi": mpmath.iv.pi, "sqrt": mpmath.iv.sqrt}, "mpmath"],
    )


def _underflowed(expr: sp.Expr, variables: tuple[sp.Symbol, ...], point: Sequence[float]) -> tuple[float, float] | None:
    """(0.0, 0.0) where `expr` at `point` lies, by interval arithmetic, within +-2**-_UNDERFLOW_BITS; else None.

    Past `BUDGET.growth_argument_limit` an exact value costs a second, but a value that underflows every float by a wide
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


_GROWING = (sp.exp, expm1, sp.sinh, sp.cosh, sigmoid)


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
    """Whether float32 evaluation is within `BUDGET.good_bits` of float64 at float32 points: no mpmath, so cheap.

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
    rng = np.random.default_rng([seed, BUDGET.screen_points])
    try:
        with np.errstate(over="ignore"):  # a bound beyond float32's range is its largest float
            columns = [sample_floats(domain, BUDGET.screen_points, rng, np.float32) for _, domain in sampling.domains]
    except ValueError:
        return True
    # The probes' moderate magnitudes too, judged apart: drawn over every binade, few points land where erf(x)
    # rounds to -1 in float32 and not in float64 (gelu's 1 + erf(x/sqrt(2)) at x = -5.5 loses 18 bits), and the
    # mean over 256 drawn points hid them.  The other variables are held at the first drawn point.
    domains = [d for _, d in sampling.domains]
    probes = probe_points([c[:1] for c in columns], domains, _magnitudes(np.float32), np.float32)
    # And the close pairs, where a difference of two inputs' functions cancels (1/p - 1/q at q ~ p).
    close = _close_pair_points(columns, domains, np.float32, BUDGET.screen_close_pairs)
    return all(not len(c[0]) or _screened(expr, fn, sampling, c) for c in (columns, probes, close))


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
    # float64 inf or -inf where the exact value is a finite float: log(erfc(w) / 2) is -inf from w = 27, where
    # it is -w**2 and more; float32 and float64 agree on -inf there, and the mean below skips it.
    if wide.shape == columns[0].shape and _exact_where(
        expr, variables, columns, np.isinf(wide), lambda value: math.isfinite(value)
    ):
        return False
    bits = bits_of_error(narrow[finite], reference[finite], np.float32)
    return bool(bits.size == 0 or np.mean(bits) <= BUDGET.good_bits) and _flushed_keeps_up(
        fn, columns, reference, finite
    )


def _flushed_keeps_up(
    fn: Callable[..., Any], columns: list[np.ndarray], reference: np.ndarray, finite: np.ndarray
) -> bool:
    """Whether float32 as XLA computes it (subnormals flushed) keeps up with the float64 `reference`, flushed
    alike, at the `finite` points where no input is subnormal (XLA reads those as 0 whatever the form)."""
    try:
        with np.errstate(all="ignore"):
            flushed = np.asarray(flushed_call(fn, columns, np.float32), dtype=np.float32)
    except Exception:
        return True
    flushed = np.broadcast_to(flushed, reference.shape)
    if reference.shape == columns[0].shape:
        finite = finite & ~read_as_zero(columns, np.float32)
    bits = bits_of_error(flushed[finite], flush(reference[finite]), np.float32)
    return bool(bits.size == 0 or np.mean(bits) <= BUDGET.good_bits)


def _zero_where_not(
    expr: sp.Expr, variables: Sequence[sp.Symbol], columns: Sequence[np.ndarray], zero: np.ndarray
) -> bool:
    """Whether float64's exact 0 at some of the points is, correctly rounded, no 0: a difference that cancels
    completely in float32 and float64 alike (log1p(N) - log(N) past N = 1e16, which is 1/N), where float64
    cannot stand in for the exact value."""
    return _exact_where(expr, variables, columns, zero, lambda value: value != 0)


def _exact_where(
    expr: sp.Expr,
    variables: Sequence[sp.Symbol],
    columns: Sequence[np.ndarray],
    mask: np.ndarray,
    unlike: Callable[[float], bool],
) -> bool:
    """Whether the exact value, correctly rounded to float64, is `unlike` float64's at some of the points `mask`
    picks: one mpmath evaluation at each of the first `BUDGET.zero_probes` of them."""
    where = np.flatnonzero(mask)
    if not where.size:
        return False
    # The smallest inputs first (a total cancellation begins where the inputs are moderate: sigmoid(x) written as
    # 1 - 1/(exp(x) + 1) is 0 in float64 from x = -37, truly 0 only past -745), then some spread over the rest.
    magnitude = np.max(np.abs(np.stack([c[where].astype(np.float64) for c in columns])), axis=0)
    ordered = where[np.argsort(magnitude, kind="stable")]
    spread = ordered[np.linspace(0, len(ordered) - 1, BUDGET.zero_probes // 2).astype(int)]
    where = np.asarray(list(dict.fromkeys([*ordered[: BUDGET.zero_probes // 2], *spread])))
    reference = _attempt(lambda: _mpmath_function(expr, tuple(variables)))
    if reference is None:
        return False
    for j in where:
        point = [float(c[j]) for c in columns]
        value = value_at(reference, point, initial_precision(point) + 64)
        if value is not None and unlike(to_floats(value)[0]):
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
    """`drawn` with, per variable, each probe magnitude of either sign the domain holds and the dtype's smallest
    subnormal, the others as drawn; and, for two variables or more, the close pairs (`_close_pairs`).

    The smallest subnormal is where 1/x overflows: a sum of terms in 1/x**2 and 1/x of either sign there is
    inf - inf = nan where the exact value is inf (1/x**2 - 1/(x + 1)**2 reassociated as
    (1/x)(1/(x + 1))/x + (1/(x + 1))**2/x); drawn points land in its binade once in two thousand (float64).
    The screen does not probe it: float32 overflows there where float64 does not, cancelling or not."""
    domains = [domain for _, domain in sampling.domains]
    magnitudes = (*_magnitudes(dtype), float(np.finfo(dtype).smallest_subnormal))
    return _close_pairs(with_probes(drawn, domains, magnitudes, dtype), domains, dtype)


def _close_pairs(drawn: list[np.ndarray], domains: Sequence[Domain], dtype: Any) -> list[np.ndarray]:
    """`drawn` with, for each ordered pair of variables (a, b), `BUDGET.close_pairs` points where a is b times
    1 + 2 eps, the others as drawn: where a difference of the two cancels (1/p - q/p**2 at q ~ p, a divergence of
    two close distributions), which the float line's bit patterns never draw and a form written as the difference
    itself, (p - q)/p/p, gets exactly."""
    pairs = _close_pair_points(drawn, domains, dtype, BUDGET.close_pairs)
    return [np.concatenate([c, p]) for c, p in zip(drawn, pairs, strict=True)]


def _close_pair_points(drawn: list[np.ndarray], domains: Sequence[Domain], dtype: Any, count: int) -> list[np.ndarray]:
    """The points of `_close_pairs` alone, from the last `count` drawn points (none for one variable)."""
    count = min(count, len(drawn[0]) if drawn else 0)
    if len(drawn) < 2 or not count:
        return [np.empty(0, dtype) for _ in drawn]
    near = dtype(1 + 2 * float(np.finfo(dtype).eps))
    made: list[list[np.ndarray]] = [[] for _ in drawn]
    for i, j in itertools.permutations(range(len(drawn)), 2):
        for k, column in enumerate(drawn):
            made[k].append((drawn[j][-count:] * near).astype(dtype) if k == i else column[-count:])
    pairs = [np.concatenate(m) for m in made]
    with np.errstate(invalid="ignore"):
        keep = np.logical_and.reduce([inside(d, c) & np.isfinite(c) for d, c in zip(domains, pairs, strict=True)])
    return [p[keep] for p in pairs]


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

    # `added` of a sum's cancelling pair (the planners' shared subexpressions): a call, so that it is one value.
    found: dict[str, Callable[..., Any]] = {"log1p": np.log1p, "expm1": np.expm1, "added": np.add}
    for name, dotted in NUMPY_IMPLEMENTATIONS.items():
        module, _, attribute = dotted.rpartition(".")
        found[name] = _in_the_arguments_float(getattr(importlib.import_module(module), attribute))
    return found


def _in_the_arguments_float(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function` with its value rounded to its float arguments' float, as the generated code computes it: scipy's
    polygamma and the registry's own numpy functions compute in float64 whatever their arguments are, and a float32
    form's products of such a value were finite where the generated code overflows (a Beta KL's (p0 - q0)
    digamma(p0) at q0 = 1.9e38, p0 = 1.7e26)."""

    @functools.wraps(function)
    def rounded(*args: Any) -> Any:
        value = function(*args)
        # The arrays' float: a number (a 0-d one too, numpy's quotient of two constants) is a Python float in the
        # generated code, which takes the array's float.
        floats = [a.dtype for a in args if isinstance(a, np.ndarray) and a.ndim and a.dtype.kind == "f"]
        if not floats or not isinstance(value, np.ndarray | np.floating) or value.dtype.kind != "f":
            return value
        with np.errstate(over="ignore"):
            return value.astype(np.result_type(*floats), copy=False)

    return rounded


def _evaluated(
    expr: sp.Expr, variables: Sequence[sp.Symbol], columns: Sequence[np.ndarray], dtype: Any, *, flushed: bool = False
) -> Any:
    """`expr` evaluated by numpy at `columns` in `dtype`, one value per point; None where numpy cannot (or where
    it leaves the reals: a root of a negative number is no candidate).  With `flushed`, as XLA computes on the
    CPU: every subnormal input, intermediate and result a zero of its sign (`flushed_call`)."""
    fn = _numpy_function(expr, tuple(variables))
    if fn is None:
        return None
    try:
        with np.errstate(all="ignore"):
            result = flushed_call(fn, columns, dtype) if flushed else np.asarray(fn(*columns))
    except Exception:
        return None
    if np.iscomplexobj(result):
        return None
    with np.errstate(over="ignore"):  # a float64 result past float32's range is inf there, as float32 code computes
        return np.broadcast_to(result.astype(dtype), np.shape(columns[0]))


def _bits(expr: sp.Expr, variables: Sequence[sp.Symbol], points: _Points) -> np.ndarray | None:
    """Bits of error of `expr` evaluated by numpy in the points' dtype, at each point the worse of numpy's
    evaluation (torch's) and XLA's (`flushed_bits`); None where numpy cannot evaluate it."""
    got = _evaluated(expr, variables, points.columns, points.dtype)
    if got is None:
        return None
    bits = bits_of_error(got, points.exact, points.dtype)
    flushed = flushed_bits(expr, variables, points.columns, points.exact, points.dtype)
    return bits if flushed is None else np.maximum(bits, flushed)


def flushed_bits(
    expr: sp.Expr, variables: Sequence[sp.Symbol], columns: Sequence[np.ndarray], exact: np.ndarray, dtype: Any
) -> np.ndarray | None:
    """Bits of error of `expr` as XLA computes it on the CPU (subnormals flushed to 0), against the exact value
    flushed alike: no form computes a subnormal there.  0 where an input is subnormal: XLA reads it as 0, and
    what a form computes at 0 measures the input's flush, the same for every form.  None where numpy cannot
    evaluate it."""
    got = _evaluated(expr, variables, columns, dtype, flushed=True)
    if got is None:
        return None
    with np.errstate(over="ignore"):
        bits = bits_of_error(got, flush(np.asarray(exact, dtype=dtype)), dtype)
    zero = read_as_zero(columns, dtype)
    return np.where(zero, 0.0, bits) if np.ndim(zero) else bits


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
        """The operations the form computes: a `power_product` as its products, and the exponents it takes out of
        each base (sympy counts a call as one)."""
        scaled = list(self.expr.atoms(power_product))
        plain = self.expr.xreplace({p: p.rewrite(sp.Mul) for p in scaled})
        return int(sp.count_ops(plain)) + sum(_SCALING_OPS * len(p.args[0::2]) for p in scaled)

    @property
    def charge(self) -> float:
        """The bits a form must save beyond another's to be ranked before it: a regime's (`regime_margin_bits`)
        for a form joined by regimes or computing a `power_product`, each several times its plain form's work."""
        costly = self.branches or self.expr.has(power_product)
        return BUDGET.regime_margin_bits if costly else 0.0


#: What `power_product` computes per base besides the product: a log2, a floor, a select and two powers of two.
_SCALING_OPS = 5


def _measure(expr: sp.Expr, family: str, variables: Sequence[sp.Symbol], points: Sequence[_Points]) -> _Measured | None:
    found = [_bits(expr, variables, p) for p in points]
    if any(b is None for b in found):
        return None
    return _Measured(expr, family, tuple(b for b in found if b is not None))
