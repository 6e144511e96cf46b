"""Asymptotic series both backends compute alike, given their array namespace (`jnp` or `torch`)."""

import functools
import math
from types import ModuleType
from typing import Any

#: Where erfcx's derivatives are its series (below, 2 x erfcx(x) - 2 / sqrt(pi) loses up to 7 bits).
ERFCX_SERIES_FROM = 8
#: Terms of erfcx's series by dtype: within 2 eps from x = 8 up to its third derivative (each term
#: costs two kernels in eager torch).
_ERFCX_TERMS = {"float64": 22, "float32": 7}


def erfcx_series(xp: ModuleType, order: int, x: Any) -> Any:
    """The `order`-th derivative of erfcx at large x (8 and above), from its asymptotic series.

    erfcx(x) ~ sum_n (-1)**n (2n - 1)!! / (2**n sqrt(pi)) x**-(2n + 1), each
    term differentiated as a power: no difference of nearly equal values,
    where erfcx's own derivative, 2 x erfcx(x) - 2 / sqrt(pi), cancels (it
    loses log2(2 x**2) bits).  Horner's scheme in 1 / x**2.
    """
    coefficients = _erfcx_coefficients(order, _terms(xp, x, _ERFCX_TERMS))
    # Times x**-(order + 1), not divided by x**(order + 1): the quotient's derivative goes
    # through the power's, inf where it overflows (float32's largest x), times the quotient's
    # 0: nan in the next derivative.
    return _horner(coefficients, 1 / (x * x)) * x ** -(order + 1)


@functools.cache
def _erfcx_coefficients(order: int, terms: int) -> tuple[float, ...]:
    """The coefficient of x**-(2n + 1 + order), n < terms, in erfcx's `order`-th derivative."""
    coefficients = []
    for n in range(terms):
        c = (-1) ** n * math.prod(range(1, 2 * n, 2)) / (2**n * math.sqrt(math.pi))
        coefficients.append(_differentiated(c, -(2 * n + 1), order))
    return tuple(coefficients)


#: Where log1pmx is its series (|z| < 1/2, so |w| <= 1/3 below).
LOG1PMX_SERIES_BELOW = 0.5
#: Terms of atanh(w) - w's series by dtype: (1/3)**(2n + 1) below half an eps of the whole.
_LOG1PMX_TERMS = {"float64": 17, "float32": 8}


def log1pmx(xp: ModuleType, z: Any) -> Any:
    """log1p(z) - z, which is -z**2/2 at small z, where the difference loses log2(2/|z|) bits.

    log1p(z) is 2 atanh(w), w = z/(2 + z), so log1p(z) - z is -z**2/(2 + z) +
    2 (atanh(w) - w), two terms of one sign where z > 0 and of sizes 1 : |z|/6
    where z < 0; atanh(w) - w = w**3/3 + w**5/5 + ..., Horner's scheme in
    w**2, below |z| = 1/2.  Above, log1p(z) - z cancels at most a bit and a
    half.  Each branch is fed a stand-in where the other is taken (0 and 1),
    so that neither is inf or nan under the `where`'s derivative.
    """
    near = abs(z) < LOG1PMX_SERIES_BELOW
    small = xp.where(near, z, 0.0)
    w = small / (2 + small)
    w2 = w * w
    terms = _terms(xp, z, _LOG1PMX_TERMS)
    series = _horner(tuple(1 / (2 * k + 3) for k in range(terms)), w2)
    far = xp.where(near, 1.0, z)
    return xp.where(near, 2 * (w * w2) * series - small * small / (2 + small), xp.log1p(far) - far)


def _terms(xp: ModuleType, x: Any, by_dtype: dict[str, int]) -> int:
    """How many terms of a series `x`'s dtype takes (`by_dtype`: float64's and float32's)."""
    return by_dtype["float32" if xp.finfo(x.dtype).eps > 1e-10 else "float64"]


def _horner(coefficients: tuple[float, ...], y: Any) -> Any:
    """The polynomial sum_k coefficients[k] y**k, by Horner's scheme."""
    total = coefficients[-1] * y
    for c in reversed(coefficients[1:-1]):
        total = (total + c) * y
    return total + coefficients[0]


def _differentiated(c: float, p: float, order: int) -> float:
    """The coefficient of c x**p differentiated `order` times (a loop: Dynamo traces it)."""
    for _ in range(order):
        c, p = c * p, p - 1
    return c


def erfcx_slope(xp: ModuleType, x: Any, out: Any) -> Any:
    """erfcx's derivative at x, where out = erfcx(x).

    Its series from 8 (the argument a stand-in below, where 1 / x**2 would be
    infinite at 0 and its derivative, times the `where`'s 0, nan); below,
    2 x erfcx(x) - 2 / sqrt(pi) (its x a stand-in above).  The registry's derivative of erfcx
    (rulegen.derive.functions.erfcx), for the frameworks' autodiff: a
    derivative that calls erfcx is differentiated by this one, not by the
    frameworks' difference.
    """
    large = x >= ERFCX_SERIES_FROM
    series = erfcx_series(xp, 1, xp.where(large, x, float(ERFCX_SERIES_FROM)))
    # The difference is fed 0 where the series is taken: 2 x out is inf there at float32's
    # largest x, and its partial in out (2 x) times the `where`'s 0 was nan.
    near = xp.where(large, 0.0, x)
    return xp.where(large, series, 2 * near * out - 2 / math.sqrt(math.pi))


#: Where the derivatives of the scaled Bessel functions i0e and i1e are their series, in |x|
#: (i1e(x) - sign(x) i0e(x) and its like cancel: 14 bits lost at |x| = 1e4, 39 at second order).
BESSEL_IE_SERIES_FROM = 25
#: Terms by dtype: within 1.6 eps from |x| = 25 up to the third derivative.
_BESSEL_IE_TERMS = {"float64": 32, "float32": 8}


def bessel_ie_series(xp: ModuleType, nu: int, order: int, x: Any) -> Any:
    """The `order`-th derivative of exp(-x) I_nu(x) (nu 0 or 1) at x >= 25, from its series.

    exp(-x) I_nu(x) ~ sum_k a_k(nu) x**-(k + 1/2), with a_k(nu) = (-1)**k
    prod_{j <= k} (4 nu**2 - (2j - 1)**2) / (k! 8**k sqrt(2 pi)), each term
    differentiated as a power: no difference of nearly equal values, where
    i0e's derivative i1e(x) - i0e(x) loses log2(2x) bits.  Horner's scheme in
    1 / x.
    """
    coefficients = _bessel_ie_coefficients(nu, order, _terms(xp, x, _BESSEL_IE_TERMS))
    return _horner(coefficients, 1 / x) / (x**order * xp.sqrt(x))


@functools.cache
def _bessel_ie_coefficients(nu: int, order: int, terms: int) -> tuple[float, ...]:
    """The coefficient of x**-(k + 1/2 + order), k < terms, in the `order`-th derivative."""
    # Loops, not a generator: Dynamo traces this where a compiled backward calls the series.
    coefficients, a = [], 1 / math.sqrt(2 * math.pi)
    for k in range(terms):
        if k:
            a *= -(4 * nu * nu - (2 * k - 1) ** 2) / (k * 8)
        coefficients.append(_differentiated(a, -(k + 0.5), order))
    return tuple(coefficients)


#: From where I1's derivatives are computed from the exponentially scaled functions: I0 and
#: I1 overflow together (from |x| = 89 in float32, 713 in float64), where I0 - I1 / x is
#: inf - inf.
BESSEL_SCALED_FROM = 64
#: Below, I1'' is its series: its closed form (1 + 2 / x**2) I1 - I0 / x cancels as x goes to 0.
_I1_CURVATURE_SERIES_BELOW = 1
#: I1'' = sum_k (2k + 1) 2k x**(2k - 1) / (2**(2k + 1) k! (k + 1)!), k = 1..9: within a
#: float64 rounding below 1.
_I1_CURVATURE_COEFFICIENTS = tuple(
    (2 * k + 1) * 2 * k / (2 ** (2 * k + 1) * math.factorial(k) * math.factorial(k + 1))
    for k in range(1, 10)
)


def bessel_i1_slope(xp: ModuleType, special: ModuleType, x: Any) -> Any:
    """I1'(x) = I0(x) - I1(x) / x: 1/2 + 3 x**2 / 16 below |x| = 2**-26 (0 / 0 at 0), and
    exp(|x|) (i0e(x) - i1e(x) / x) from `BESSEL_SCALED_FROM` on.  Each branch reads a stand-in
    where the others are taken."""
    size = xp.abs(x)
    far = size >= BESSEL_SCALED_FROM
    small = size < 2.0**-26
    at_far = xp.where(far, x, BESSEL_SCALED_FROM)
    at_near = xp.where(far | small, 1.0, x)
    scaled = xp.exp(xp.abs(at_far)) * (special.i0e(at_far) - special.i1e(at_far) / at_far)
    near = special.i0(at_near) - special.i1(at_near) / at_near
    return xp.where(far, scaled, xp.where(small, 0.5 + 3 * (x * x) / 16, near))


def bessel_i1_curvature(xp: ModuleType, special: ModuleType, x: Any) -> Any:
    """I1''(x) = (1 + 2 / x**2) I1(x) - I0(x) / x: its series below |x| = 1, and exp(|x|) times
    the scaled functions' combination from `BESSEL_SCALED_FROM` on (one product: no inf - inf
    where I0 and I1 overflow)."""
    size = xp.abs(x)
    far = size >= BESSEL_SCALED_FROM
    small = size < _I1_CURVATURE_SERIES_BELOW
    at_far = xp.where(far, x, BESSEL_SCALED_FROM)
    at_mid = xp.where(far | small, 2.0, x)
    scaled = xp.exp(xp.abs(at_far)) * (
        (1 + 2 / (at_far * at_far)) * special.i1e(at_far) - special.i0e(at_far) / at_far
    )
    mid = (1 + 2 / (at_mid * at_mid)) * special.i1(at_mid) - special.i0(at_mid) / at_mid
    series = x * _horner(_I1_CURVATURE_COEFFICIENTS, x * x)
    return xp.where(far, scaled, xp.where(small, series, mid))


#: Where ndtri's derivative is its tails' form, in |ndtri(x)| (below, sqrt(2 pi) exp(z**2 / 2)
#: is within z**2 roundings, and the tails' Mills ratio cancels at the next order as z nears 0).
NDTRI_TAILS_FROM = 1.0


def ndtri_slope(xp: ModuleType, ndtri: Any, erfcx: Any, x: Any) -> Any:
    """ndtri'(x) = 1 / phi(z), z = ndtri(x): sqrt(pi / 2) erfcx(-z / sqrt 2) / x for z below -1
    and sqrt(pi / 2) erfcx(z / sqrt 2) / (1 - x) above 1 (Phi(z) = erfcx(-z / sqrt 2)
    exp(-z**2 / 2) / 2), sqrt(2 pi) exp(z**2 / 2) between and where z is infinite (x = 0 or 1).

    sqrt(2 pi) exp(z**2 / 2) alone takes z's rounding times z**2: 143 float32 eps off at the
    smallest normal x.  The tails' form reads x, exact, and erfcx, whose relative error is z's
    times 1 / z**2 there; 1 - x is exact where z > 1 (x > 1/2).  `ndtri` and `erfcx` are the
    backend's (JAX's erfcx the runtime's, its series from 8: JAX's own is 0 on a band near 9.3
    in float32 and near 26.6 in float64).
    """
    z = ndtri(x)
    size = xp.abs(z)
    tails = (size > NDTRI_TAILS_FROM) & (size < math.inf)
    # A value only, never differentiated (its derivative is ndtri(x) ndtri'(x)**2): no stand-ins
    # for the branches a `where` drops.
    tail = math.sqrt(math.pi / 2) * erfcx(size / math.sqrt(2)) / xp.where(z < 0, x, 1 - x)
    return xp.where(tails, tail, math.sqrt(2 * math.pi) * xp.exp(z * z / 2))
