"""Python numbers (static inputs) computed as the frameworks compute float arrays.

Python's `math` raises where IEEE arithmetic has a value: `math.log(0.0)`
(ValueError; an array's log is -inf), `math.exp(1000.0)` (OverflowError;
inf), `1.0 / 0.0` (ZeroDivisionError; inf), `1e200 ** 2` (OverflowError;
inf), `math.sqrt(-1.0)` (ValueError; nan).  A rule given such a static would
raise where the same rule given an array returns the frameworks' inf or
nan.  Each function here is `math`'s where that returns, and the IEEE value
where it raises: nan where math finds no value (`sqrt(-1)`, `asin(2)`,
`sin(inf)`), inf where the value is past the float range (`exp(1000)`), the
module's `__getattr__` for every function that needs no more; those below
have an infinity of a sign, or a pole, of their own.
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


def atanh(x: float) -> float:
    if -1 < x < 1:
        return math.atanh(x)
    return math.copysign(math.inf, x) if abs(x) == 1 else math.nan


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


def __getattr__(name: str) -> Callable[..., float]:
    """Every other of math's functions (exp, sqrt, asin, a function registered since such as exp2):
    math's where it returns, nan where math finds no value (ValueError), inf where the value is
    past the float range (OverflowError)."""
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
