"""Python numbers (static inputs) computed as the frameworks compute float arrays.

Python's `math` raises where IEEE arithmetic has a value: `math.log(0.0)`
(ValueError; an array's log is -inf), `math.exp(1000.0)` (OverflowError;
inf), `1.0 / 0.0` (ZeroDivisionError; inf), `1e200 ** 2` (OverflowError;
inf), `math.sqrt(-1.0)` (ValueError; nan).  A rule given such a static would
raise where the same rule given an array returns the frameworks' inf or
nan.  Each function here is `math`'s where that returns, and the IEEE value
where it raises.
"""

import math
from collections.abc import Callable


def _odd_integer(b: float) -> bool:
    return float(b).is_integer() and int(b) % 2 == 1


def div(a: float, b: float) -> float:
    try:
        return a / b
    except ZeroDivisionError:
        if a == 0 or math.isnan(a):
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)


def pow(a: float, b: float) -> float:
    try:
        return math.pow(a, b)
    except OverflowError:
        return -math.inf if a < 0 and _odd_integer(b) else math.inf
    except ValueError:
        if a == 0:  # zero to a negative power
            return -math.inf if math.copysign(1.0, a) < 0 and _odd_integer(b) else math.inf
        return math.nan  # a negative number to a fractional power


def exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def expm1(x: float) -> float:
    try:
        return math.expm1(x)
    except OverflowError:
        return math.inf


def cosh(x: float) -> float:
    try:
        return math.cosh(x)
    except OverflowError:
        return math.inf


def sinh(x: float) -> float:
    try:
        return math.sinh(x)
    except OverflowError:
        return math.copysign(math.inf, x)


def log(x: float) -> float:
    if x > 0:
        return math.log(x)
    return -math.inf if x == 0 else math.nan


def log1p(x: float) -> float:
    if x > -1:
        return math.log1p(x)
    return -math.inf if x == -1 else math.nan


def sqrt(x: float) -> float:
    return math.sqrt(x) if x >= 0 else math.nan


def asin(x: float) -> float:
    return math.asin(x) if -1 <= x <= 1 else math.nan


def acos(x: float) -> float:
    return math.acos(x) if -1 <= x <= 1 else math.nan


def acosh(x: float) -> float:
    return math.acosh(x) if x >= 1 else math.nan


def atanh(x: float) -> float:
    if -1 < x < 1:
        return math.atanh(x)
    return math.copysign(math.inf, x) if abs(x) == 1 else math.nan


def sin(x: float) -> float:
    return math.sin(x) if math.isfinite(x) else math.nan


def cos(x: float) -> float:
    return math.cos(x) if math.isfinite(x) else math.nan


def tan(x: float) -> float:
    return math.tan(x) if math.isfinite(x) else math.nan


def gamma(x: float) -> float:
    try:
        return math.gamma(x)
    except OverflowError:
        return math.inf
    except ValueError:
        # At 0 the sign of the zero's infinity; at a negative integer (a pole) or -inf, no value.
        return math.copysign(math.inf, x) if x == 0 else math.nan


def lgamma(x: float) -> float:
    try:
        return math.lgamma(x)
    except (OverflowError, ValueError):
        return math.inf  # past the float range, or at a pole of Gamma


def floor(x: float) -> float:
    return float(math.floor(x)) if math.isfinite(x) else x


def ceil(x: float) -> float:
    return float(math.ceil(x)) if math.isfinite(x) else x


# Defined for every float, and never raising: math's own.
atan = math.atan
asinh = math.asinh
tanh = math.tanh
erf = math.erf
erfc = math.erfc
fabs = math.fabs


def __getattr__(name: str) -> Callable[..., float]:
    """Any other of math's functions (one registered since, `math.exp2`): math's where it returns,
    nan where math finds no value (ValueError), inf where the value is past the float range
    (OverflowError)."""
    function = getattr(math, name)

    def call(*args: float) -> float:
        try:
            return float(function(*args))
        except ValueError:
            return math.nan
        except OverflowError:
            return math.inf

    call.__name__ = name
    return call
