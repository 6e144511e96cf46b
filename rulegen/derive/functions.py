"""The math functions a symbolic rule may call, and the ones sympy lacks.

sympy has no sigmoid, softplus, logaddexp, xlogy or the scaled Bessel
functions that both `torch.special` and `jax.scipy.special` provide.  Writing
them as composites (``log(1 + exp(x))``) would make the generated code
overflow where the frameworks' fused versions do not, so they are sympy
functions of their own: each knows its derivative (so `sympy.diff` stays
closed over this set), how to rewrite itself into elementary functions (for
`simplify` and the high-precision reference), and how mpmath evaluates it.

`REGISTRY` declares each function once: the names rules call it by, how
each backend and mpmath compute it, its in-place torch method.  The
parser's whitelist, the printers' tables and `_print_<name>` methods and
the checks' mpmath reference are derived from it, so a new function is a
new entry there (and, when sympy lacks it, a class here).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

import mpmath
import numpy as np
import sympy as sp
from sympy.codegen import cfunctions
from sympy.codegen.cfunctions import expm1, log1p
from sympy.core.function import ArgumentIndexError
from sympy.core.logic import fuzzy_and
from sympy.logic.boolalg import BooleanFunction
from sympy.printing.precedence import PRECEDENCE

# The shipped runtime's series, which the registry's erfcx derivative names and the measure evaluates.
from rulegen.derive.stored import kept
from rulegen.runtime import _asymptotic, _scaling


class sigmoid(sp.Function):  # noqa: N801 - sympy functions are lower case
    """The logistic function 1 / (1 + exp(-x))."""

    nargs = 1

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        if argindex != 1:
            raise ArgumentIndexError(self, argindex)
        return self * (1 - self)

    @classmethod
    def eval(cls, arg: sp.Expr) -> sp.Expr | None:
        if arg.is_zero:
            return sp.S.Half
        return None

    def _eval_rewrite_as_exp(self, arg: sp.Expr, **kwargs: object) -> sp.Expr:
        return 1 / (1 + sp.exp(-arg))

    _eval_rewrite_as_tractable = _eval_rewrite_as_exp

    def _eval_is_real(self) -> bool | None:
        return self.args[0].is_real

    def _eval_is_positive(self) -> bool | None:
        # In (0, 1) on the real line: a log of a quotient of logistics may be taken apart.
        return self.args[0].is_real


class sigmoid_slope(sp.Function):  # noqa: N801
    """sigmoid'(x) = sigmoid(x) sigmoid(-x), the runtime's `sigmoid_slope` in both backends, differentiated as
    -tanh(x / 2) sigmoid'(x).

    Autodiff of any product of logistics cancels at the next order: sigmoid(-x) - sigmoid(x) is 0 at x = 1e-30
    in float32, where sigmoid'' is -x / 8 (and tanh'' = 8 sigmoid''(2x) is -2x).  tanh(x / 2) is exact there.
    """

    nargs = 1

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        if argindex != 1:
            raise ArgumentIndexError(self, argindex)
        return -sp.tanh(self.args[0] / 2) * self

    @classmethod
    def eval(cls, arg: sp.Expr) -> sp.Expr | None:
        if arg.is_zero:
            return sp.Rational(1, 4)
        return None

    def _eval_rewrite_as_sigmoid(self, arg: sp.Expr, **kwargs: object) -> sp.Expr:
        return sigmoid(arg) * sigmoid(-arg)

    def _eval_rewrite_as_exp(self, arg: sp.Expr, **kwargs: object) -> sp.Expr:
        return 1 / ((1 + sp.exp(-arg)) * (1 + sp.exp(arg)))

    _eval_rewrite_as_tractable = _eval_rewrite_as_exp

    def _eval_is_real(self) -> bool | None:
        return self.args[0].is_real


def sigmoid_slope_of(x: Any) -> Any:
    """sigmoid'(x) in numpy, as the runtime computes it: the accuracy search's evaluation."""
    import importlib

    expit = importlib.import_module("scipy.special").expit
    x = np.asarray(x)
    return expit(x) * expit(-x)


class softplus(sp.Function):  # noqa: N801
    """log(1 + exp(x)), computed without overflow."""

    nargs = 1

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        if argindex != 1:
            raise ArgumentIndexError(self, argindex)
        return sigmoid(self.args[0])

    @classmethod
    def eval(cls, arg: sp.Expr) -> sp.Expr | None:
        if arg.is_zero:
            return sp.log(2)
        return None

    def _eval_rewrite_as_log(self, arg: sp.Expr, **kwargs: object) -> sp.Expr:
        return sp.log(1 + sp.exp(arg))

    _eval_rewrite_as_tractable = _eval_rewrite_as_log

    def _eval_is_real(self) -> bool | None:
        return self.args[0].is_real


class logaddexp(sp.Function):  # noqa: N801
    """log(exp(a) + exp(b)), computed without overflow."""

    nargs = 2

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        a, b = self.args
        if argindex == 1:
            return sigmoid(a - b)
        if argindex == 2:
            return sigmoid(b - a)
        raise ArgumentIndexError(self, argindex)

    def _eval_rewrite_as_log(self, a: sp.Expr, b: sp.Expr, **kwargs: object) -> sp.Expr:
        return sp.log(sp.exp(a) + sp.exp(b))

    _eval_rewrite_as_tractable = _eval_rewrite_as_log

    def _eval_is_real(self) -> bool | None:
        return self.args[0].is_real and self.args[1].is_real


class xlogy(sp.Function):  # noqa: N801
    """x * log(y), defined as 0 where x == 0 (as in torch and jax)."""

    nargs = 2

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        x, y = self.args
        if argindex == 1:
            return sp.log(y)
        if argindex == 2:
            return x / y
        raise ArgumentIndexError(self, argindex)

    def _eval_rewrite_as_log(self, x: sp.Expr, y: sp.Expr, **kwargs: object) -> sp.Expr:
        return x * sp.log(y)

    _eval_rewrite_as_tractable = _eval_rewrite_as_log


class power_slope(sp.Function):  # noqa: N801
    """power_slope(b, p) = d/db b**p = p b**(p - 1), the runtime's `power_slope` in both backends
    (`_scaling.power_slope`: right where the power overflows, y b**y / b there, and below b = 0, where p - 1
    rounds to p past 2**53), differentiated by its partials as stated here, each computed whole
    (`_scaling.power_curvature`).

    Autodiff of the product is 0 * inf at p = 0 beside a subnormal b (x**0's second derivative, 0), and
    p (p - 1) times an overflowed b**(p - 2) at (2.2e-308, 5e-324), where the derivative is -9.98e291.
    """

    nargs = 2

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        b, p = self.args
        if argindex == 1:
            return p * power_slope(b, p - 1)
        if argindex == 2:
            return b ** (p - 1) * (1 + p * sp.log(b))
        raise ArgumentIndexError(self, argindex)

    def _eval_rewrite_as_power(self, b: sp.Expr, p: sp.Expr, **kwargs: object) -> sp.Expr:
        return p * b ** (p - 1)

    _eval_rewrite_as_tractable = _eval_rewrite_as_power


class power_log(sp.Function):  # noqa: N801
    """power_log(b, p) = d/dp b**p = b**p log(b), the runtime's `power_log` in both backends (xlogy(b**p, b): 0
    at b = 0 beside p > 0, where the product is 0 * -inf), differentiated by its partials as stated here, each
    computed whole (`_scaling.power_log_curvature`): autodiff of xlogy(b**p, b) in p is log(b) times
    b**p log(b), -inf * 0 at b = 0, where b**p log(b)**2 is 0 (xlogy(xlogy(b**p, b), b))."""

    nargs = 2

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        b, p = self.args
        if argindex == 1:
            return b ** (p - 1) * (1 + p * sp.log(b))
        if argindex == 2:
            return power_log(b, p) * sp.log(b)
        raise ArgumentIndexError(self, argindex)

    def _eval_rewrite_as_log(self, b: sp.Expr, p: sp.Expr, **kwargs: object) -> sp.Expr:
        return b**p * sp.log(b)

    _eval_rewrite_as_tractable = _eval_rewrite_as_log


def power_slope_of(b: Any, p: Any) -> Any:
    """power_slope in numpy, as the runtime computes it: the accuracy search's evaluation."""
    with np.errstate(all="ignore"):
        return _scaling.power_slope(np, *np.broadcast_arrays(np.asarray(b, dtype=float), np.asarray(p)))


def power_log_of(b: Any, p: Any) -> Any:
    """power_log in numpy, as the runtime computes it: the accuracy search's evaluation."""
    import importlib

    xlogy_of = importlib.import_module("scipy.special").xlogy
    with np.errstate(all="ignore"):
        return _scaling.power_log(np, xlogy_of, *np.broadcast_arrays(np.asarray(b, dtype=float), np.asarray(p)))


def _mp_power_slope(b: mpmath.mpf, p: mpmath.mpf) -> mpmath.mpf:
    # 0 at p = 0 (b**0 is 1 at every b, 0 too).
    return mpmath.mpf(0) if p == 0 else p * b ** (p - 1)


def _mp_power_log(b: mpmath.mpf, p: mpmath.mpf) -> mpmath.mpf:
    # Its limit at b = 0: 0 beside p > 0, -inf beside p <= 0 (mpmath's 0 * -inf is nan).
    if b == 0:
        return mpmath.mpf(0) if p > 0 else mpmath.mpf("-inf")
    return b**p * mpmath.log(b)


class bessel_i0(sp.Function):  # noqa: N801
    """Modified Bessel function of the first kind, order 0."""

    nargs = 1

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        if argindex != 1:
            raise ArgumentIndexError(self, argindex)
        return bessel_i1(self.args[0])

    def _eval_rewrite_as_besseli(self, arg: sp.Expr, **kwargs: object) -> sp.Expr:
        return sp.besseli(0, arg)


class bessel_i1(sp.Function):  # noqa: N801
    """Modified Bessel function of the first kind, order 1."""

    nargs = 1

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        if argindex != 1:
            raise ArgumentIndexError(self, argindex)
        return bessel_i1_slope(self.args[0])

    def _eval_rewrite_as_besseli(self, arg: sp.Expr, **kwargs: object) -> sp.Expr:
        return sp.besseli(1, arg)


class bessel_i1_slope(sp.Function):  # noqa: N801
    """I1'(x) = I0(x) - I1(x) / x, the runtime's `bessel_i1_slope` in both backends: from the exponentially scaled
    functions where I0 and I1 overflow together (inf - inf), and differentiated there as one product."""

    nargs = 1

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        if argindex != 1:
            raise ArgumentIndexError(self, argindex)
        return bessel_i1_curvature(self.args[0])

    def _eval_rewrite_as_besseli(self, arg: sp.Expr, **kwargs: object) -> sp.Expr:
        return sp.besseli(0, arg) - sp.besseli(1, arg) / arg


#: I1''' = sum_k (2k + 1) 2k (2k - 1) x**(2k - 2) / (2**(2k + 1) k! (k + 1)!), k = 1..10: within a float64
#: rounding below |x| = 1, where the closed form cancels (3 / x**2 - 3 / x**2 at 0).
_I1_THIRD_SERIES = tuple(
    sp.Rational((2 * k + 1) * (2 * k) * (2 * k - 1), 2 ** (2 * k + 1) * math.factorial(k) * math.factorial(k + 1))
    for k in range(1, 11)
)


class bessel_i1_curvature(sp.Function):  # noqa: N801
    """I1''(x) = (1 + 2 / x**2) I1(x) - I0(x) / x, the runtime's `bessel_i1_curvature` in both backends: its series
    below |x| = 1, where the closed form cancels, and one product of exp(|x|) and the scaled functions far out."""

    nargs = 1

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        if argindex != 1:
            raise ArgumentIndexError(self, argindex)
        x = self.args[0]
        small = sp.Abs(x) < 1
        fed = Piecewise((sp.Integer(2), small), (x, True))
        series = sum((c * x ** (2 * k) for k, c in enumerate(_I1_THIRD_SERIES)), sp.S.Zero)
        closed = (1 + 3 / fed**2) * bessel_i0(fed) - (2 / fed + 6 / fed**3) * bessel_i1(fed)
        return Piecewise((series, small), (closed, True))

    def _eval_rewrite_as_besseli(self, arg: sp.Expr, **kwargs: object) -> sp.Expr:
        return (3 * sp.besseli(1, arg) + sp.besseli(3, arg)) / 4


def bessel_i1_slope_of(x: Any) -> Any:
    """I1'(x) in numpy, as the runtime computes it: the accuracy search's evaluation."""
    import importlib

    special = importlib.import_module("scipy.special")
    with np.errstate(all="ignore"):
        return _asymptotic.bessel_i1_slope(np, special, np.asarray(x, dtype=np.float64))


def _mp_bessel_i1_slope(x: mpmath.mpf) -> mpmath.mpf:
    # (I0 + I2) / 2, from I_n' = (I_(n-1) + I_(n+1)) / 2: I0 - I1 / x cancels as x goes to 0.
    return (mpmath.besseli(0, x) + mpmath.besseli(2, x)) / 2


def bessel_i1_curvature_of(x: Any) -> Any:
    """I1''(x) in numpy, as the runtime computes it: the accuracy search's evaluation."""
    import importlib

    special = importlib.import_module("scipy.special")
    with np.errstate(all="ignore"):
        return _asymptotic.bessel_i1_curvature(np, special, np.asarray(x, dtype=np.float64))


def _mp_bessel_i1_curvature(x: mpmath.mpf) -> mpmath.mpf:
    # (3 I1 + I3) / 4, from I_n' = (I_(n-1) + I_(n+1)) / 2: no cancellation near 0.
    return (3 * mpmath.besseli(1, x) + mpmath.besseli(3, x)) / 4


#: Where i0e's and i1e's derivatives are their asymptotic series in |x| (`bessel_ie_series`).
BESSEL_IE_SERIES_FROM = _asymptotic.BESSEL_IE_SERIES_FROM


def _bessel_ie_derivative(nu: int, x: sp.Expr, near: sp.Expr) -> sp.Expr:
    """The derivative of exp(-|x|) I_nu(x): `near` below |x| = 25, the series' beyond, on either side.

    i1e(x) - sign(x) i0e(x) (and i1e's like) cancels as |x| grows: 1.5e4 float64 eps at |x| = 1e4, the
    second derivative 1.8e8.  Beyond 25, the series differentiated term by term at every order; on the
    negative side through i0e's evenness and i1e's oddness (stand-ins where the `where` drops the series).
    """
    edge = sp.Integer(BESSEL_IE_SERIES_FROM)
    right = Piecewise((x, x >= edge), (edge, True))
    left = Piecewise((-x, x <= -edge), (edge, True))
    # i0e(x) = S0(-x) on the left, so its derivative is -S0'(-x); i1e(x) = -S1(-x), so S1'(-x).
    sign = -1 if nu == 0 else 1
    return Piecewise(
        (bessel_ie_series(nu, 1, right), x >= edge),
        (sign * bessel_ie_series(nu, 1, left), x <= -edge),
        (near, True),
    )


class bessel_i0e(sp.Function):  # noqa: N801
    """Exponentially scaled I0: exp(-|x|) * I0(x)."""

    nargs = 1

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        if argindex != 1:
            raise ArgumentIndexError(self, argindex)
        x = self.args[0]
        return _bessel_ie_derivative(0, x, bessel_i1e(x) - sp.sign(x) * self)

    def _eval_rewrite_as_besseli(self, arg: sp.Expr, **kwargs: object) -> sp.Expr:
        return sp.exp(-sp.Abs(arg)) * sp.besseli(0, arg)


class bessel_i1e(sp.Function):  # noqa: N801
    """Exponentially scaled I1: exp(-|x|) * I1(x)."""

    nargs = 1

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        if argindex != 1:
            raise ArgumentIndexError(self, argindex)
        x = self.args[0]
        # Expanded: within |x| < 25, 1.7 bits fewer lost than i0e - i1e (sign(x) + 1 / x) (`rulegen accuracy`).
        return _bessel_ie_derivative(1, x, bessel_i0e(x) - sp.sign(x) * bessel_i1e(x) - _i1e_over(x))

    def _eval_rewrite_as_besseli(self, arg: sp.Expr, **kwargs: object) -> sp.Expr:
        return sp.exp(-sp.Abs(arg)) * sp.besseli(1, arg)


def _i1e_over(x: sp.Expr) -> sp.Expr:
    """i1e(x) / x, exp(-|x|) / 2 where |x| < 2**-26 (its limit, the next term x**2 / 16 below a float64 rounding).

    |x| written x sign(x): the frameworks differentiate sign as 0 everywhere, so the kink's derivative at 0 is
    sign(0) = 0, sympy's; JAX differentiates abs as 1 at 0, which made i1e's second derivative 0.5 there.
    """
    return quotient_by_x(bessel_i1e(x), x, sp.exp(-x * sp.sign(x)) / 2)


def quotient_by_x(numerator: sp.Expr, x: sp.Expr, near: sp.Expr) -> sp.Expr:
    """`numerator / x` for a numerator that vanishes at x = 0, as `near`, its series there, where |x| < 2**-26.

    The quotient is 0 / 0 at x = 0, and near it the numerator is subnormal (or flushed by XLA: i1e(x) ~ x / 2
    on float32 [1.2e-38, 2.4e-38)), where the quotient came out nan, 0 or 1.  `near` holds to a float64
    rounding below 2**-26 with its first derivative: a derivative differentiates it.  The quotient's
    denominator is 1 there, so that neither piece is 0 / 0 (or its derivative inf * 0) at 0.
    """
    small = sp.Abs(x) < sp.Rational(1, 2**26)
    return Piecewise((near, small), (numerator / Piecewise((sp.S.One, small), (x, True)), True))


class ndtr(sp.Function):  # noqa: N801
    """The standard normal CDF, Phi(x)."""

    nargs = 1

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        if argindex != 1:
            raise ArgumentIndexError(self, argindex)
        x = self.args[0]
        return sp.exp(-(x**2) / 2) / sp.sqrt(2 * sp.pi)

    def _eval_rewrite_as_erf(self, arg: sp.Expr, **kwargs: object) -> sp.Expr:
        return (1 + sp.erf(arg / sp.sqrt(2))) / 2


class ndtri(sp.Function):  # noqa: N801
    """The inverse of ndtr: the standard normal quantile."""

    nargs = 1

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        if argindex != 1:
            raise ArgumentIndexError(self, argindex)
        return ndtri_slope(self.args[0])


class ndtri_slope(sp.Function):  # noqa: N801
    """ndtri'(x) = 1 / phi(ndtri(x)), the runtime's `ndtri_slope` in both backends (`_asymptotic.ndtri_slope`:
    Mills' ratio, erfcx(|z| / sqrt 2), over x or 1 - x in the tails), differentiated as ndtri(x) ndtri'(x)**2.

    sqrt(2 pi) exp(ndtri(x)**2 / 2) takes ndtri's rounding times z**2 (143 float32 eps off at the smallest
    normal x), and autodiff of the tails' quotient is inf - inf where the second derivative overflows.
    """

    nargs = 1

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        if argindex != 1:
            raise ArgumentIndexError(self, argindex)
        return ndtri(self.args[0]) * self**2

    def _eval_rewrite_as_exp(self, arg: sp.Expr, **kwargs: object) -> sp.Expr:
        return sp.sqrt(2 * sp.pi) * sp.exp(ndtri(arg) ** 2 / 2)

    def _eval_is_real(self) -> bool | None:
        return self.args[0].is_real


def ndtri_slope_of(x: Any) -> Any:
    """ndtri'(x) in numpy, as the runtime computes it: the accuracy search's evaluation."""
    import importlib

    special = importlib.import_module("scipy.special")
    with np.errstate(all="ignore"):
        return _asymptotic.ndtri_slope(np, special.ndtri, special.erfcx, np.asarray(x, dtype=np.float64))


def _mp_ndtri_slope(x: mpmath.mpf) -> mpmath.mpf:
    z = mpmath.sqrt(2) * mpmath.erfinv(2 * x - 1)
    return mpmath.sqrt(2 * mpmath.pi) * mpmath.exp(z**2 / 2)


class log_ndtr(sp.Function):  # noqa: N801
    """log(ndtr(x)), accurate far into the left tail."""

    nargs = 1

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        if argindex != 1:
            raise ArgumentIndexError(self, argindex)
        x = self.args[0]
        # phi(x) / Phi(x). Below 0, sqrt(2 / pi) / erfcx(-x / sqrt 2), in which exp(-x**2 / 2)
        # cancels exactly: exp(-x**2 / 2 - log_ndtr(x)), the difference of two exponents of 5e7,
        # was 8.6e6 eps off at x = -1e4 in float64. Above, where erfcx(-x / sqrt 2) overflows
        # (x = 38, float32's 13) and its derivative would be inf / inf, Phi(x) is in [1/2, 1).
        # Below -2**10, -x - 1/x + 2/x**3 - 10/x**5, from Mills' ratio's series (the next term, 74/x**7, is below
        # a float64 rounding of x there): erfcx(-x / sqrt 2) is subnormal in float32 from x = -6.8e37, and its
        # square, in the second derivative, underflows from -1e19 (0 / 0).  A sum, not -x over a series: the
        # cotangent of a quotient's denominator is -x itself, which times the powers' underflowing derivatives
        # is inf * 0.
        far = sp.Integer(-(2**LOG_NDTR_SERIES_BELOW))
        tail = Piecewise((x, x < far), (far, True))
        r = divided(sp.S.One, tail)
        series = -tail - r + 2 * r**3 - 10 * r**5
        negative = Piecewise((sp.S.NegativeOne, (x >= 0) | (x < far)), (x, True))
        positive = _nonnegative_or(x, sp.S.One)
        left = sp.sqrt(2 / sp.pi) / erfcx(-negative / sp.sqrt(2))
        # positive * (positive / 2), not positive**2 / 2: sympy folds a power of a Piecewise into its pieces, and
        # the stand-in would leave the square (x * x at x = -inf, times the `where`'s zero cotangent, is nan).
        right = sp.exp(-positive * divided(positive, 2)) / (sp.sqrt(2 * sp.pi) * ndtr(positive))
        return Piecewise((series, x < far), (left, x < 0), (right, True))


#: log_ndtr's derivative is Mills' ratio's series below -2**LOG_NDTR_SERIES_BELOW.
LOG_NDTR_SERIES_BELOW = 10


class logit(sp.Function):  # noqa: N801
    """log(p / (1 - p)), the inverse of sigmoid."""

    nargs = 1

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        if argindex != 1:
            raise ArgumentIndexError(self, argindex)
        p = self.args[0]
        return 1 / (p * (1 - p))

    def _eval_rewrite_as_log(self, arg: sp.Expr, **kwargs: object) -> sp.Expr:
        return sp.log(arg / (1 - arg))


class erfcx(sp.Function):  # noqa: N801
    """The scaled complementary error function exp(x**2) * erfc(x)."""

    nargs = 1

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        if argindex != 1:
            raise ArgumentIndexError(self, argindex)
        x = self.args[0]
        # 2 x erfcx(x) - 2 / sqrt(pi) cancels as x grows (erfcx(x) ~ 1 / (x sqrt(pi))): 1.1e8 float64 eps
        # off at x = 1e4, the second derivative, 2 erfcx + 2 x erfcx', 2.5e15.  From x = 8 (where the
        # difference loses up to 7 bits), the asymptotic series, differentiated term by term at every order.
        large = Piecewise((x, x >= ERFCX_SERIES_FROM), (sp.Integer(ERFCX_SERIES_FROM), True))
        # The difference's x a stand-in (0) where the series is taken: 2 x erfcx(x) is inf at float32's largest x,
        # and its partial in erfcx(x), 2 x, times the `where`'s 0 was nan in the second derivative.
        near = Piecewise((sp.S.Zero, x >= ERFCX_SERIES_FROM), (x, True))
        difference = 2 * near * self - 2 / sp.sqrt(sp.pi)
        return Piecewise((erfcx_series(1, large), x >= ERFCX_SERIES_FROM), (difference, True))

    def _eval_rewrite_as_erfc(self, arg: sp.Expr, **kwargs: object) -> sp.Expr:
        return sp.exp(arg**2) * sp.erfc(arg)


#: Where erfcx's derivatives are its asymptotic series (`erfcx_series`: within 2 eps from here, in either dtype).
ERFCX_SERIES_FROM = _asymptotic.ERFCX_SERIES_FROM


class erfcx_series(sp.Function):  # noqa: N801
    """erfcx_series(n, x): the n-th derivative of erfcx at x >= 8, from its asymptotic series (the runtime's
    `_asymptotic.erfcx_series`, which says how); its argument a stand-in below 8."""

    nargs = 2

    def fdiff(self, argindex: int = 2) -> sp.Expr:
        if argindex != 2:
            raise ArgumentIndexError(self, argindex)
        order, x = self.args
        return erfcx_series(order + 1, x)


class bessel_ie_series(sp.Function):  # noqa: N801
    """bessel_ie_series(nu, n, x): the n-th derivative of exp(-x) I_nu(x) at x >= 25, from its asymptotic series
    (the runtime's `_asymptotic.bessel_ie_series`, which says how); its argument a stand-in below 25."""

    nargs = 3

    def fdiff(self, argindex: int = 3) -> sp.Expr:
        if argindex != 3:
            raise ArgumentIndexError(self, argindex)
        nu, order, x = self.args
        return bessel_ie_series(nu, order + 1, x)


def bessel_ie_series_of(nu: Any, order: Any, x: Any) -> Any:
    """bessel_ie_series for numpy arrays (the stabilising search's measure)."""
    with np.errstate(all="ignore"):
        return _asymptotic.bessel_ie_series(np, int(nu), int(order), np.asarray(x, dtype=np.float64))


def _mp_bessel_ie_derivative(nu: mpmath.mpf, order: mpmath.mpf, x: mpmath.mpf) -> mpmath.mpf:
    """The order-th derivative of exp(-x) I_nu(x) at x > 0, with the digits its cancellation takes: the derivative
    is about i_nu e(x) / x, so log10(x) digits of the two terms cancel (0 at x = 1e200 with 40 digits, -2e-301)."""
    with mpmath.extradps(int(order) * max(0, int(mpmath.log10(abs(x) + 1))) + 10):
        value = mpmath.diff(lambda t: mpmath.besseli(int(nu), t) * mpmath.exp(-t), mpmath.mpf(x), int(order))
    return +value


def erfcx_series_of(order: Any, x: Any) -> Any:
    """erfcx_series for numpy arrays (the stabilising search's measure)."""
    with np.errstate(all="ignore"):
        return _asymptotic.erfcx_series(np, int(order), np.asarray(x))


def _mp_erfcx(x: mpmath.mpf) -> mpmath.mpf:
    """exp(x**2) erfc(x), at a precision raised by the bits of x**2: at the working precision alone, x**2 loses
    its last digits, which exp then multiplies by (4% off at x = 9.1e19 with 40 digits)."""
    if mpmath.isnan(x):
        return x
    if mpmath.isinf(x):
        return mpmath.mpf(0) if x > 0 else mpmath.inf
    with mpmath.extraprec(2 * max(0, int(mpmath.log(abs(x) + 1, 2))) + 16):
        x = mpmath.mpf(x)
        return +(mpmath.exp(x**2) * mpmath.erfc(x))


def _mp_erfcx_derivative(order: mpmath.mpf, x: mpmath.mpf) -> mpmath.mpf:
    """The order-th derivative of erfcx, by its recurrence (E' = 2x E - 2/sqrt(pi), E(k+1) = 2x E(k) + 2k E(k-1))
    with the digits its cancellation takes (log10(x**2) a step) added."""
    extra = int(order) * max(0, int(2 * mpmath.log10(abs(x) + 1))) + 10
    with mpmath.extradps(extra):
        x = mpmath.mpf(x)
        values = [_mp_erfcx(x)]
        values.append(2 * x * values[0] - 2 / mpmath.sqrt(mpmath.pi))
        for k in range(1, int(order)):
            values.append(2 * x * values[k] + 2 * k * values[k - 1])
        return +values[int(order)]


class xlog1py(sp.Function):  # noqa: N801
    """x * log1p(y), defined as 0 where x == 0 (as in torch and jax)."""

    nargs = 2

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        x, y = self.args
        if argindex == 1:
            return log1p(y)
        if argindex == 2:
            return x / (1 + y)
        raise ArgumentIndexError(self, argindex)


class log1pmx(sp.Function):  # noqa: N801
    """log1p(z) - z, computed without its cancellation at small z (the runtime's `_asymptotic.log1pmx`): the
    stabilising search writes a log1p beside its argument's rational terms with it."""

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        if argindex != 1:
            raise ArgumentIndexError(self, argindex)
        z = self.args[0]
        return -z / (1 + z)


def log1pmx_of(z: Any) -> Any:
    """log1pmx for numpy arrays (the stabilising search's measure)."""
    with np.errstate(all="ignore"):
        return _asymptotic.log1pmx(np, np.asarray(z))


class entr(sp.Function):  # noqa: N801
    """-x * log(x), the elementwise entropy."""

    nargs = 1

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        if argindex != 1:
            raise ArgumentIndexError(self, argindex)
        return -sp.log(self.args[0]) - 1


# Forms only the torch printer writes, each one native kernel where the
# composite is two or more, and rules cannot name them.  The plan rewrites
# into them after deriving: those it writes before choosing the intermediates
# to save (one_plus_erf, silu_derivative) are differentiated there, so they
# know their derivatives; the rest are written as the bodies are printed.


class silu(sp.Function):  # noqa: N801
    """x * sigmoid(x)."""

    nargs = 1


class silu_derivative(sp.Function):  # noqa: N801
    """d/du silu(u) = sigmoid(u) * (1 + u * (1 - sigmoid(u))), torch's `silu_backward` of a cotangent of ones."""

    nargs = 1

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        if argindex != 1:
            raise ArgumentIndexError(self, argindex)
        u = self.args[0]
        s = sigmoid(u)
        return s * (1 - s) * (2 + u * (1 - 2 * s))

    def _eval_rewrite_as_sigmoid(self, u: sp.Expr, **kwargs: object) -> sp.Expr:
        s = sigmoid(u)
        return s * (1 + u * (1 - s))

    def _eval_is_real(self) -> bool | None:
        return self.args[0].is_real


class silu_backward(sp.Function):  # noqa: N801
    """a * silu_derivative(u), silu's backward: silu_backward(a, u)."""

    nargs = 2


class tanh_backward(sp.Function):  # noqa: N801
    """a * (1 - t**2), tanh's backward through its value t = tanh(u): tanh_backward(a, t), aten's one kernel."""

    nargs = 2


class cotangent_term(sp.Function):  # noqa: N801
    """cotangent_term(c, p): c * p, or nothing where the cotangent (or tangent) c is absent (None).

    A backward of several outputs is a sum over their cotangents; one the
    caller did not ask about arrives as None, and reading it as a zero
    makes 0 * inf = nan wherever another output's partial is infinite (the
    gradient of `x` itself came back nan at x = 1e300 beside `x**2`).  A
    JVP of several inputs is a sum over their tangents alike: an input held
    constant has none (JAX's symbolic zero), and a zero in its place made
    split3's dc/dx nan where exp(x) overflows, autodiff's inf.  The product
    is this node's own, never a subexpression cse could compute before the
    test.
    """

    nargs = 2


class cotangent_product(sp.Function):  # noqa: N801
    """cotangent_product(c, e): e, a product with the cotangent c that one of torch's native kernels computes
    (`-softplus_backward(c, u, 1, 40)` for c * (-sigmoid(u))), or nothing where c is absent (None)."""

    nargs = 2


class cotangent_sum(sp.Function):  # noqa: N801
    """cotangent_sum(x, t1, t2, ...): the sum of the `cotangent_term`s present, in the shape of x.

    The gradient of input x (torch: none present, no gradient), or the
    tangent of output x (JAX: none present, zeros).  Only the present terms
    are added: an absent one is no `+ 0.0`, a kernel of its own.
    """


class softplus_scaled(sp.Function):  # noqa: N801
    """softplus(beta * u) / beta, torch's softplus with its `beta`: softplus_scaled(u, beta)."""

    nargs = 2


class one_plus_erf(sp.Function):  # noqa: N801
    """1 + erf(u), computed as erfc(-u): no cancellation where erf(u) nears -1 (and one torch kernel, not two).

    Its own function because sympy evaluates erfc(-u) to 2 - erfc(u), the
    cancellation again.
    """

    nargs = 1

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        if argindex != 1:
            raise ArgumentIndexError(self, argindex)
        return 2 * sp.exp(-(self.args[0] ** 2)) / sp.sqrt(sp.pi)

    def _eval_rewrite_as_erf(self, arg: sp.Expr, **kwargs: object) -> sp.Expr:
        return 1 + sp.erf(arg)

    def _sympystr(self, printer: Any) -> str:
        # As the code computes it (docstrings, `rulegen show`).
        return f"erfc({printer._print(-self.args[0])})"


def one_plus_erf_of(u: Any) -> Any:
    """one_plus_erf for numpy arrays (the stabilising search's measure)."""
    import importlib

    return importlib.import_module("scipy.special").erfc(-np.asarray(u))


class gamma_sign(sp.Function):  # noqa: N801
    """The sign of Gamma(x), 1 or -1: a step, whose derivative is 0 wherever it has one.

    Its own function so that a canonical form's derivative has no floor in
    it (the printers write it as `sign_of_gamma`, from floor's parity).
    """

    nargs = 1

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        return sp.S.Zero

    @classmethod
    def eval(cls, arg: sp.Expr) -> sp.Expr | None:
        return sp.S.One if arg.is_positive else None

    def _eval_is_real(self) -> bool:
        return True


class isfinite(BooleanFunction):  # noqa: N801
    """isfinite(v): whether v is a finite number (not inf, not nan), printed as each backend's `isfinite`: a
    condition of a `where` that reads as what it tests (a quotient of a sum divided term by term where the sum
    overflows)."""

    nargs = 1

    @classmethod
    def eval(cls, value: sp.Expr) -> sp.Basic | None:
        if value.is_number:
            return sp.true if value.is_finite else sp.false
        return None


class where_finite(sp.Function):  # noqa: N801
    """where_finite(t, a, b): a where t is a finite number, else b; printed as `where(isfinite(t), a, b)`.

    A `where` whose condition tests a sum of `where`s: sympy folds any `where` inside a condition of its own
    Piecewise into if-then-elses over every branch, whenever the condition is built (seconds per sum, or a
    RecursionError).  A function of the test keeps it whole.
    """

    nargs = 3

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        if argindex == 1:
            return sp.S.Zero
        t = self.args[0]
        return where_finite(t, sp.S.One, sp.S.Zero) if argindex == 2 else where_finite(t, sp.S.Zero, sp.S.One)

    def _eval_is_real(self) -> bool | None:
        return fuzzy_and([self.args[1].is_real, self.args[2].is_real])

    def _eval_derivative(self, v: sp.Symbol) -> sp.Expr:
        # The selected branch's derivative: where_finite(t, a', b'), not a' times a where of 1 and 0.
        t, a, b = self.args
        return where_finite(t, sp.diff(a, v), sp.diff(b, v))


def where_finite_of(t: Any, a: Any, b: Any) -> Any:
    """where_finite in numpy (the accuracy search's evaluation)."""
    with np.errstate(all="ignore"):
        return np.where(np.isfinite(t), a, b)


def _mp_where_finite(t: mpmath.mpf, a: mpmath.mpf, b: mpmath.mpf) -> mpmath.mpf:
    return a if mpmath.isfinite(t) else b


class binade(sp.Function):  # noqa: N801
    """binade(m): the power of two at or below m > 0 (within a factor of two: any power of two scales exactly), and
    1 where m is 0, subnormal to the framework, inf or nan, so that no input is divided by 0 or inf.

    A homogeneous expression computed on its inputs divided by the binade of
    their largest magnitude (stabilise's scaling) neither overflows nor
    underflows where its unscaled products would; the division is exact, and
    the binade is constant between powers of two: its derivative is 0.
    """

    nargs = 1

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        return sp.S.Zero

    def _eval_is_positive(self) -> bool:
        return True


def undone_scale(s: sp.Expr) -> sp.Expr | None:
    """t where s is divided(1, t), a scaling's reciprocal (stabilise's t are powers of two); else None."""
    return s.args[1] if isinstance(s, divided) and s.args[0] == 1 else None


def reciprocal_of(s: sp.Expr) -> sp.Expr:
    """1 / s; t where s is divided(1, t): 1 / (1 / t) is t, exactly, and sympy cancels it against a 1 / t
    beside it, where `b * v * (1 / b)` would overflow at b * v."""
    scale = undone_scale(s)
    return 1 / s if scale is None else scale


class divided(sp.Function):  # noqa: N801
    """divided(x, s): x / s, kept whole: sympy distributes a power over a quotient ((x/s)**2 is x**2/s**2), which
    computes the very square that a scaling by s was to keep in range."""

    nargs = 2

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        x, s = self.args
        return reciprocal_of(s) if argindex == 1 else -x / s**2

    def _eval_is_real(self) -> bool | None:
        return self.args[0].is_real and self.args[1].is_real

    def _sympystr(self, printer: Any) -> str:
        # As a reader writes it (docstrings, `rulegen show`): the parentheses say it is computed whole, and a
        # scaling by a large power of two is one (x/2**32, not x/4294967296; x*2**32 for a scaling undone).
        x, s = self.args
        scale = undone_scale(s)
        operator, divisor = ("*", scale) if scale is not None else ("/", s)
        if divisor.is_Integer and divisor > 2**16 and int(divisor) & (int(divisor) - 1) == 0:
            shown = f"2**{int(divisor).bit_length() - 1}"
        else:
            shown = printer.parenthesize(divisor, PRECEDENCE["Mul"])
        return f"({printer.parenthesize(x, PRECEDENCE['Mul'])}{operator}{shown})"


class power_product(sp.Function):  # noqa: N801
    """power_product(b1, k1, b2, k2, ...) = b1**k1 * b2**k2 * ..., each k a nonzero integer, computed by the
    runtime's `power_product` (`_scaling.power_product`): each base brought near 1 by a power of two and the
    exponents put back at the end, so that no partial product under- or overflows where the whole is in range
    (t / (s**2 x) at (-8e301, 1.1e-17, 3.4e289) is 1.9e46: any order of its products is inf or 0 on the way).

    Its partial in b_i is k_i power_product(..., b_i, k_i - 1, ...): a product of the same kind, never the
    value divided by b_i.  Written with a single base, it is that base's power.
    """

    @classmethod
    def eval(cls, *args: sp.Expr) -> sp.Expr | None:
        if len(args) % 2 or not all(k.is_Integer for k in args[1::2]):
            raise TypeError(f"power_product takes (base, integer exponent) pairs, not {args}")
        pairs = _merged_powers(args)
        if len(pairs) < 2:
            return sp.Mul(*(b**k for b, k in pairs))
        if len(pairs) * 2 != len(args):
            return cls(*(a for pair in pairs for a in pair))
        return None

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        if argindex % 2 == 0:
            return sp.S.Zero  # an exponent: an integer literal
        args = list(self.args)
        k = args[argindex]
        args[argindex] = k - 1
        return k * power_product(*args)

    def _eval_is_real(self) -> bool | None:
        return fuzzy_and(b.is_real for b in self.args[0::2])

    def _eval_rewrite_as_Mul(self, *args: sp.Expr, **kwargs: object) -> sp.Expr:  # noqa: N802 (sympy's name)
        return sp.Mul(*(b**k for b, k in zip(args[0::2], args[1::2], strict=True)))

    _eval_rewrite_as_tractable = _eval_rewrite_as_Mul


def _merged_powers(args: tuple[sp.Expr, ...]) -> list[tuple[sp.Expr, sp.Expr]]:
    """The (base, exponent) pairs of `args`, a base met twice once with the exponents added, none of exponent 0."""
    merged: dict[sp.Expr, sp.Expr] = {}
    for b, k in zip(args[0::2], args[1::2], strict=True):
        merged[b] = merged.get(b, sp.S.Zero) + k
    return [(b, k) for b, k in merged.items() if k != 0]


def power_product_of(*args: Any) -> Any:
    """power_product in numpy, as the runtime computes it: the accuracy search's evaluation."""
    bases = np.broadcast_arrays(*(np.asarray(b, dtype=np.result_type(b, 1.0)) for b in args[0::2]))
    with np.errstate(all="ignore"):
        return _scaling.power_product(np, *_scaling.paired(bases, [int(k) for k in args[1::2]]))


def _mp_power_product(*args: mpmath.mpf) -> mpmath.mpf:
    value = mpmath.mpf(1)
    for b, k in zip(args[0::2], args[1::2], strict=True):
        value *= mpmath.mpf(b) ** int(k)
    return value


class hypot(cfunctions.hypot):  # noqa: N801
    """sqrt(x**2 + y**2), whose partials x / hypot(x, y) are `hypot_slope`, computed on x and y over their binade.

    Unscaled, the quotient is nan at (0, 0), where the frameworks' own derivative is 0, and 1 at equal subnormals
    (hypot(5e-324, 5e-324) rounds to 5e-324), where it is 0.7071: over the binade of the larger magnitude both are
    normal numbers, and a 0 divisor (both inputs 0, or flushed to it by XLA) divides 0 by 1.
    """

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        if argindex not in (1, 2):
            raise ArgumentIndexError(self, argindex)
        x, y = self.args
        return hypot_slope(x, y) if argindex == 1 else hypot_slope(y, x)


class hypot_slope(sp.Function):  # noqa: N801
    """hypot_slope(x, y) = d/dx hypot(x, y) = x / hypot(x, y), the runtime's `hypot_slope` in both backends
    (`_scaling.hypot_slope`: on x and y over their binade, 0 at (0, 0) as the frameworks', the direction at an
    infinite input), differentiated by its partials as stated here: y**2 / h**3 and -x y / h**3.

    Autodiff of the scaled quotient is inf * 0 or inf / inf where an input is 0 or infinite beside a subnormal or
    an infinity ((0, inf): nan, where the second derivative is 0).  At (0, 0), y**2 / h**3's limit, inf.
    """

    nargs = 2

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        x, y = self.args
        if argindex == 1:
            return Piecewise((sp.oo, sp.Eq(x, 0) & sp.Eq(y, 0)), (hypot_slope(y, x) * atan2_slope(y, x), True))
        if argindex == 2:
            return -hypot_slope(x, y) * atan2_slope(y, x)
        raise ArgumentIndexError(self, argindex)

    def _eval_rewrite_as_hypot(self, x: sp.Expr, y: sp.Expr, **kwargs: object) -> sp.Expr:
        return x / hypot(x, y)

    def _eval_is_real(self) -> bool | None:
        return self.args[0].is_real and self.args[1].is_real


class atan2(sp.atan2):  # noqa: N801
    """atan2(y, x), whose partials x / (x**2 + y**2) and -y / (x**2 + y**2) are `atan2_slope(x, y)` and
    `-atan2_slope(y, x)`, computed on x and y over their binade.  (0, 0) stays 0 / 0, nan: atan2 has no derivative
    there, and the frameworks' own is nan.
    """

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        if argindex not in (1, 2):
            raise ArgumentIndexError(self, argindex)
        y, x = self.args
        return atan2_slope(x, y) if argindex == 1 else -atan2_slope(y, x)


class atan2_slope(sp.Function):  # noqa: N801
    """atan2_slope(u, v) = u / (u**2 + v**2), atan2's partials, the runtime's `atan2_slope` in both backends,
    differentiated by its partials as stated here: (v**2 - u**2) / h**4 and -2 u v / h**4, h = hypot(u, v).

    The runtime computes it as ((u' / h') / s) / h', u' = u / s, h' = hypot(u', v') within [1, 3): each step's value
    within a factor 3 of the partial's.  (u' / h' / h') / s passed through the partial times s, subnormal where
    s < 1 and the partial near the smallest normal, which XLA flushes to 0 (d/dy atan2 at (0.8, 2.2e-308): 0 for
    3.4e-308); unscaled, (u / h) / h is what XLA under `jit` computes as u / (h * h), whose square underflows at
    the smallest normals and overflows past 1e154.  Autodiff of that quotient is inf * 0 at (±0, ±5e-324), where
    the partial overflows and its derivative in the zero input is 0: the partials here are computed whole, and
    (v**2 - u**2) as (v - u) (v + u), which does not cancel near the diagonal.
    """

    nargs = 2

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        u, v = self.args
        if argindex == 1:
            return atan2_slope(v, u) ** 2 - atan2_slope(u, v) ** 2
        if argindex == 2:
            return -2 * atan2_slope(u, v) * atan2_slope(v, u)
        raise ArgumentIndexError(self, argindex)

    def _eval_rewrite_as_hypot(self, u: sp.Expr, v: sp.Expr, **kwargs: object) -> sp.Expr:
        return u / (u**2 + v**2)

    def _eval_is_real(self) -> bool | None:
        return self.args[0].is_real and self.args[1].is_real


#: The torch runtime's functions computing registry functions of one pair of arguments together, on one scaling,
#: each with the functions it computes: its outputs are f(a, b) and f(b, a) of each, in order, for (a, b) as it
#: is called (`plane_slopes(x, y)`: hypot_slope(x, y), hypot_slope(y, x), atan2_slope(x, y), atan2_slope(y, x)).
#: Where nothing differentiates them, each computes its inline form; elsewhere a Function with their derivatives.
JOINT_RUNTIME: dict[str, tuple[str, ...]] = {
    "hypot_slopes": ("hypot_slope",),
    "atan2_slopes": ("atan2_slope",),
    "plane_slopes": ("hypot_slope", "atan2_slope"),
}


def hypot_slope_of(x: Any, y: Any) -> Any:
    """hypot_slope in numpy, as the runtime computes it: the accuracy search's evaluation."""
    with np.errstate(all="ignore"):
        return _scaling.hypot_slope(np, *np.broadcast_arrays(np.asarray(x), np.asarray(y)))


def atan2_slope_of(u: Any, v: Any) -> Any:
    """atan2_slope in numpy, as the runtime computes it: the accuracy search's evaluation."""
    with np.errstate(all="ignore"):
        return _scaling.atan2_slope(np, *np.broadcast_arrays(np.asarray(u), np.asarray(v)))


def _mp_direction(x: mpmath.mpf, y: mpmath.mpf) -> tuple[mpmath.mpf, mpmath.mpf] | None:
    """(x, y) read as a direction where one of them is infinite and the other finite (the unit vector its
    limit points along), None where neither is infinite."""
    if mpmath.isinf(x) and mpmath.isfinite(y):
        return mpmath.sign(x), mpmath.mpf(0)
    if mpmath.isinf(y) and mpmath.isfinite(x):
        return mpmath.mpf(0), mpmath.sign(y)
    return None


def _mp_hypot_slope(x: mpmath.mpf, y: mpmath.mpf) -> mpmath.mpf:
    # 0 at (0, 0), the frameworks' (hypot has no derivative there); the limit at an infinite input.
    direction = _mp_direction(x, y)
    if direction is not None:
        return direction[0]
    if x == 0 and y == 0:
        return mpmath.mpf(0)
    return x / mpmath.hypot(x, y)


def _mp_atan2_slope(u: mpmath.mpf, v: mpmath.mpf) -> mpmath.mpf:
    # 0 at an infinite input beside a finite one, its limit.
    if _mp_direction(u, v) is not None:
        return mpmath.mpf(0)
    return u / (u**2 + v**2)


def binade_of(m: Any) -> Any:
    """binade for numpy arrays (the stabilising search's measure)."""
    m = np.asarray(m)
    with np.errstate(all="ignore"):
        guarded = np.where((m > 0) & (m < np.inf), m, np.ones_like(m))
        # As the runtime's binade: held where its reciprocal is a normal float too (2**-1022 to 2**1022).
        top = np.frexp(np.finfo(m.dtype).max)[1] - 2
        return np.asarray(2.0, dtype=m.dtype) ** np.clip(np.floor(np.log2(guarded)), -top, top)


def _mp_binade(m: mpmath.mpf) -> mpmath.mpf:
    return mpmath.mpf(2) ** mpmath.floor(mpmath.log(m, 2)) if 0 < m < mpmath.inf else mpmath.mpf(1)


class in_float(sp.Function):  # noqa: N801
    """in_float(value, *anchors): an integer or boolean array, or a number, in the float dtype of `anchors`.

    `anchors` are the rule's float arrays; none stands for the framework's
    default float dtype.  Without it `2**k` of an integer array is integer
    arithmetic, `exp(k)` and `torch.where(c, 0.1, 0.2)` come out in the
    default dtype (float32) whatever the inputs' dtype, and a float64 rule
    would compute them in float32.
    """

    is_real = True

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        return sp.S.One if argindex == 1 else sp.S.Zero


class sigmoid_product(sp.Function):  # noqa: N801
    """a * sigmoid(beta * u), softplus's backward: sigmoid_product(a, u, beta)."""

    nargs = 3


class Piecewise(sp.Piecewise):
    """A Piecewise that keeps a negative power outside it: 1 / where(x != 0, x, 1) stays that.

    It keeps sympy's name, so that every printer prints it as the Piecewise it is.

    sympy's own would distribute it, where(x != 0, 1/x, 1): both branches of
    an array `where` are computed, so the guard is gone, 1/0 is computed at
    x = 0, and the derivatives there are nan (inf times a zero cotangent).
    """

    def __new__(cls, *args: Any, **options: Any) -> sp.Expr:
        return super().__new__(cls, *_nan_reads(args), **options)

    def _eval_power(self, exponent: sp.Expr) -> sp.Expr | None:
        if exponent.is_negative is not False:
            return None
        return super()._eval_power(exponent)


# Orderings, which nan makes false: nan takes a Piecewise's last piece.
_ORDERINGS = (sp.StrictLessThan, sp.LessThan, sp.StrictGreaterThan, sp.GreaterThan)


def _nan_reads(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """Two pieces, a stand-in last: the stand-in first, on the negated ordering, so that nan reads the variable.

    `where(x >= 0, x, 1)` (a stand-in for x in a branch a `where` drops) is 1 at x = nan, as every ordering is
    false there, and the branch that nan takes computes a finite number from it: log_ndtr(nan) was log_ndtr(1).
    `where(x < 0, 1, x)` is the same on every number and nan at nan.  sympy writes Not(x < 0) as x >= 0, so the
    negation is spelt as the other piece's, never left to it.
    """
    if len(args) != 2:
        return args
    first, last = (sp.functions.elementary.piecewise.ExprCondPair(*a) for a in args)
    if not isinstance(first.cond, _ORDERINGS) or last.cond != sp.true:
        return args
    compared = first.cond.free_symbols
    if first.expr.free_symbols & compared and not last.expr.free_symbols & compared:
        return ((last.expr, first.cond.negated), (first.expr, True))
    return args


def _clip(x: sp.Expr, lo: sp.Expr, hi: sp.Expr) -> sp.Expr:
    return sp.Min(sp.Max(x, lo), hi)


def _where(cond: sp.Basic, a: sp.Expr, b: sp.Expr) -> sp.Expr:
    return Piecewise((a, cond), (b, True))


#: Named constants a symbolic body may use.
CONSTANTS: Mapping[str, sp.Expr] = MappingProxyType({"pi": sp.pi, "E": sp.E, "inf": sp.oo, "oo": sp.oo})


def _mp_difference(terms: Callable[[], tuple[mpmath.mpf, mpmath.mpf]]) -> mpmath.mpf:
    """a - b of `terms()` = (a, b) at the working precision, however many of their leading bits cancel: each try
    computes them with more guard bits than the last one lost (near a root of digamma or of log|Gamma| on the
    negative axis the two terms of a reflection agree to as many bits as the float is close to the root)."""
    extra = 32
    while True:
        with mpmath.extraprec(extra):
            a, b = terms()
            difference = a - b
        lost = max(mpmath.mag(a), mpmath.mag(b)) - mpmath.mag(difference) if difference else extra + mpmath.mp.prec
        if lost <= extra - 16 or extra > 8 * mpmath.mp.prec + 4096:
            return +difference
        extra = 2 * extra + int(lost)


def _mp_pole(x: mpmath.mpf) -> bool:
    """Whether x is 0 or a negative integer: a pole of Gamma and of each polygamma."""
    return x <= 0 and x == mpmath.floor(x)


def _mp_log_abs_gamma(x: mpmath.mpf) -> mpmath.mpf:
    """log|Gamma(x)|, the frameworks' gammaln (mpmath's loggamma is complex on the negative axis): there by the
    reflection log|Gamma(x)| = log(pi / |sin(pi x)|) - log Gamma(1 - x), sinpi reducing x exactly."""
    if _mp_pole(x):
        raise ValueError("gamma function pole")
    if x > 0:
        return mpmath.loggamma(x)
    return _mp_difference(lambda: (mpmath.log(mpmath.pi / abs(mpmath.sinpi(x))), mpmath.loggamma(1 - x)))


def _cotangent_derivative(order: int) -> list[int]:
    """The coefficients, lowest power first, of the polynomial P with d^n/dt^n cot(t) = P(cot(t)), n = `order`:
    P_0(c) = c and P_(n+1)(c) = -(1 + c**2) P_n'(c), as cot' = -(1 + cot**2).  Its terms have one sign at each c
    (each power's parity is n + 1's), so that no digit cancels between them."""
    coefficients = [0, 1]
    for _ in range(order):
        slope = [k * c for k, c in enumerate(coefficients)][1:] or [0]
        grown = [0] * (len(slope) + 2)
        for k, c in enumerate(slope):
            grown[k] -= c
            grown[k + 2] -= c
        coefficients = grown
    return coefficients


def _mp_polygamma(order: mpmath.mpf, x: mpmath.mpf) -> mpmath.mpf:
    """polygamma(n, x), n >= 0, in bounded time on the whole line: mpmath's own runs for seconds at x = -1e6 and
    for minutes past -1e10 (a sum of as many terms), and scipy's too.  For x < 0 the reflection
    psi_n(x) = (-1)**n psi_n(1 - x) - pi**(n+1) P_n(cot(pi x)) (`_cotangent_derivative`), from mpmath's cospi and
    sinpi, which reduce the float x exactly; psi_n(1 - x) is at a positive argument, where mpmath's is fast."""
    n = int(order)
    if n != order or n < 0:
        return mpmath.polygamma(order, x)
    if _mp_pole(x):
        raise ValueError("polygamma pole")
    if x > 0:
        return mpmath.polygamma(n, x)

    def terms() -> tuple[mpmath.mpf, mpmath.mpf]:
        cotangent = mpmath.cospi(x) / mpmath.sinpi(x)
        polynomial = mpmath.polyval(_cotangent_derivative(n)[::-1], cotangent)
        return (-1) ** n * mpmath.polygamma(n, 1 - x), mpmath.pi ** (n + 1) * polynomial

    return _mp_difference(terms)


def polygamma_of(order: Any, x: Any) -> Any:
    """polygamma(n, x) in numpy: for n >= 1 and x < 0 by the reflection of `_mp_polygamma` (cot(pi t) at
    t = x - round(x), exact in floats, as `_polygamma_by_reflection` computes it), where scipy's polygamma(n, x)
    sums |x| terms (minutes at x = -1e10); scipy's elsewhere.  The accuracy search's evaluation."""
    import importlib

    special = importlib.import_module("scipy.special")
    x = np.asarray(x)
    n = int(order)
    if n == 0:
        # scipy's digamma is right and fast on the whole line; its polygamma(0, x) is float64 whatever x is.
        return special.polygamma(0, x)
    with np.errstate(all="ignore"):
        negative = np.where(x < 0, x, -0.5)
        nearest = negative - np.floor(negative + 0.5)
        cotangent = np.cos(np.pi * nearest) / np.sin(np.pi * nearest)
        # Horner's rule from the leading coefficient (numpy's polyval starts from 0, and 0 * inf is nan at a pole).
        coefficients = _cotangent_derivative(n)[::-1]
        polynomial = np.full_like(cotangent, coefficients[0])
        for coefficient in coefficients[1:]:
            polynomial = polynomial * cotangent + coefficient
        reflected = (-1) ** n * special.polygamma(n, 1 - negative) - np.pi ** (n + 1) * polynomial
        return np.where(x < 0, reflected, special.polygamma(n, np.where(x < 0, 1.0, x)))


def zeta_of(s: Any, q: Any) -> Any:
    """zeta(s, q) in numpy, in bounded time on the whole line: scipy's (cephes') sums from q up to 9 one term at a
    time, so it does not return at q = -1e300 (q + 1 == q) and takes minutes at -1e10.  For q < 0 the sum is
    real only for an integer s, where it is (-1)**s polygamma(s - 1, q) / (s - 1)! (`polygamma_of`, reflected);
    nan for any other s, as scipy's.  The accuracy search's evaluation."""
    import importlib

    special = importlib.import_module("scipy.special")
    s, q = np.broadcast_arrays(np.asarray(s), np.asarray(q))
    with np.errstate(all="ignore"):
        order = np.where(s == np.floor(s), s, np.nan) - 1
        reflected = np.full(np.shape(q), np.nan, dtype=np.result_type(q, float))
        negative = (q < 0) & (order >= 1)
        for n in np.unique(order[negative]).astype(int):
            at = negative & (order == n)
            reflected[at] = (-1) ** (n + 1) * polygamma_of(n, q[at]) / math.factorial(n)
        return np.where(q < 0, reflected, special.zeta(s, np.where(q < 0, 1.0, q)))


def _mp_sigmoid(x: mpmath.mpf) -> mpmath.mpf:
    return 1 / (1 + mpmath.exp(-x))


def _mp_sigmoid_slope(x: mpmath.mpf) -> mpmath.mpf:
    return _mp_sigmoid(x) * _mp_sigmoid(-x)


def _mp_softplus(x: mpmath.mpf) -> mpmath.mpf:
    return mpmath.log1p(mpmath.exp(x))


def _mp_logaddexp(a: mpmath.mpf, b: mpmath.mpf) -> mpmath.mpf:
    m = max(a, b)
    return m + mpmath.log(mpmath.exp(a - m) + mpmath.exp(b - m))


def _mp_xlogy(x: mpmath.mpf, y: mpmath.mpf) -> mpmath.mpf:
    return mpmath.mpf(0) if x == 0 else x * mpmath.log(y)


def _mp_i0e(x: mpmath.mpf) -> mpmath.mpf:
    return mpmath.exp(-abs(x)) * mpmath.besseli(0, x)


def _mp_i1e(x: mpmath.mpf) -> mpmath.mpf:
    return mpmath.exp(-abs(x)) * mpmath.besseli(1, x)


def _mp_xlog1py(x: mpmath.mpf, y: mpmath.mpf) -> mpmath.mpf:
    return mpmath.mpf(0) if x == 0 else x * mpmath.log1p(y)


def _mp_log1pmx(z: mpmath.mpf) -> mpmath.mpf:
    """log1p(z) - z with the digits its cancellation takes (-z**2/2 of terms of size z)."""
    with mpmath.extraprec(max(0, -int(mpmath.log(abs(z), 2))) + 10 if z else 10):
        value = mpmath.log1p(z) - z
    return +value


def _mp_entr(x: mpmath.mpf) -> mpmath.mpf:
    if x > 0:
        return -x * mpmath.log(x)
    return mpmath.mpf(0) if x == 0 else -mpmath.inf


def _negative_or(x: sp.Expr, stand_in: sp.Expr) -> sp.Expr:
    """x where x < 0, else `stand_in`: a reflection's argument, finite in the branch a `where` drops.

    An array `where` computes both branches, and its derivative is the
    dropped one's times 0: a pole there (the cotangent of pi * frac(x) at a
    positive integer) would make it nan.
    """
    return Piecewise((x, x < 0), (stand_in, True))


def _nonnegative_or(x: sp.Expr, stand_in: sp.Expr) -> sp.Expr:
    """x where x >= 0, else `stand_in`: `_negative_or`'s other half."""
    return Piecewise((x, x >= 0), (stand_in, True))


def _polygamma_by_reflection(order: sp.Expr, x: sp.Expr) -> sp.Expr:
    """polygamma(n, x), n >= 0, from 1 - x where x < 0: JAX's is wrong there (-1e-4 for 15.08 at x = -10000.3),
    and torch's float32 one 1e-3 off (15.0765 for 15.0928 at x = -10000.3).

    psi_n(x) = (-1)**n psi_n(1 - x) - pi d^n/dx^n cot(pi x), whose cotangent is
    taken at x - floor(x + 1/2), in [-1/2, 1/2] (its period is 1, and the
    difference is exact in floats, where pi * x would round away the digits
    that matter; near 0 rather than near 1, where sin(pi * u) would cancel:
    float32's trigamma at -2.1 lost 4.9 bits with u = frac(x) = 0.9).
    Order 0, digamma, too: its value is right in both frameworks, but their
    derivative of it is their own polygamma(1, x), so a rule's second
    derivative through digamma (loggamma's) was wrong for x < 0.
    """
    if not (order.is_Integer and order >= 0):
        return sp.polygamma(order, x)
    u = sp.Dummy("u")
    # digamma just below 0 (order 0, x in [-1/8, 0)) by the recurrence psi(1 + x) - 1/x instead: the reflection's
    # two derivatives, -trigamma(1 - x) and pi**2 / sin(pi x)**2, have opposite signs, and where Gamma is
    # infinite (x subnormal) the second derivative of Gamma gives them an infinite cotangent: inf - inf.  The
    # recurrence's, trigamma(1 + x) and 1 / x**2, have one sign; psi(1 + x) is in [-0.75, -0.58] there and -1/x
    # at least 8 (no digit lost).
    recurring = int(order) == 0
    close = (x >= -RECURRENCE_BELOW_ZERO) & (x < 0) if recurring else sp.false
    negative = Piecewise((x, (x < 0) & ~close), (sp.Rational(-1, 2), True))
    nearest = negative - sp.floor(negative + sp.S.Half)
    cotangent = sp.diff(sp.cos(sp.pi * u) / sp.sin(sp.pi * u), u, int(order)).subs(u, nearest)
    reflected = (-1) ** int(order) * sp.polygamma(order, 1 - negative) - sp.pi * cotangent
    # From 2**27 on, psi_n(x) = (-1)**(n+1) ((n-1)! / x**n + n! / (2 x**(n+1))) to a float64 rounding (the next
    # term is n(n+1)/(12 x**2) of the first), and psi(x) = log(x) - 1 / (2x): both frameworks' polygamma is 0
    # there past 1e20 and nan at inf, where it is 1/x and 0, and it is what they differentiate digamma by.
    # Powers of r = 1/x, so that none overflows (x**2 at 1e200) where the term is 0.
    n, far = int(order), sp.Integer(POLYGAMMA_SERIES_FROM)
    # Each branch is fed its own region's input (the double `where`): reverse mode gives the branch a `where`
    # drops a zero cotangent, and zero times a pole's infinite derivative (at a tiny negative x) is nan.  nan
    # takes the last branch of each: nan in, nan out.
    large = Piecewise((far, x < far), (x, True))
    if n == 0:
        # From 2**53 on, 1 / (2x) is below half an ulp of log(x), and left out: its derivative underflows to 0
        # there, and times an infinite Gamma (whose derivative is Gamma * digamma) would be nan.
        huge = sp.Integer(2) ** 53
        r = divided(sp.S.One, Piecewise((far, x < far), (huge, x >= huge), (x, True)))
        series = Piecewise((sp.log(large), x >= huge), (sp.log(large) - r / 2, True))
    else:
        r = divided(sp.S.One, large)
        series = (-1) ** (n + 1) * (sp.factorial(n - 1) * r**n + sp.factorial(n) / 2 * r ** (n + 1))
    near = Piecewise((far - 1, (x < 0) | (x >= far)), (x, True))
    if recurring:
        small = Piecewise((x, close), (-RECURRENCE_BELOW_ZERO / 2, True))
        recurrence = sp.polygamma(order, 1 + small) - divided(sp.S.One, small)
        return Piecewise((recurrence, close), (reflected, x < 0), (series, x >= far), (sp.polygamma(order, near), True))
    return Piecewise((reflected, x < 0), (series, x >= far), (sp.polygamma(order, near), True))


#: digamma is psi(1 + x) - 1/x from -1/8 up to 0 (`_polygamma_by_reflection`).
RECURRENCE_BELOW_ZERO = sp.Rational(1, 8)


#: Where polygamma(n, x), n >= 1, and zeta(s, q) are their asymptotic series (`_polygamma_by_reflection`,
#: `_zeta_with_series`).
POLYGAMMA_SERIES_FROM = 2**27


def _zeta_with_series(s: sp.Expr, q: sp.Expr) -> sp.Expr:
    """zeta(s, q), from q = 2**27 on its series q**(1-s) / (s-1) + q**-s / 2 + s q**(-s-1) / 12 (the next term
    q**-4 of the first): JAX's zeta(2, q) is 0 from q = 1e20 in float32 and 1e200 in float64, where it is 1/q,
    torch's float64 too.  Powers of r = 1/q, as polygamma's series."""
    far = sp.Integer(POLYGAMMA_SERIES_FROM)
    r = divided(sp.S.One, Piecewise((q, q >= far), (far, True)))
    series = r ** (s - 1) / (s - 1) + r**s / 2 + s * r ** (s + 1) / 12
    near = Piecewise((q, q < far), (far - 1, True))
    return Piecewise((series, q >= far), (sp.zeta(s, near), True))


def _digamma_by_reflection(x: sp.Expr) -> sp.Expr:
    return _polygamma_by_reflection(sp.S.Zero, x)


def _ndtr_by_erfc(x: sp.Expr) -> sp.Expr:
    """Phi(x) as erfc(-x / sqrt 2) / 2: torch's ndtr is (1 + erf(x / sqrt 2)) / 2, 0 below x = -8.3 in float64
    (1.8% off at x = -8) and 4% off at x = -5 in float32; erfc keeps the left tail (619 eps at x = -35.5,
    JAX's ndtr 395). As one_plus_erf, printed so: sympy would turn erfc(-u) into 2 - erfc(u)."""
    return one_plus_erf(x / sp.sqrt(2)) / 2


def _log_ndtr_by_erfcx(x: sp.Expr) -> sp.Expr:
    """log Phi(x): JAX's is log(ndtr(x)) up to x = 8 (1.6e12 eps off at x = 7.5, where it is -3e-14) and a
    three-term series below x = -20 (7e4 eps off at -20.5).

    log(erfcx(-x / sqrt 2) / 2) - x (x / 2) below 0 (within 2 eps; x**2 / 2 of x itself, where the square of
    the rounded x / sqrt 2 would be 2 eps off; halved before the product, since x**2 overflows on
    [-1.9e154, -1.3e154] in float64 where log Phi(x) is a finite -x**2 / 2), log1p(-Phi(-x)) above.  Each
    branch's argument is a stand-in in the other's half, where its value would overflow and its derivative,
    times the `where`'s 0, be nan.
    """
    negative, positive = _negative_or(x, sp.S.NegativeOne), _nonnegative_or(x, sp.S.One)
    left = sp.log(erfcx(-negative / sp.sqrt(2)) / 2) - negative * divided(negative, 2)
    return Piecewise((left, x < 0), (log1p(-ndtr(-positive)), True))


def sign_of_gamma(x: sp.Expr) -> sp.Expr:
    """The sign of Gamma(x): -1 on (-1, 0), (-3, -2), ..., where floor(x) is odd; exact in floats."""
    # floor(x) halved, not x: x / 2 rounds -5e-324 to -0, whose floor made the parity -1 and the sign 3.
    parity = sp.floor(x) - 2 * sp.floor(sp.floor(x) / 2)
    return Piecewise((1 - 2 * parity, x < 0), (sp.S.One, True))


def beta_by_log_gamma(a: sp.Expr, b: sp.Expr) -> sp.Expr:
    """beta(a, b) as sgn * exp(log|Gamma(a)| + log|Gamma(b)| - log|Gamma(a + b)|), where no argument is large.

    torch has no beta, and JAX's is nan on much of the negative axis (at
    a = -30.7, b = 0.7; its derivatives at every a < 0).  `beta_by_cases`
    takes it where the arguments are moderate.
    """
    return _beta_sign(a, b) * sp.exp(sp.loggamma(a) + sp.loggamma(b) - sp.loggamma(a + b))


def _beta_sign(a: sp.Expr, b: sp.Expr) -> sp.Expr:
    return sign_of_gamma(a) * sign_of_gamma(b) * sign_of_gamma(a + b)


#: From where an argument of beta is large (`beta_by_cases`, `betaln`): log Gamma(x) is Stirling's (x - 1/2) log x
#: - x + log(2 pi) / 2 plus `_stirling_rest`, and log Gamma's difference is taken in closed form, where log|Gamma|
#: of two numbers near 1e200 (4.6e202) would cancel, and of two near 1e5 (1.05e6, for log beta(1e5, 1/2) = -5.2)
#: loses 17 bits.
BETA_LARGE_FROM = 8

#: From where both arguments of beta are so large that beta is 0 and so is each derivative (both dtypes: 2**120
#: is a float32 number, and beta(2**120, 2**120) is 2**-(2**121)).  Also where both are inf, whose ratio is nan.
BETA_VANISHES_FROM = 2**120

#: Where |b| is below this fraction of |a|, d/da beta(a, b) is its expansion in b (`beta_slope_by_cases`):
#: digamma(a) - digamma(a + b) is -b trigamma(a + b / 2) to within (b / a)**2 of itself, where the difference
#: would cancel (to 0 at a + b = a in floats: -4.93 for 0 at (0.5, 1e-300), the limit -trigamma(a) at b = 0).
BETA_EXPANDED_BELOW = sp.Rational(1, 2**24)


def _is_pole(x: sp.Expr) -> sp.Basic:
    """Whether x is a pole of Gamma (0 or a negative integer; false at nan): floor(x) >= x only at integers."""
    return (x <= 0) & (sp.floor(x) >= x)


#: Stirling's series of log Gamma(x) - ((x - 1/2) log x - x + log(2 pi) / 2): B_2k / (2k (2k - 1)) x**(1 - 2k).
#: Seven terms from x = 8 (`BETA_LARGE_FROM`), where the eighth is 8.4e-16.
_STIRLING_SERIES = tuple(sp.bernoulli(2 * k) / (2 * k * (2 * k - 1)) for k in range(1, 8))


def _stirling_rest(x: sp.Expr) -> sp.Expr:
    """log Gamma(x) - ((x - 1/2) log x - x + log(2 pi) / 2) for x >= `BETA_LARGE_FROM`, in Horner form in 1 / x**2:
    0 at inf.  Plain quotients here (of stand-ins, never 0): a static input's beta is Python arithmetic
    throughout."""
    r = 1 / x
    total = sp.S.Zero
    for c in reversed(_STIRLING_SERIES):
        total = c + r * r * total
    return r * total


def _log1p_ratio(x: sp.Expr, y: sp.Expr, small: sp.Basic) -> sp.Expr:
    """log1p(u) / u of u = x / y: 1 - u / 2 + u**2 / 3 where `small` says |u| < 2**-26 (0 / 0 at u = 0, where an
    argument is infinite)."""
    u = x / y
    near = Piecewise((sp.S.One, small), (u, True))
    return Piecewise((1 - u / 2 + u**2 / 3, small), (log1p(near) / near, True))


def _log_abs_beta(a: sp.Expr, b: sp.Expr, *, bounded: bool = True) -> sp.Expr:
    """log|beta(a, b)| of arguments that are not poles of Gamma, and (`bounded`) not both at least
    `BETA_VANISHES_FROM`, where beta is 0 and its logarithm is not.

    Where both are large, log(2 pi) / 2 - log(y) / 2 - (x - 1/2) log1p(y / x) - y log1p(x / y) with Stirling's
    rests, x <= y; where only y and a + b are, log|Gamma(x)| + log Gamma(y) - log Gamma(x + y) as
    -(x + y - 1/2) log1p(x / y) - x log(y) + x with the rests, the first product x (1 + (x - 1/2) / y) times
    log1p(u) / u (finite at y = inf, where -x log(y) is beta's -inf or inf); elsewhere log|Gamma| summed.
    """
    x, y, s = sp.Min(a, b), sp.Max(a, b), a + b
    large = sp.Integer(BETA_LARGE_FROM)
    both = (x >= large) & (x < BETA_VANISHES_FROM) if bounded else x >= large
    one = (y >= large) & (s >= large) & ~both
    # Each branch its own region's arguments, a stand-in elsewhere (2**27 for the large, 1/2 for the small).
    x2, y2 = (Piecewise((v, both), (large, True)) for v in (x, y))
    two_large = (
        sp.log(2 * sp.pi) / 2
        - sp.log(y2) / 2
        + _stirling_rest(x2)
        + _stirling_rest(y2)
        - _stirling_rest(x2 + y2)
        - (x2 - sp.S.Half) * log1p(y2 / x2)
        - y2 * log1p(x2 / y2)
    )
    x1, y1 = Piecewise((x, one), (sp.S.Half, True)), Piecewise((y, one), (large, True))
    one_large = (
        sp.loggamma(x1)
        + _stirling_rest(y1)
        - _stirling_rest(x1 + y1)
        - x1 * (1 + (x1 - sp.S.Half) / y1) * _log1p_ratio(x1, y1, sp.Abs(x) < y * sp.Rational(1, 2**26))
        - x1 * sp.log(y1)
        + x1
    )
    a0, b0 = (Piecewise((sp.S.Half, both | one), (v, True)) for v in (a, b))
    small = sp.loggamma(a0) + sp.loggamma(b0) - sp.loggamma(a0 + b0)
    return Piecewise((two_large, both), (one_large, one), (small, True))


#: At or below this a negative argument of beta is reflected (`_reflects`).  Above it, in (-1/2, 0), sin(pi a) is
#: as small as a, and the reflected partial's two terms cancel (at (-2.2e-308, 5e-324) both are pi); the log Gamma
#: sum has nothing to cancel there.
BETA_REFLECTED_BELOW = sp.Rational(-1, 2)


def _reflects(a: sp.Expr, b: sp.Expr) -> sp.Basic:
    """Whether beta(a, b) is reflected in a (`_reflected_pieces`): a at most `BETA_REFLECTED_BELOW` and no pole,
    b > 0 and a + b < 0 (a pole of Gamma or not; false at nan and at the infinities, which are poles here)."""
    return (a <= BETA_REFLECTED_BELOW) & ~_is_pole(a) & (b > 0) & (a + b < 0)


def _odd(k: sp.Expr) -> sp.Expr:
    """1 where the integer k is odd, else 0: exact in floats below 2**53."""
    return k - 2 * sp.floor(k / 2)


def _sin_pi(x: sp.Expr) -> sp.Expr:
    """sin(pi x) of x - k, k = floor(x + 1/2) (exact in floats), with the sign of k's parity: pi * x would round
    away the digits that matter (1.6e4 eps at x = -1e4 + 0.3), and sin(pi k) is 0 exactly."""
    k = sp.floor(x + sp.S.Half)
    return (1 - 2 * _odd(k)) * sp.sin(sp.pi * (x - k))


class _Grouped(sp.UnevaluatedExpr):
    """An operand kept whole (sympy would flatten a sum of sums and reorder its terms), real unless it is known not
    to be (sympy takes floor() of an operand of unknown realness, a symbol of no assumptions, for non-real)."""

    def _eval_is_extended_real(self) -> bool:
        return self.args[0].is_extended_real is not False

    def _eval_is_real(self) -> bool:
        return self.args[0].is_real is not False


def _sin_pi_of_sum(a: sp.Expr, b: sp.Expr) -> sp.Expr:
    """sin(pi (a + b)), the sum taken of a and b each less its nearest integer (exact), then reduced again: the
    rounding of a + b itself moves it by up to half an ulp of the sum (9e-13 at -1e4), where the exact sum of
    -30.7 and 0.7 is 6.7e-16 from the pole -30 that a + b rounds to."""
    ka, kb = sp.floor(a + sp.S.Half), sp.floor(b + sp.S.Half)
    t = _Grouped(a - ka) + _Grouped(b - kb)
    k = sp.floor(t + sp.S.Half)
    return (1 - 2 * _odd(ka + kb + k)) * sp.sin(sp.pi * (t - k))


def _reflected_pieces(a: sp.Expr, b: sp.Expr) -> tuple[sp.Expr, sp.Expr, sp.Expr, sp.Expr]:
    """(sin(pi a), sin(pi (a + b)), sin(pi b), log beta(b, 1 - a - b)) where `_reflects(a, b)`, of stand-ins
    elsewhere: Gamma's reflection gives beta(a, b) = beta(b, 1 - a - b) sin(pi (a + b)) / sin(pi a), both arguments
    of the beta positive.  log|Gamma(a)| - log|Gamma(a + b)| (about -8.2e4 each at a = -1e4 + 0.3, b = 0.7) would
    cancel (1.6e4 eps), and at a pole a + b of Gamma beta is 0 and its derivative a number, not 0 * inf."""

    def pieces(a1: sp.Expr, b1: sp.Expr) -> sp.Expr:
        return sp.Tuple(_sin_pi(a1), _sin_pi_of_sum(a1, b1), _sin_pi(b1), _log_abs_beta(b1, 1 - a1 - b1))

    found = _of_stand_ins(pieces, _reflects(a, b), (a, sp.Rational(-5, 4)), (b, sp.S.Half))
    return found[0], found[1], found[2], found[3]


def _of_stand_ins(build: Callable[..., sp.Expr], inside: sp.Basic, *pairs: tuple[sp.Expr, sp.Expr]) -> sp.Expr:
    """`build` of each (value, stand-in) of `pairs` as the value where `inside`, the stand-in elsewhere: a branch
    fed its own region's input (reverse mode gives a branch a `where` drops a zero cotangent, times an infinite
    derivative nan)."""
    return build(*(Piecewise((v, inside), (stand_in, True)) for v, stand_in in pairs))


def _beta_pieces(a: sp.Expr, b: sp.Expr, *, logarithm: bool) -> sp.Expr:
    """beta(a, b), or (`logarithm`) log|beta(a, b)|, at every real pair: sgn * exp(`_log_abs_beta`) or
    `_log_abs_beta` alone, with the poles and limits.

    A pole of Gamma in a or b is inf (mpmath's beta there, which has no sign), but where a + b is one too and the
    other argument a positive integer: then (-1)**b beta(b, 1 - a - b), Gamma's reflection (beta(-max, max) is
    1/max).  From `BETA_VANISHES_FROM` both ways beta is 0, its logarithm a number (-inf past the largest float).
    Where an argument is reflected (`_reflects`), beta(b, 1 - a - b) sin(pi (a + b)) / sin(pi a).
    nan takes the last piece: nan out.
    """
    s = a + b

    def value(sign: sp.Expr, log_abs: sp.Expr) -> sp.Expr:
        return log_abs if logarithm else sign * sp.exp(log_abs)

    def reflected(other: sp.Expr) -> sp.Expr:
        # (-1)**other by a comparison: 1 - 2 (other - 2 floor(other / 2)), which sympy expands, overflows at max.
        even = sp.Eq(2 * sp.floor(other / 2), other)
        return value(Piecewise((sp.S.One, even), (sp.S.NegativeOne, True)), _log_abs_beta(other, 1 - s))

    def pole_beside(pole: sp.Expr, other: sp.Expr) -> sp.Basic:
        # a + b is a pole only through the other argument's being an integer, not a + b's rounding to one.
        return _is_pole(pole) & _is_pole(s) & (other > 0) & (sp.floor(other) >= other)

    def reflection(a: sp.Expr, b: sp.Expr) -> tuple[sp.Expr, sp.Basic]:
        sine_a, sine_s, _, log_beta = _reflected_pieces(a, b)
        sign = Piecewise((sp.S.One, sp.Equivalent(sine_a < 0, sine_s < 0)), (sp.S.NegativeOne, True))
        return value(sign, log_beta + sp.log(sp.Abs(sine_s)) - sp.log(sp.Abs(sine_a))), _reflects(a, b)

    zero = -sp.oo if logarithm else sp.S.Zero
    vanishes = [] if logarithm else [(sp.S.Zero, sp.Min(a, b) >= BETA_VANISHES_FROM)]
    return Piecewise(
        (reflected(b), pole_beside(a, b)),
        (reflected(a), pole_beside(b, a)),
        (zero, (_is_inf(a) & (b > 0)) | (_is_inf(b) & (a > 0))),
        # beta(+-0, inf): the limits of Gamma(+-e) inf**-+e, 0 and -inf (mpmath's beta(0, inf) is nan).
        (zero, (_is_inf(a) & _is_plus_zero(b)) | (_is_inf(b) & _is_plus_zero(a))),
        (sp.oo if logarithm else -sp.oo, (_is_inf(a) & sp.Eq(b, 0)) | (_is_inf(b) & sp.Eq(a, 0))),
        (sp.oo, (_is_pole(a) | _is_pole(b)) & _is_number(a) & _is_number(b)),
        *vanishes,
        reflection(a, b),
        reflection(b, a),
        (value(_beta_sign(a, b), _log_abs_beta(a, b, bounded=not logarithm)), True),
    )


# beta's, betaln's and beta_slope's cases are built once per pair of arguments: sympy simplifies each Piecewise as
# it is built (seconds of CPU for each), and a printer asks for them twice (its text and how tightly that binds).
# Every process that prints them (a build, each test worker) built them again: they are kept on disk
# (`stored.kept`), but for betaln's, whose tree pickle does not give back as it was (an `Or`'s arguments), and
# which `stored.load` would refuse each time.
@kept
def beta_by_cases(a: sp.Expr, b: sp.Expr) -> sp.Expr:
    """beta(a, b) at every real pair (`_beta_pieces`)."""
    return _beta_pieces(a, b, logarithm=False)


@functools.cache
def betaln_by_cases(a: sp.Expr, b: sp.Expr) -> sp.Expr:
    """log|beta(a, b)| at every real pair (`_beta_pieces`): finite where beta under- or overflows."""
    return _beta_pieces(a, b, logarithm=True)


def _is_inf(x: sp.Expr) -> sp.Basic:
    """Whether x is +inf, in either dtype: its half is itself (false at nan, and at the largest float)."""
    return (x > 0) & (divided(x, 2) >= x)


def _is_plus_zero(x: sp.Expr) -> sp.Basic:
    """Whether x is +0 (not -0): 1 / x is +inf."""
    return sp.Eq(x, 0) & (divided(sp.S.One, x) > 0)


def _is_number(x: sp.Basic) -> sp.Basic:
    """Whether x is no nan (true at the infinities): |x / 2| <= |x|.  A condition, where a constant piece
    (beta's inf at a pole) has no factor that reads x: in a `where`, the product of inf and such a factor gets the
    dropped piece's zero cotangent as nan at the next order."""
    return sp.Abs(divided(x, 2)) <= sp.Abs(x)


def _finite(x: sp.Expr) -> sp.Basic:
    """Whether x is a number and not +inf (nan at an infinity's pole pieces: no limit there)."""
    return _is_number(x) & ~_is_inf(x)


def _digamma_difference(a: sp.Expr, b: sp.Expr) -> sp.Expr:
    """digamma(a) - digamma(a + b) as digamma(1 + a) - digamma(1 + a + b) - (b / a) / (a + b), by the recurrence:
    where a is subnormal digamma(a) is -inf (-1/a overflows), and two of them inf - inf, where the difference,
    -1 / (2a) at b = a, is a number or an infinity of its sign."""
    return (
        _polygamma_by_reflection(sp.S.Zero, 1 + a)
        - _polygamma_by_reflection(sp.S.Zero, 1 + a + b)
        - divided(divided(b, a), a + b)
    )


@kept
def beta_slope_by_cases(a: sp.Expr, b: sp.Expr) -> sp.Expr:
    """d/da beta(a, b) = beta(a, b) (digamma(a) - digamma(a + b)), right where beta over- or underflows.

    The product in logarithms, sgn exp(log|beta| + log|d|), where beta is inf or 0 and the product is not
    (beta(5e-324, max) is inf, its derivative -inf; beta(max, 5e-324) inf, its derivative -1/max); 0 where
    log|beta| is below -2**126 (beta 0, the digamma difference at most inf: 0, not 0 * inf).  Where |b| is
    below `BETA_EXPANDED_BELOW` of |a|, its expansion in b, -trigamma(a + b/2) Gamma(1 + b) exp(-b digamma(a + b/2))
    (b beta(a, b) times the difference over b): the limit -trigamma(a) at b = 0, where beta is a pole.  At
    a = 0, a pole of beta, its limit -inf; inf times the difference's sign at the other poles (mpmath's beta is
    inf there).  Where an argument is reflected (`_reflects`), the derivative of the reflection's product
    (`_reflected_slope`, `_reflected_slope_beside`).  digamma and trigamma are the registry's
    (`_polygamma_by_reflection`).
    """
    s = a + b
    expanded = (sp.Abs(b) <= BETA_EXPANDED_BELOW * sp.Abs(a)) & sp.Ne(a, 0)

    def expansion_of(a1: sp.Expr, b1: sp.Expr) -> sp.Expr:
        middle = a1 + b1 / 2
        return -sign_of_gamma(1 + b1) * sp.exp(
            sp.log(_polygamma_by_reflection(sp.S.One, middle))
            + sp.loggamma(1 + b1)
            - Piecewise((sp.S.Zero, sp.Eq(b1, 0)), (b1 * _polygamma_by_reflection(sp.S.Zero, middle), True))
        )

    # The expansion reads its own region's arguments, stand-ins elsewhere: a + b / 2 is a pole of trigamma
    # outside it (-2 at (-3.25, 2.5)), whose infinite derivative times the `where`'s zero cotangent is nan.
    expansion = _of_stand_ins(expansion_of, expanded, (a, sp.S.Half), (b, sp.S.Zero))
    # At a pole b (an integer), digamma(a + b) reflected: digamma(a) - digamma(a + b) = digamma(1 - a) -
    # digamma(1 - a - b), whose sign is the derivative's (beta is inf there, as mpmath's).  Where neither
    # condition below says it, nan.
    residue = sign_of_gamma(b) * sign_of_gamma(s)
    # Infinities are constant pieces, their signs conditions (see `_is_number`).  The last piece reads stand-ins
    # where beta is reflected: at a pole a + b of Gamma its digamma difference's derivative is inf, times the
    # `where`'s zero cotangent nan.
    reflected = _reflects(a, b) | _reflects(b, a)

    def last(a2: sp.Expr, b2: sp.Expr) -> sp.Expr:
        return sp.Tuple(_log_abs_beta(a2, b2), _digamma_difference(a2, b2), _beta_sign(a2, b2))

    log_beta_inside, difference, sign = _of_stand_ins(last, ~reflected, (a, sp.S.Half), (b, sp.S.Half))
    log_beta = _log_abs_beta(a, b)
    return Piecewise(
        (-sp.oo, sp.Eq(a, 0) & _is_number(b) & ~_is_inf(b)),
        (sp.S.Zero, sp.Min(a, b) >= BETA_VANISHES_FROM),
        (sp.oo, _is_pole(b) & expanded & (b < 0)),
        (expansion, expanded),
        (sp.S.Zero, _is_inf(b) & (a > 0)),
        (sp.oo, _is_inf(b) & (a < 0) & ~_is_pole(a) & (sign_of_gamma(a) < 0)),
        (-sp.oo, _is_inf(b) & (a < 0) & ~_is_pole(a)),
        # At a pole b, the sign of digamma(1 - a) - digamma(1 - a - b): digamma increases on (0, inf).
        (-sp.oo, _is_pole(b) & (a < 1)),
        (sp.oo, _is_pole(b) & (s > 0)),
        # At a pole a = -k, -sign of Gamma's residue there times Gamma(b) / Gamma(a + b).
        (sp.oo, _is_pole(a) & _finite(b) & sp.Equivalent(sp.Eq(2 * sp.floor(a / 2), a), residue < 0)),
        (-sp.oo, _is_pole(a) & _finite(b)),
        (_reflected_slope(a, b), _reflects(a, b)),
        (_reflected_slope_beside(a, b), _reflects(b, a)),
        (sp.S.Zero, log_beta < -(sp.Integer(2) ** 126)),
        (sign * sp.exp(log_beta_inside) * difference, True),
    )


def _reflected_slope(a: sp.Expr, b: sp.Expr) -> sp.Expr:
    """d/da beta(a, b) where a is reflected (`_reflected_pieces`): with B = beta(b, 1 - a - b), whose log has the
    derivative psi(1 - a) - psi(1 - a - b), and d/da sin(pi (a + b)) / sin(pi a) = -pi sin(pi b) / sin(pi a)**2
    (no difference of products), B / sin(pi a) ((psi(1 - a) - psi(1 - a - b)) sin(pi (a + b)) - pi sin(pi b) /
    sin(pi a)): a number at a pole a + b of Gamma, where sin(pi (a + b)) is 0."""
    sine_a, sine_s, sine_b, log_beta = _reflected_pieces(a, b)

    def digammas(a1: sp.Expr, s1: sp.Expr) -> sp.Expr:
        return _polygamma_by_reflection(sp.S.Zero, 1 - a1) - _polygamma_by_reflection(sp.S.Zero, 1 - s1)

    difference = _of_stand_ins(digammas, _reflects(a, b), (a, sp.Rational(-5, 4)), (a + b, sp.Rational(-3, 4)))
    return sp.exp(log_beta) / sine_a * (difference * sine_s - sp.pi * sine_b / sine_a)


def _reflected_slope_beside(a: sp.Expr, b: sp.Expr) -> sp.Expr:
    """d/da beta(a, b) where b is reflected (`_reflected_pieces` of (b, a)): B = beta(a, 1 - a - b), whose log has
    the derivative psi(a) - psi(1 - a - b), and d/da sin(pi (a + b)) / sin(pi b) = pi cos(pi (a + b)) / sin(pi b):
    B / sin(pi b) ((psi(a) - psi(1 - a - b)) sin(pi (a + b)) + pi cos(pi (a + b)))."""
    sine_b, sine_s, _, log_beta = _reflected_pieces(b, a)

    def parts(a1: sp.Expr, b1: sp.Expr, s1: sp.Expr) -> sp.Expr:
        # cos(pi s) = sin(pi (s + 1/2)), reduced as the sine of the sum is.
        digammas = _polygamma_by_reflection(sp.S.Zero, a1) - _polygamma_by_reflection(sp.S.Zero, 1 - s1)
        return sp.Tuple(digammas, _sin_pi_of_sum(b1, a1 + sp.S.Half))

    pairs = ((a, sp.S.Half), (b, sp.Rational(-5, 4)), (a + b, sp.Rational(-3, 4)))
    difference, cosine_s = _of_stand_ins(parts, _reflects(b, a), *pairs)
    return sp.exp(log_beta) / sine_b * (difference * sine_s + sp.pi * cosine_s)


def _trigamma_difference(a: sp.Expr, b: sp.Expr) -> sp.Expr:
    """trigamma(a) - trigamma(a + b) as trigamma(1 + a) - trigamma(1 + a + b) + (b / a / (a + b)) (1 / a +
    1 / (a + b)), by the recurrence (`_digamma_difference`'s): 1 / a**2 - 1 / (a + b)**2 is inf - inf where a is
    tiny, the product of its factors a number or an infinity of its sign."""
    s = a + b
    ratio = divided(divided(b, a), s)
    return (
        _polygamma_by_reflection(sp.S.One, 1 + a)
        - _polygamma_by_reflection(sp.S.One, 1 + s)
        + _Grouped(ratio) * (divided(sp.S.One, a) + divided(sp.S.One, s))
    )


@kept
def beta_curvature_by_cases(a: sp.Expr, b: sp.Expr) -> sp.Expr:
    """d^2/da^2 beta(a, b) = beta(a, b) ((digamma(a) - digamma(a + b))**2 + trigamma(a) - trigamma(a + b)),
    beta_slope's partial in a, stated (`beta_slope.fdiff`) and computed whole, as beta_slope's cases are.

    In logarithms, sgn exp(log|beta| + log|q|) of q = d**2 + t, where beta under- or overflows and the product
    is a number (at (2, 1.29e20) float32's beta is 0, the curvature 1.27e-37).  2 / a**3 where that overflows
    (a = 0 and tiny a, whatever b: its leading term), an infinity of a's sign.  Where |b| is below
    `BETA_EXPANDED_BELOW` of |a|, the derivative of beta_slope's expansion, -Gamma(1 + b) exp(-b digamma(m))
    (tetragamma(m) - b trigamma(m)**2), m = a + b / 2: the limit -tetragamma(a) at b = 0.  At b = inf, 0 beside
    a > 0 and Gamma(a)'s sign times inf beside a < 0 (beta ~ Gamma(a) b**-a); at a pole of Gamma in a or b
    other than b = 0, where beta has no value, nan.  Where an argument is reflected (`_reflects`), the second
    derivative of the reflection's product (`_reflected_curvature`, `_reflected_curvature_beside`).  Autodiff
    of beta_slope's cases was inf * 0 and inf - inf at these (nan at 76 float64 special points).
    """
    expanded = (sp.Abs(b) <= BETA_EXPANDED_BELOW * sp.Abs(a)) & sp.Ne(a, 0)
    cube = divided(divided(divided(sp.Integer(2), a), a), a)

    def expansion_of(a1: sp.Expr, b1: sp.Expr) -> sp.Expr:
        middle = a1 + b1 / 2
        trigamma = _polygamma_by_reflection(sp.S.One, middle)
        scale = sp.exp(
            sp.loggamma(1 + b1)
            - Piecewise((sp.S.Zero, sp.Eq(b1, 0)), (b1 * _polygamma_by_reflection(sp.S.Zero, middle), True))
        )
        # b trigamma(m) first: trigamma(m)**2 overflows where the product does not (m = 1e-90).
        return (
            -sign_of_gamma(1 + b1)
            * scale
            * (_polygamma_by_reflection(sp.Integer(2), middle) - _Grouped(b1 * trigamma) * trigamma)
        )

    expansion = _of_stand_ins(expansion_of, expanded, (a, sp.S.Half), (b, sp.S.Zero))
    reflected = _reflects(a, b) | _reflects(b, a)

    def last(a2: sp.Expr, b2: sp.Expr) -> sp.Expr:
        d = _digamma_difference(a2, b2)
        return sp.Tuple(_log_abs_beta(a2, b2), d * d + _trigamma_difference(a2, b2), _beta_sign(a2, b2))

    log_beta_inside, q, sign = _of_stand_ins(last, ~reflected, (a, sp.S.Half), (b, sp.S.Half))
    log_beta = _log_abs_beta(a, b)
    return Piecewise(
        (sp.S.Zero, sp.Min(a, b) >= BETA_VANISHES_FROM),
        (sp.S.Zero, _is_inf(a) & (b >= 0)),
        (sp.S.Zero, _is_inf(b) & (a > 0)),
        (-sp.oo, _is_inf(b) & (a < 0) & ~_is_pole(a) & (sign_of_gamma(a) < 0)),
        (sp.oo, _is_inf(b) & (a < 0) & ~_is_pole(a)),
        (cube, _is_inf(sp.Abs(cube)) & _finite(b) & ~(_is_pole(b) & (b < 0))),
        (sp.nan, _is_pole(b) & (b < 0)),
        (expansion, expanded),
        (sp.nan, _is_pole(a) | _is_pole(b)),
        (_reflected_curvature(a, b), _reflects(a, b)),
        (_reflected_curvature_beside(a, b), _reflects(b, a)),
        (sp.S.Zero, log_beta < -(sp.Integer(2) ** 126)),
        # Grouped: sympy writes exp(l + log(q)) as q exp(l), whose exp(l) is subnormal, which XLA flushes to 0
        # (at (2, 1.29e20) in float32, beta is 5.6e-41, the curvature 1.27e-37).
        (sign * sp.sign(q) * sp.exp(_Grouped(log_beta_inside + sp.log(sp.Abs(q)))), True),
    )


def _reflected_curvature(a: sp.Expr, b: sp.Expr) -> sp.Expr:
    """d^2/da^2 beta(a, b) where a is reflected: with B = beta(b, 1 - a - b), g = psi(1 - a) - psi(1 - a - b)
    (log B's derivative) and its derivative g' = psi1(1 - a - b) - psi1(1 - a), the product B sin(pi (a + b)) /
    sin(pi a) differentiated twice: B / sin(pi a) ((g**2 + g') sin(pi (a + b)) - 2 pi g sin(pi b) / sin(pi a) +
    2 pi**2 sin(pi b) cos(pi a) / sin(pi a)**2), a number at a pole a + b of Gamma."""
    sine_a, sine_s, sine_b, log_beta = _reflected_pieces(a, b)

    def parts(a1: sp.Expr, s1: sp.Expr) -> sp.Expr:
        g = _polygamma_by_reflection(sp.S.Zero, 1 - a1) - _polygamma_by_reflection(sp.S.Zero, 1 - s1)
        slope = _polygamma_by_reflection(sp.S.One, 1 - s1) - _polygamma_by_reflection(sp.S.One, 1 - a1)
        return sp.Tuple(g, slope, _sin_pi_of_sum(a1, sp.S.Half))

    g, slope, cosine_a = _of_stand_ins(parts, _reflects(a, b), (a, sp.Rational(-5, 4)), (a + b, sp.Rational(-3, 4)))
    ratio = sine_b / sine_a
    return (
        sp.exp(log_beta)
        / sine_a
        * ((g * g + slope) * sine_s - 2 * sp.pi * g * ratio + 2 * sp.pi**2 * ratio * cosine_a / sine_a)
    )


def _reflected_curvature_beside(a: sp.Expr, b: sp.Expr) -> sp.Expr:
    """d^2/da^2 beta(a, b) where b is reflected: with B = beta(a, 1 - a - b), h = psi(a) - psi(1 - a - b) and
    h' = psi1(a) + psi1(1 - a - b), B sin(pi (a + b)) / sin(pi b) differentiated twice in a: B / sin(pi b)
    ((h**2 + h' - pi**2) sin(pi (a + b)) + 2 pi h cos(pi (a + b)))."""
    sine_b, sine_s, _, log_beta = _reflected_pieces(b, a)

    def parts(a1: sp.Expr, b1: sp.Expr, s1: sp.Expr) -> sp.Expr:
        h = _polygamma_by_reflection(sp.S.Zero, a1) - _polygamma_by_reflection(sp.S.Zero, 1 - s1)
        slope = _polygamma_by_reflection(sp.S.One, a1) + _polygamma_by_reflection(sp.S.One, 1 - s1)
        return sp.Tuple(h, slope, _sin_pi_of_sum(b1, a1 + sp.S.Half))

    pairs = ((a, sp.S.Half), (b, sp.Rational(-5, 4)), (a + b, sp.Rational(-3, 4)))
    h, slope, cosine_s = _of_stand_ins(parts, _reflects(b, a), *pairs)
    return sp.exp(log_beta) / sine_b * ((h * h + slope - sp.pi**2) * sine_s + 2 * sp.pi * h * cosine_s)


class beta(sp.beta):  # noqa: N801
    """Euler's beta function, whose partials are `beta_slope`: beta (digamma(a) - digamma(a + b)) written so that
    it is right where beta over- or underflows (sympy's product is inf * 0 and 0 * inf there)."""

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        a, b = self.args
        if argindex == 1:
            return beta_slope(a, b)
        if argindex == 2:
            return beta_slope(b, a)
        raise ArgumentIndexError(self, argindex)


class betaln(sp.Function):  # noqa: N801
    """log|beta(a, b)|, as scipy's and JAX's betaln: what log(beta(a, b)) of positive a and b is written as
    (`rulegen.derive.forms`), finite where beta under- or overflows (beta(11, 1e308) is 0, its log -2.4e252).
    Its partials are digamma differences, which the stabilising search takes as it takes any."""

    nargs = 2

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        a, b = self.args
        if argindex == 1:
            return sp.digamma(a) - sp.digamma(a + b)
        if argindex == 2:
            return sp.digamma(b) - sp.digamma(a + b)
        raise ArgumentIndexError(self, argindex)

    def _eval_rewrite_as_loggamma(self, a: sp.Expr, b: sp.Expr, **kwargs: object) -> sp.Expr:
        return sp.loggamma(a) + sp.loggamma(b) - sp.loggamma(a + b)

    _eval_rewrite_as_tractable = _eval_rewrite_as_loggamma

    def _eval_is_real(self) -> bool | None:
        return self.args[0].is_real and self.args[1].is_real


class beta_slope(sp.Function):  # noqa: N801
    """beta_slope(a, b) = d/da beta(a, b) = beta(a, b) (digamma(a) - digamma(a + b)), the runtime's `beta_slope` in
    both backends (`_beta.py`): `beta_slope_by_cases`, differentiated in a by `beta_curvature_by_cases` (the first
    partial stated here, computed whole) and in b by autodiff of the cases."""

    nargs = 2

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        a, b = self.args
        d = sp.digamma(a) - sp.digamma(a + b)
        if argindex == 1:
            return self * d + beta(a, b) * (sp.polygamma(1, a) - sp.polygamma(1, a + b))
        if argindex == 2:
            return self * (sp.digamma(b) - sp.digamma(a + b)) - beta(a, b) * sp.polygamma(1, a + b)
        raise ArgumentIndexError(self, argindex)

    def _eval_rewrite_as_beta(self, a: sp.Expr, b: sp.Expr, **kwargs: object) -> sp.Expr:
        return beta(a, b) * (sp.digamma(a) - sp.digamma(a + b))

    _eval_rewrite_as_tractable = _eval_rewrite_as_beta

    def _eval_is_real(self) -> bool | None:
        return self.args[0].is_real and self.args[1].is_real


def beta_ratios(expr: sp.Expr) -> sp.Expr:
    """`expr` with each beta_slope(a, b) divided by beta(a, b) written digamma(a) - digamma(a + b): log(beta)'s
    derivative, which sympy's own product form cancels to the difference, and which the quotient of two
    functions that under- and overflow together would make 0 / 0 (beta(1e200, 1e200) is 0)."""

    def ratio(product: sp.Mul) -> sp.Expr:
        factors = list(product.args)
        for k, slope in enumerate(factors):
            if not isinstance(slope, beta_slope):
                continue
            a, b = slope.args
            for j, other in enumerate(factors):
                base, exponent = other.as_base_exp()
                if j != k and isinstance(base, beta) and base.args == (a, b) and exponent.is_negative:
                    rest = [f for i, f in enumerate(factors) if i not in (j, k)]
                    difference = sp.digamma(a) - sp.digamma(a + b)
                    return ratio(sp.Mul(*rest, difference, base ** (exponent + 1)))
        return product

    return expr.replace(lambda e: e.is_Mul and e.has(beta_slope), ratio)


def _digits_spanning(*args: mpmath.mpf) -> int:
    """Digits beyond the working precision that span `args`' scales (at most 700): a + b keeps the smaller's
    digits, where mpmath's beta(0.5, 1e200) at 40 digits is 1.77 (for 1.77e-100)."""
    scales = [abs(v) for v in args if v != 0 and mpmath.isfinite(v)]
    if not scales:
        return 0
    spread = mpmath.log10(max(max(scales), 1)) - mpmath.log10(min(min(scales), 1))
    return min(int(spread) + 10, 700)


#: Bits to which the beta references round their working precision up, as the accuracy check rounds every exact
#: value's (rulegen.check.accuracy.PRECISION_STEP): mpmath keeps the Bernoulli numbers of its digamma and gamma's
#: Taylor coefficients per working precision, and digits that follow each point's scales (`_digits_spanning`) had
#: them computed afresh point after point (two thirds of a Student-t log-density's accuracy check).
SPANNING_PRECISION_STEP = 256
#: Bits beyond those that span the arguments' scales: a float64's and as many again.
SPANNING_GUARD_BITS = 128


@contextmanager
def _spanning_precision(*args: mpmath.mpf) -> Iterator[None]:
    """The working precision, or `_digits_spanning(*args)` digits beyond SPANNING_GUARD_BITS where that is more,
    rounded up to SPANNING_PRECISION_STEP.

    A precision that spans the arguments' scales keeps the smaller's digits in a + b; one on top of the working
    precision, which already spans the inputs' scales wherever `exact_value` sets it, only made each digamma of
    the references slower (mpmath's digamma at 6,000 bits: 14 ms a call).
    """
    step = SPANNING_PRECISION_STEP
    spanning = mpmath.libmp.dps_to_prec(_digits_spanning(*args)) + SPANNING_GUARD_BITS
    with mpmath.workprec(-(-max(mpmath.mp.prec, spanning) // step) * step):
        yield


def _mp_beta(a: mpmath.mpf, b: mpmath.mpf) -> mpmath.mpf:
    with _spanning_precision(a, b):
        return +mpmath.beta(a, b)


def _mp_betaln(a: mpmath.mpf, b: mpmath.mpf) -> mpmath.mpf:
    return +mpmath.log(abs(_mp_beta(a, b)))


def _mp_beta_slope(a: mpmath.mpf, b: mpmath.mpf) -> mpmath.mpf:
    """d/da beta(a, b): its limit -trigamma(a) at b = 0, and the difference of digammas in b's expansion where
    b is below the precision of a + b (a one-sided limit's stand-in for 0, 1e-450)."""
    with _spanning_precision(a, b):
        # Trigamma by `_mp_polygamma`: mpmath's sums |x| terms at a negative x (minutes at a = -1e6).
        if b == 0:
            return -_mp_polygamma(1, a)
        if _mp_pole(a) or _mp_pole(a + b):
            # No value, as the digammas' difference says (it raises there); b's expansion, taken at a + b/2, has one.
            raise ValueError("polygamma pole")
        if abs(b) < abs(a) * mpmath.mpf(10) ** (-mpmath.mp.dps // 2):
            difference = -b * _mp_polygamma(1, a + b / 2)
        else:
            difference = mpmath.psi(0, a) - mpmath.psi(0, a + b)
        return +(mpmath.beta(a, b) * difference)


def _mp_gamma_sign(x: mpmath.mpf) -> mpmath.mpf:
    return mpmath.mpf(1) if x > 0 else mpmath.mpf(1 - 2 * (int(mpmath.floor(x)) % 2))


def _zero(*args: object) -> mpmath.mpf:
    return mpmath.mpf(0)


def _rsqrt(x: sp.Expr) -> sp.Expr:
    return 1 / sp.sqrt(x)


#: An mpmath implementation (a field of MathFunction is named `mpmath`, which hides the module in its body).
MpmathFunction = Callable[..., mpmath.mpf]


@dataclass(frozen=True)
class MathFunction:
    """One function a rule may call or the printers may meet, and how each backend computes it.

    `jax`, `torch` and `math` name the function of that backend which prints
    it as one call, `jnp.exp(x)`.  Where printing is code of its own (torch's
    gamma, a Piecewise, a clamp of Python numbers), a `_print_<name>` method
    of the printer writes it, using these names where it calls one.
    """

    #: The name rules call it by; for a sympy class, the class's name, on which the printers dispatch.
    name: str
    #: Builds the expression from the arguments: a sympy class, or a function that
    #: writes it with other registered ones (`where` builds a Piecewise).
    sympy: Callable[..., sp.Basic]
    jax: str | None = None
    torch: str | None = None
    #: Python's `math` function, for numbers and static inputs (Python floats).
    math: str | None = None
    #: Where `lambdify(modules="mpmath")` has no implementation: the high-precision reference's own.
    mpmath: Callable[..., mpmath.mpf] | None = None
    #: The torch.Tensor method that computes it into its argument's buffer.
    in_place: str | None = None
    #: Other names rules may call it by, the frameworks' spellings.
    aliases: tuple[str, ...] = ()
    #: (fewest, most) arguments, where the sympy class's `nargs` does not say it or says it loosely.
    arity: tuple[int, int] | None = None
    #: torch's function takes no Python number: torch.atan2(x, 2.0) raises.
    torch_tensor_only: bool = False
    #: Whether torch computes a call of tensors as one kernel: None where that is
    #: exactly when `torch` names one call (a `_print_<name>` that writes more says False).
    torch_one_kernel: bool | None = None
    #: Where it is defined on the real line: an open interval per argument, the whole line where not given.
    #: An argument that is an integer order (polygamma's first) is the interval of the orders the checks try.
    domain: tuple[tuple[float, float], ...] = ()
    #: How many leading arguments are orders (polygamma's n) or exponents (zeta's s), never differentiated:
    #: sympy has no derivative in them, and the checks hold them at the literal their interval starts at.
    orders: int = 0
    #: Where JAX's function is wrong on part of its domain: builds, from the call's arguments,
    #: the expression of registered functions that JAX code computes instead.
    jax_replacement: Callable[..., sp.Expr] | None = None
    #: The same for torch's function.
    torch_replacement: Callable[..., sp.Expr] | None = None
    #: Where torch's op lacks a derivative at some order (forward mode, or in an argument) or is wrong
    #: (float64's trigamma): the function of the runtime's `torch/_special.py` that computes it, with the
    #: registry's derivatives. Every torch printer prints the function so, wherever it meets a call.
    torch_runtime: str | None = None
    #: The same for JAX: the function of the runtime's `jax/_special.py` (a `custom_jvp` with the registry's
    #: derivative) that every JAX printer prints wherever it meets a call.
    jax_runtime: str | None = None
    #: The printers write a call of Python numbers alone as Python code of their own, with no `math` function.
    python_numbers: bool = False
    #: A distribution such as DiracDelta that the frameworks' autodiff gives as 0 away
    #: from a kink: derivatives and the high-precision reference take it as 0.
    vanishes_almost_everywhere: bool = False
    #: sympy evaluates it exactly at a number, which for a large one takes unbounded time: a rule may not call
    #: it on a large literal.  (The high-precision reference, mpmath, computes it in bounded time on the whole
    #: float line: `_mp_polygamma`, `_mp_log_abs_gamma`.)
    refuses_large_numbers: bool = False
    #: Rules cannot call it: derivatives produce it, or the plan writes it after deriving.
    internal: bool = False
    #: Only the torch printer meets it (the plan writes it for torch alone).
    torch_only: bool = False
    #: Complex differentiable, and computed for complex arrays by both backends: a complex rule may call it.
    holomorphic: bool = False
    #: The numpy or scipy function (a dotted name) that the stabilising search evaluates it with, where the JAX
    #: name does not say it (`numpy_name`).
    numpy: str | None = None

    @property
    def numpy_name(self) -> str | None:
        """The numpy or scipy function computing it on float arrays: `numpy`, else the one JAX's name mirrors
        (jax.scipy.special.X is scipy.special.X, jnp.X is numpy.X); None where there is none."""
        if self.numpy is not None:
            return self.numpy
        for jax_prefix, numpy_prefix in (("jax.scipy.special.", "scipy.special."), ("jnp.", "numpy.")):
            if self.jax is not None and self.jax.startswith(jax_prefix):
                return numpy_prefix + self.jax.removeprefix(jax_prefix)
        return None

    @property
    def numbers_alone(self) -> Literal["math", "python", "array"]:
        """How both backends compute a call whose arguments are all Python numbers (static inputs).

        `math`: as Python arithmetic with the `math` function.  `python`: a
        Python expression of the printer's own (a conditional for Piecewise).
        `array`: the backend's function of a 0-d array of the rule's float
        dtype: torch's takes no Python number (torch.sigmoid(0.5) raises), and
        JAX's makes a float64 array of one (jax.scipy.special.ndtr(0.5)), which
        would promote a float32 rule's result.
        """
        if self.math:
            return "math"
        return "python" if self.python_numbers else "array"

    @property
    def one_torch_kernel(self) -> bool:
        """Whether torch computes a call of tensors in one kernel (see `torch_one_kernel`)."""
        return self.torch is not None if self.torch_one_kernel is None else self.torch_one_kernel

    @property
    def reference(self) -> MpmathFunction | None:
        """The high-precision reference's implementation where mpmath has none of this name."""
        if self.vanishes_almost_everywhere:
            return _zero
        return self.mpmath

    def argument_domain(self, index: int) -> tuple[float, float]:
        """The open interval where argument `index` is defined (see `domain`)."""
        return self.domain[index] if index < len(self.domain) else (-math.inf, math.inf)

    @property
    def rule_names(self) -> tuple[str, ...]:
        return () if self.internal else (self.name, *self.aliases)

    @property
    def argument_counts(self) -> tuple[int, int]:
        """The fewest and most arguments it takes."""
        if self.arity is not None:
            return self.arity
        nargs = getattr(self.sympy, "nargs", None)
        if isinstance(nargs, sp.FiniteSet) and nargs:
            values = sorted(int(n) for n in nargs)
            return values[0], values[-1]
        return 1, 1


#: Every math function rulegen knows.  The tables below, the parser's
#: whitelist and the printers' `_print_<name>` methods are derived from it,
#: so a function is added here and nowhere else.
REGISTRY: tuple[MathFunction, ...] = (
    MathFunction("exp", sp.exp, "jnp.exp", "torch.exp", math="math.exp", in_place="exp_", holomorphic=True),
    MathFunction(
        "log",
        sp.log,
        "jnp.log",
        "torch.log",
        math="math.log",
        in_place="log_",
        arity=(1, 1),
        holomorphic=True,
        domain=((0.0, math.inf),),
    ),
    MathFunction(
        "sqrt", sp.sqrt, "jnp.sqrt", "torch.sqrt", math="math.sqrt", holomorphic=True, domain=((0.0, math.inf),)
    ),
    MathFunction("sin", sp.sin, "jnp.sin", "torch.sin", math="math.sin", in_place="sin_", holomorphic=True),
    MathFunction("cos", sp.cos, "jnp.cos", "torch.cos", math="math.cos", in_place="cos_", holomorphic=True),
    MathFunction("tan", sp.tan, "jnp.tan", "torch.tan", math="math.tan", in_place="tan_", holomorphic=True),
    MathFunction(
        "asin",
        sp.asin,
        "jnp.arcsin",
        "torch.asin",
        math="math.asin",
        in_place="asin_",
        holomorphic=True,
        domain=((-1.0, 1.0),),
    ),
    MathFunction(
        "acos",
        sp.acos,
        "jnp.arccos",
        "torch.acos",
        math="math.acos",
        in_place="acos_",
        holomorphic=True,
        domain=((-1.0, 1.0),),
    ),
    MathFunction("atan", sp.atan, "jnp.arctan", "torch.atan", math="math.atan", in_place="atan_", holomorphic=True),
    MathFunction(
        "atan2",
        atan2,
        "jnp.arctan2",
        "torch.atan2",
        torch_tensor_only=True,
        # XLA's arctan2 of subnormal inputs, flushed partway: nan at (1e-45, 1e-45), -pi at (5e-324, -max).
        jax_runtime="atan2",
    ),
    MathFunction(
        "sinh",
        sp.sinh,
        "jnp.sinh",
        "torch.sinh",
        math="math.sinh",
        in_place="sinh_",
        holomorphic=True,
    ),
    MathFunction(
        "cosh",
        sp.cosh,
        "jnp.cosh",
        "torch.cosh",
        math="math.cosh",
        in_place="cosh_",
        holomorphic=True,
    ),
    MathFunction("tanh", sp.tanh, "jnp.tanh", "torch.tanh", math="math.tanh", in_place="tanh_", holomorphic=True),
    MathFunction(
        "asinh", sp.asinh, "jnp.arcsinh", "torch.asinh", math="math.asinh", in_place="asinh_", holomorphic=True
    ),
    MathFunction(
        "acosh",
        sp.acosh,
        "jnp.arccosh",
        "torch.acosh",
        math="math.acosh",
        in_place="acosh_",
        holomorphic=True,
        domain=((1.0, math.inf),),
    ),
    MathFunction(
        "atanh",
        sp.atanh,
        "jnp.arctanh",
        "torch.atanh",
        math="math.atanh",
        in_place="atanh_",
        holomorphic=True,
        domain=((-1.0, 1.0),),
    ),
    MathFunction(
        "log1p",
        log1p,
        "jnp.log1p",
        "torch.log1p",
        math="math.log1p",
        mpmath=mpmath.log1p,
        in_place="log1p_",
        holomorphic=True,
        domain=((-1.0, math.inf),),
    ),
    MathFunction(
        "expm1",
        expm1,
        "jnp.expm1",
        "torch.expm1",
        math="math.expm1",
        mpmath=mpmath.expm1,
        in_place="expm1_",
        holomorphic=True,
    ),
    MathFunction(
        "hypot", hypot, "jnp.hypot", "torch.hypot", math="math.hypot", mpmath=mpmath.hypot, torch_tensor_only=True
    ),
    # hypot's and atan2's partials, printed as the runtime's: differentiated by the registry's derivatives.
    MathFunction(
        "hypot_slope",
        hypot_slope,
        numpy="rulegen.derive.functions.hypot_slope_of",
        mpmath=_mp_hypot_slope,
        jax_runtime="hypot_slope",
        torch_runtime="hypot_slope",
        torch_one_kernel=False,
        internal=True,
    ),
    MathFunction(
        "atan2_slope",
        atan2_slope,
        numpy="rulegen.derive.functions.atan2_slope_of",
        mpmath=_mp_atan2_slope,
        jax_runtime="atan2_slope",
        torch_runtime="atan2_slope",
        torch_one_kernel=False,
        internal=True,
    ),
    MathFunction("erf", sp.erf, "jax.scipy.special.erf", "torch.special.erf", math="math.erf", in_place="erf_"),
    MathFunction("erfc", sp.erfc, "jax.scipy.special.erfc", "torch.special.erfc", math="math.erfc", in_place="erfc_"),
    MathFunction(
        "erfinv",
        sp.erfinv,
        "jax.scipy.special.erfinv",
        "torch.special.erfinv",
        mpmath=mpmath.erfinv,
        domain=((-1.0, 1.0),),
    ),
    # torch.special has no gamma: the torch printer writes it from gammaln.
    MathFunction("gamma", sp.gamma, "jax.scipy.special.gamma", math="math.gamma", refuses_large_numbers=True),
    MathFunction(
        "loggamma",
        sp.loggamma,
        "jax.scipy.special.gammaln",
        "torch.special.gammaln",
        math="math.lgamma",
        mpmath=_mp_log_abs_gamma,
        refuses_large_numbers=True,
    ),
    MathFunction(
        "digamma",
        sp.digamma,
        "jax.scipy.special.digamma",
        "torch.special.digamma",
        refuses_large_numbers=True,
        jax_replacement=_digamma_by_reflection,
        torch_replacement=_digamma_by_reflection,
        # torch's autograd derivative of it is torch's float64 trigamma (see polygamma's).
        torch_runtime="digamma",
    ),
    MathFunction(
        "polygamma",
        sp.polygamma,
        "jax.scipy.special.polygamma",
        "torch.special.polygamma",
        mpmath=_mp_polygamma,
        numpy="rulegen.derive.functions.polygamma_of",
        arity=(2, 2),
        refuses_large_numbers=True,
        domain=((1, 2), (-math.inf, math.inf)),
        orders=1,
        jax_replacement=_polygamma_by_reflection,
        torch_replacement=_polygamma_by_reflection,
        # torch's float64 trigamma is its float32 algorithm: 2.2e6 eps off at x = 1.1.
        torch_runtime="polygamma",
    ),
    # torch has no beta; both compute it by cases (see beta_by_cases), and its partials by beta_slope's.
    MathFunction(
        "beta",
        beta,
        "jax.scipy.special.beta",
        mpmath=_mp_beta,
        arity=(2, 2),
        refuses_large_numbers=True,
        jax_replacement=beta_by_cases,
        torch_replacement=beta_by_cases,
    ),
    MathFunction(
        "betaln",
        betaln,
        mpmath=_mp_betaln,
        numpy="scipy.special.betaln",
        arity=(2, 2),
        refuses_large_numbers=True,
        internal=True,
        jax_replacement=betaln_by_cases,
        torch_replacement=betaln_by_cases,
    ),
    # beta's partial, printed as the runtime's `beta_slope` (`_beta.py`): its cases, differentiated by the registry's
    # partial in a (`beta_curvature_by_cases`), not autodiff of the cases.
    MathFunction(
        "beta_slope",
        beta_slope,
        mpmath=_mp_beta_slope,
        arity=(2, 2),
        refuses_large_numbers=True,
        internal=True,
        jax_runtime="beta_slope",
        torch_runtime="beta_slope",
        torch_one_kernel=False,
    ),
    # The Hurwitz zeta function zeta(s, q), differentiated in q only (as by torch, JAX and sympy).
    # torch's (torch.special.zeta) is called by the runtime's hurwitz_zeta, which differentiates it.
    MathFunction(
        "zeta",
        sp.zeta,
        "jax.scipy.special.zeta",
        numpy="rulegen.derive.functions.zeta_of",
        mpmath=mpmath.zeta,
        arity=(2, 2),
        domain=((2, 3), (0.0, math.inf)),
        orders=1,
        torch_runtime="hurwitz_zeta",
        jax_replacement=_zeta_with_series,
        torch_replacement=_zeta_with_series,
    ),
    MathFunction("Abs", sp.Abs, "jnp.abs", "torch.abs", math="math.fabs", in_place="abs_", aliases=("abs",)),
    # No in-place torch.sign_: torch's sign of nan is 0, and the printer's is nan.
    MathFunction("sign", sp.sign, "jnp.sign", "torch.sign"),
    MathFunction("Min", sp.Min, "jnp.minimum", "torch.minimum", aliases=("min",), arity=(2, 32)),
    MathFunction("Max", sp.Max, "jnp.maximum", "torch.maximum", aliases=("max",), arity=(2, 32)),
    MathFunction("floor", sp.floor, "jnp.floor", "torch.floor", math="math.floor", in_place="floor_"),
    MathFunction("ceiling", sp.ceiling, "jnp.ceil", "torch.ceil", math="math.ceil", in_place="ceil_"),
    # A where per piece, after the conditions: no one kernel.
    MathFunction(
        "Piecewise", Piecewise, "jnp.where", "torch.where", arity=(1, 32), torch_one_kernel=False, python_numbers=True
    ),
    MathFunction("where", _where, arity=(3, 3)),
    MathFunction("clip", _clip, arity=(3, 3)),
    MathFunction(
        "sigmoid",
        sigmoid,
        "jax.nn.sigmoid",
        "torch.sigmoid",
        mpmath=_mp_sigmoid,
        in_place="sigmoid_",
        numpy="scipy.special.expit",
    ),
    # sigmoid's derivative where a partial multiplies sigmoid(u) by sigmoid(-u) (`forms.with_slopes`), printed as
    # the runtime's `sigmoid_slope`: differentiated by the registry's derivative, not autodiff of the product.
    MathFunction(
        "sigmoid_slope",
        sigmoid_slope,
        numpy="rulegen.derive.functions.sigmoid_slope_of",
        mpmath=_mp_sigmoid_slope,
        jax_runtime="sigmoid_slope",
        torch_runtime="sigmoid_slope",
        torch_one_kernel=False,
        internal=True,
    ),
    MathFunction(
        "softplus",
        softplus,
        "jax.nn.softplus",
        "torch.nn.functional.softplus",
        mpmath=_mp_softplus,
        numpy="rulegen.derive.measure.softplus",
    ),
    MathFunction(
        "logaddexp", logaddexp, "jnp.logaddexp", "torch.logaddexp", mpmath=_mp_logaddexp, torch_tensor_only=True
    ),
    MathFunction(
        "xlogy",
        xlogy,
        "jax.scipy.special.xlogy",
        "torch.special.xlogy",
        mpmath=_mp_xlogy,
        domain=((-math.inf, math.inf), (0.0, math.inf)),
        # XLA's log reads a subnormal y as 0 where its pow does not (x**y log(x), pow's derivative in y, was
        # 1 * -inf at (5e-324, 2.2e-308)): the runtime's xlogy reads it from its bits.
        jax_runtime="xlogy",
    ),
    # x**y's partials, printed as the runtime's: differentiated by the registry's derivatives.
    MathFunction(
        "power_slope",
        power_slope,
        numpy="rulegen.derive.functions.power_slope_of",
        mpmath=_mp_power_slope,
        jax_runtime="power_slope",
        torch_runtime="power_slope",
        torch_one_kernel=False,
        internal=True,
    ),
    MathFunction(
        "power_log",
        power_log,
        numpy="rulegen.derive.functions.power_log_of",
        mpmath=_mp_power_log,
        jax_runtime="power_log",
        torch_runtime="power_log",
        torch_one_kernel=False,
        internal=True,
    ),
    MathFunction(
        "bessel_i0",
        bessel_i0,
        "jax.scipy.special.i0",
        "torch.special.i0",
        mpmath=lambda x: mpmath.besseli(0, x),
        # JAX's derivative of i0 at 0 is 1 (I1(0) = 0): where a derivative calls I0 (I1's), the runtime's.
        jax_runtime="bessel_i0",
    ),
    MathFunction(
        "bessel_i1",
        bessel_i1,
        "jax.scipy.special.i1",
        "torch.special.i1",
        mpmath=lambda x: mpmath.besseli(1, x),
        # The frameworks differentiate it as I0 - I1 / x, inf - inf where both overflow: the runtime's I1 has
        # the registry's derivative, `bessel_i1_slope`.
        jax_runtime="bessel_i1",
        torch_runtime="bessel_i1",
    ),
    # I1's derivative, printed as the runtime's `bessel_i1_slope`.
    MathFunction(
        "bessel_i1_slope",
        bessel_i1_slope,
        numpy="rulegen.derive.functions.bessel_i1_slope_of",
        mpmath=_mp_bessel_i1_slope,
        jax_runtime="bessel_i1_slope",
        torch_runtime="bessel_i1_slope",
        torch_one_kernel=False,
        internal=True,
    ),
    # I1's second derivative, printed as the runtime's `bessel_i1_curvature`.
    MathFunction(
        "bessel_i1_curvature",
        bessel_i1_curvature,
        numpy="rulegen.derive.functions.bessel_i1_curvature_of",
        mpmath=_mp_bessel_i1_curvature,
        jax_runtime="bessel_i1_curvature",
        torch_runtime="bessel_i1_curvature",
        torch_one_kernel=False,
        internal=True,
    ),
    MathFunction("bessel_i0e", bessel_i0e, "jax.scipy.special.i0e", "torch.special.i0e", mpmath=_mp_i0e),
    MathFunction("bessel_i1e", bessel_i1e, "jax.scipy.special.i1e", "torch.special.i1e", mpmath=_mp_i1e),
    # What i0e's and i1e's derivatives are beyond |x| = 25, printed as the runtime's `bessel_ie_series`.
    MathFunction(
        "bessel_ie_series",
        bessel_ie_series,
        numpy="rulegen.derive.functions.bessel_ie_series_of",
        mpmath=_mp_bessel_ie_derivative,
        arity=(3, 3),
        domain=((0, 1), (1, 3), (BESSEL_IE_SERIES_FROM, math.inf)),
        orders=2,
        torch_one_kernel=False,
        internal=True,
    ),
    MathFunction(
        "ndtr",
        ndtr,
        "jax.scipy.special.ndtr",
        "torch.special.ndtr",
        mpmath=lambda x: mpmath.ncdf(x),
        torch_replacement=_ndtr_by_erfc,
    ),
    MathFunction(
        "ndtri",
        ndtri,
        "jax.scipy.special.ndtri",
        "torch.special.ndtri",
        mpmath=lambda p: mpmath.sqrt(2) * mpmath.erfinv(2 * p - 1),
        domain=((0.0, 1.0),),
    ),
    # ndtri's derivative, printed as the runtime's `ndtri_slope`: differentiated as one product.
    MathFunction(
        "ndtri_slope",
        ndtri_slope,
        numpy="rulegen.derive.functions.ndtri_slope_of",
        mpmath=_mp_ndtri_slope,
        jax_runtime="ndtri_slope",
        torch_runtime="ndtri_slope",
        torch_one_kernel=False,
        domain=((0.0, 1.0),),
        internal=True,
    ),
    MathFunction(
        "log_ndtr",
        log_ndtr,
        "jax.scipy.special.log_ndtr",
        "torch.special.log_ndtr",
        mpmath=lambda x: mpmath.log(mpmath.ncdf(x)),
        jax_replacement=_log_ndtr_by_erfcx,
    ),
    MathFunction(
        "logit",
        logit,
        "jax.scipy.special.logit",
        "torch.special.logit",
        mpmath=lambda p: mpmath.log(p / (1 - p)),
        domain=((0.0, 1.0),),
    ),
    MathFunction(
        "erfcx",
        erfcx,
        "jax.scipy.special.erfcx",
        "torch.special.erfcx",
        mpmath=_mp_erfcx,
        # The frameworks differentiate it as 2 x erfcx(x) - 2 / sqrt(pi), which cancels (see erfcx.fdiff):
        # where a derivative calls erfcx (log_ndtr's), the runtime's erfcx has the registry's derivative.
        torch_runtime="erfcx",
        jax_runtime="erfcx",
    ),
    # What erfcx's derivatives are from x = 8 (erfcx.fdiff), printed as the runtime's `erfcx_series`.
    MathFunction(
        "erfcx_series",
        erfcx_series,
        numpy="rulegen.derive.functions.erfcx_series_of",
        mpmath=_mp_erfcx_derivative,
        orders=1,
        torch_one_kernel=False,
        internal=True,
    ),
    MathFunction(
        "xlog1py",
        xlog1py,
        "jax.scipy.special.xlog1py",
        "torch.special.xlog1py",
        mpmath=_mp_xlog1py,
        domain=((-math.inf, math.inf), (-1.0, math.inf)),
    ),
    # A log1p beside its argument's rational terms, without their cancellation (stabilise.families).
    MathFunction(
        "log1pmx",
        log1pmx,
        numpy="rulegen.derive.functions.log1pmx_of",
        mpmath=_mp_log1pmx,
        torch_one_kernel=False,
        domain=((-1.0, math.inf),),
        internal=True,
    ),
    MathFunction(
        "entr", entr, "jax.scipy.special.entr", "torch.special.entr", mpmath=_mp_entr, domain=((0.0, math.inf),)
    ),
    # What sympy writes as a power, x**(-1/2), and the printers as one call.
    MathFunction("rsqrt", _rsqrt, "jax.lax.rsqrt", "torch.rsqrt", internal=True, holomorphic=True),
    # Derivatives of kinks (Abs, sign, Max): sympy writes them, rules do not.
    MathFunction(
        "DiracDelta",
        sp.DiracDelta,
        "jnp.zeros_like",
        "torch.zeros_like",
        internal=True,
        vanishes_almost_everywhere=True,
    ),
    MathFunction("Heaviside", sp.Heaviside, internal=True),
    # What canonical forms write for the sign of a Gamma (forms._gamma_ratio); printed as sign_of_gamma.
    MathFunction("gamma_sign", gamma_sign, mpmath=_mp_gamma_sign, internal=True),
    MathFunction("in_float", in_float, internal=True),
    # What the stabilising search's scaling of a homogeneous expression writes (stabilise.scaling._rescaled).
    MathFunction("binade", binade, numpy="rulegen.derive.functions.binade_of", mpmath=_mp_binade, internal=True),
    # What the search's sum-scaled repair writes for a sum that holds a `where` (stabilise.families._sum_scaled).
    MathFunction(
        "where_finite",
        where_finite,
        numpy="rulegen.derive.functions.where_finite_of",
        mpmath=_mp_where_finite,
        internal=True,
    ),
    # What the search's "products scaled" family writes (stabilise.families): a product whose order of operations
    # under- or overflows on the way, computed on its factors brought near 1.
    MathFunction(
        "power_product",
        power_product,
        numpy="rulegen.derive.functions.power_product_of",
        mpmath=_mp_power_product,
        arity=(4, 64),
        internal=True,
    ),
    # Of static inputs alone, Python's IEEE division (`_numbers.div`), no array: a `where` on such a condition of
    # Python numbers is torch's default dtype, float32, in a float64 rule.
    MathFunction(
        "divided", divided, numpy="numpy.divide", mpmath=lambda x, s: x / s, internal=True, python_numbers=True
    ),
    # torch's backward of a complex rule conjugates its partials (PyTorch's convention); a new
    # tensor, not torch.conj's view, which an in-place backward would write through to its input.
    MathFunction("conjugate", sp.conjugate, "jnp.conj", "torch.conj_physical", internal=True),
    MathFunction("silu", silu, torch="torch.nn.functional.silu", internal=True, torch_only=True),
    MathFunction(
        "one_plus_erf",
        one_plus_erf,
        numpy="rulegen.derive.functions.one_plus_erf_of",
        mpmath=lambda u: mpmath.erfc(-u),
        internal=True,
    ),
    MathFunction(
        "sigmoid_product", sigmoid_product, torch="torch.ops.aten.softplus_backward", internal=True, torch_only=True
    ),
    MathFunction("silu_derivative", silu_derivative, internal=True, torch_only=True),
    # Printed as the runtime's `silu_backward` (torch/_native.py): torch's kernel where nothing differentiates it.
    MathFunction("silu_backward", silu_backward, internal=True, torch_only=True, torch_one_kernel=True),
    # Printed as the runtime's `tanh_backward` (torch/_native.py): aten's kernel, differentiable at every order.
    MathFunction("tanh_backward", tanh_backward, internal=True, torch_only=True, torch_one_kernel=True),
    # Printed as `None if c is None else c * p`: a term for a cotangent (or tangent) that may be absent.
    MathFunction("cotangent_term", cotangent_term, internal=True),
    # Printed as `None if c is None else e`: a term computed with its cotangent in one native kernel.
    MathFunction("cotangent_product", cotangent_product, internal=True),
    # Printed as the runtime's `summed_like(x, *terms)` (torch/_function.py, jax/_util.py): the present terms' sum.
    MathFunction("cotangent_sum", cotangent_sum, internal=True),
    MathFunction(
        "softplus_scaled", softplus_scaled, torch="torch.nn.functional.softplus", internal=True, torch_only=True
    ),
)


def _in_partial_fractions(cls: type[sp.Function], domain: tuple[float, float]) -> None:
    """State `cls`'s partial in partial fractions (`sympy.apart`) where it is a rational function of its one
    argument: the form whose own derivative is well behaved.

    Autodiff differentiates the partial as written.  logit's 1 / (p (1 - p)) differentiates to a quotient by
    its square, (p (1 - p))**2, which underflows at subnormal p (0 / 0, nan, where logit'' is -inf) and
    overflows first; 1 / p + 1 / (1 - p) differentiates term by term, each term's square of its own.
    Computed once per class, on a dummy argument, and substituted.
    """
    stated = cls.fdiff
    x = sp.Dummy("x", real=True)
    try:
        partial = stated(cls(x), 1)
    except (ArgumentIndexError, TypeError):
        return
    if partial.free_symbols != {x} or not partial.is_rational_function(x) or partial.is_polynomial(x):
        return
    fractions = _facing_the_domain(sp.apart(partial, x), x, domain)
    if fractions == partial:
        return

    def fdiff(self: sp.Function, argindex: int = 1) -> sp.Expr:
        if argindex != 1:
            raise ArgumentIndexError(self, argindex)
        return fractions.xreplace({x: self.args[0]})

    fdiff.__doc__ = stated.__doc__
    setattr(cls, "fdiff", fdiff)  # noqa: B010 - a method replaced on the class


def _facing_the_domain(fractions: sp.Expr, x: sp.Symbol, domain: tuple[float, float]) -> sp.Expr:
    """Each pole's linear factor written as it is nonnegative on `domain`: 1 / (1 - p), not -1 / (p - 1).

    At a pole on the domain's edge the factor is +0 either way (1 - 1 and 1 - 1 round to +0), so its sign
    as written chooses the infinity: -1 / (p - 1) made logit'(1) -inf where it and both frameworks' are +inf.
    """
    lo, hi = domain
    inside = (lo + hi) / 2 if math.isfinite(lo) and math.isfinite(hi) else lo + 1 if math.isfinite(lo) else hi - 1
    if not math.isfinite(inside):
        return fractions

    def faced(power: sp.Pow) -> sp.Expr:
        base, exponent = power.args
        if exponent.is_Integer and base.is_polynomial(x) and sp.degree(base, x) == 1 and base.subs(x, inside) < 0:
            return (-1) ** exponent * sp.Pow(-base, exponent)
        return power

    return fractions.replace(lambda e: isinstance(e, sp.Pow) and e.base.has(x) and e.exp.is_negative, faced)


for _function in REGISTRY:
    _class = _function.sympy
    if isinstance(_class, type) and _class.__module__ == __name__ and getattr(_class, "nargs", None) == {1}:
        _in_partial_fractions(_class, _function.argument_domain(0))

#: The registered functions a symbolic body may call, by the names it calls them.
RULE_FUNCTIONS: Mapping[str, MathFunction] = MappingProxyType(
    {name: function for function in REGISTRY for name in function.rule_names}
)

#: What each name a symbolic body may call builds.
FUNCTIONS: Mapping[str, Callable[..., sp.Basic]] = MappingProxyType(
    {name: function.sympy for name, function in RULE_FUNCTIONS.items()}
)

#: mpmath implementations of the functions that `lambdify(modules="mpmath")`
#: does not know, for the high-precision reference of the checks.
MPMATH_IMPLEMENTATIONS: Mapping[str, Callable[..., mpmath.mpf]] = MappingProxyType(
    {function.name: reference for function in REGISTRY if (reference := function.reference) is not None}
)

#: numpy/scipy implementations (dotted names) of the registered functions, by name: what the stabilising search
#: evaluates candidates with (rulegen.derive.stabilise).
NUMPY_IMPLEMENTATIONS: Mapping[str, str] = MappingProxyType(
    {function.name: found for function in REGISTRY if (found := function.numpy_name) is not None}
)

#: Every registered function by its sympy class's name, on which the printers and rewrites dispatch.
BY_NAME: Mapping[str, MathFunction] = MappingProxyType({function.name: function for function in REGISTRY})

#: The distributions (DiracDelta) that derivatives take as 0, as the frameworks' autodiff does away from a kink.
VANISHING: tuple[type[sp.Basic], ...] = tuple(
    function.sympy for function in REGISTRY if function.vanishes_almost_everywhere and isinstance(function.sympy, type)
)

#: What a complex rule's derivatives stay within: functions with a complex derivative, by sympy class name.
HOLOMORPHIC = frozenset(function.name for function in REGISTRY if function.holomorphic)

#: torch functions that take no Python number (torch.atan2(x, 2.0) raises).
TORCH_TENSOR_ONLY = frozenset(function.name for function in REGISTRY if function.torch_tensor_only)
