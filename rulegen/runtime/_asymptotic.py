"""Asymptotic series both backends compute alike, given their array namespace (`jnp` or `torch`)."""

import functools
import math

#: Where erfcx's derivatives are its series (below, 2 x erfcx(x) - 2 / sqrt(pi) loses up to 7 bits).
ERFCX_SERIES_FROM = 8
#: Terms of erfcx's series by dtype: within 2 eps from x = 8 up to its third derivative (each term
#: costs two kernels in eager torch).
_ERFCX_TERMS = {"float64": 22, "float32": 7}


def erfcx_series(xp, order, x):
    """The `order`-th derivative of erfcx at large x (8 and above), from its asymptotic series.

    erfcx(x) ~ sum_n (-1)**n (2n - 1)!! / (2**n sqrt(pi)) x**-(2n + 1), each
    term differentiated as a power: no difference of nearly equal values,
    where erfcx's own derivative, 2 x erfcx(x) - 2 / sqrt(pi), cancels (it
    loses log2(2 x**2) bits).  Horner's scheme in 1 / x**2.
    """
    terms = _ERFCX_TERMS["float32" if xp.finfo(x.dtype).eps > 1e-10 else "float64"]
    coefficients = _erfcx_coefficients(order, terms)
    y = 1 / (x * x)
    total = coefficients[-1] * y
    for c in reversed(coefficients[1:-1]):
        total = (total + c) * y
    return (total + coefficients[0]) / x ** (order + 1)


@functools.cache
def _erfcx_coefficients(order, terms):
    """The coefficient of x**-(2n + 1 + order), n < terms, in erfcx's `order`-th derivative."""
    coefficients = []
    for n in range(terms):
        c, p = (-1) ** n * math.prod(range(1, 2 * n, 2)) / (2**n * math.sqrt(math.pi)), -(2 * n + 1)
        for _ in range(order):
            c, p = c * p, p - 1
        coefficients.append(c)
    return tuple(coefficients)


def erfcx_slope(xp, x, out):
    """erfcx's derivative at x, where out = erfcx(x).

    Its series from 8 (the argument a stand-in below, where 1 / x**2 would be
    infinite at 0 and its derivative, times the `where`'s 0, nan); below,
    2 x erfcx(x) - 2 / sqrt(pi).  The registry's derivative of erfcx
    (rulegen.derive.functions.erfcx), for the frameworks' autodiff: a
    derivative that calls erfcx is differentiated by this one, not by the
    frameworks' difference.
    """
    large = x >= ERFCX_SERIES_FROM
    series = erfcx_series(xp, 1, xp.where(large, x, float(ERFCX_SERIES_FROM)))
    return xp.where(large, series, 2 * x * out - 2 / math.sqrt(math.pi))
