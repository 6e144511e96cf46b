"""log_ndtr's derivative far in the left tail, and erfcx's exact value there.

The reference, exp(x**2) erfc(x) at 40 digits, was 4% off at x = 9.1e19 (x**2 lost its last digits before
exp multiplied them), so the conformance matrix expected 1.24e20 where log_ndtr's derivative is 1.29e20; and
the derivative, sqrt(2/pi) / erfcx(-x/sqrt 2), was inf in float32 where erfcx is subnormal, its second
derivative nan from x = -1e19.
"""

from __future__ import annotations

import mpmath
import sympy as sp

from rulegen.derive import functions as fn

x = sp.Symbol("x", real=True)


def test_erfcx_is_exact_far_out() -> None:
    u = mpmath.mpf(9.1e19)
    with mpmath.workdps(40):
        got = fn._mp_erfcx(u)
    with mpmath.workdps(120):
        exact = mpmath.exp(u**2) * mpmath.erfc(u)
    assert abs(got / exact - 1) < mpmath.mpf(10) ** -35
    assert fn._mp_erfcx(mpmath.inf) == 0 and fn._mp_erfcx(-mpmath.inf) == mpmath.inf


def test_log_ndtr_s_derivative_is_mills_ratio_s_series_far_out() -> None:
    slope = sp.lambdify([x], sp.diff(fn.log_ndtr(x), x), modules=[dict(fn.MPMATH_IMPLEMENTATIONS), "mpmath"])
    for v in (-1.29e20, -5000.0, -1025.0, -1023.0, -3.0):
        with mpmath.workdps(40):
            exact = mpmath.npdf(v) / mpmath.ncdf(v) if v > -1e4 else -mpmath.mpf(v) - 1 / mpmath.mpf(v)
            assert abs(slope(mpmath.mpf(v)) / exact - 1) < 1e-16, v
    far = sp.diff(fn.log_ndtr(x), x).args[0][0]
    assert not far.has(fn.erfcx), far  # no erfcx to underflow where the series is
