"""The math functions a symbolic rule may call, and the ones sympy lacks.

sympy has no sigmoid, softplus, logaddexp, xlogy or the scaled Bessel
functions that both `torch.special` and `jax.scipy.special` provide.  Writing
them as composites (``log(1 + exp(x))``) would make the generated code
overflow where the frameworks' fused versions do not, so they are sympy
functions of their own: each knows its derivative (so `sympy.diff` stays
closed over this set), how to rewrite itself into elementary functions (for
`simplify` and the high-precision reference), and how mpmath evaluates it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

import mpmath
import sympy as sp
from sympy.codegen.cfunctions import expm1, hypot, log1p
from sympy.core.function import ArgumentIndexError


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
        x = self.args[0]
        # I1'(x) = I0(x) - I1(x) / x, whose limit at 0 (1/2) the frameworks
        # reach only through their own rules; rules near 0 should say so.
        return bessel_i0(x) - bessel_i1(x) / x

    def _eval_rewrite_as_besseli(self, arg: sp.Expr, **kwargs: object) -> sp.Expr:
        return sp.besseli(1, arg)


class bessel_i0e(sp.Function):  # noqa: N801
    """Exponentially scaled I0: exp(-|x|) * I0(x)."""

    nargs = 1

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        if argindex != 1:
            raise ArgumentIndexError(self, argindex)
        x = self.args[0]
        return bessel_i1e(x) - sp.sign(x) * self

    def _eval_rewrite_as_besseli(self, arg: sp.Expr, **kwargs: object) -> sp.Expr:
        return sp.exp(-sp.Abs(arg)) * sp.besseli(0, arg)


class bessel_i1e(sp.Function):  # noqa: N801
    """Exponentially scaled I1: exp(-|x|) * I1(x)."""

    nargs = 1

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        if argindex != 1:
            raise ArgumentIndexError(self, argindex)
        x = self.args[0]
        return bessel_i0e(x) - bessel_i1e(x) * (sp.sign(x) + 1 / x)

    def _eval_rewrite_as_besseli(self, arg: sp.Expr, **kwargs: object) -> sp.Expr:
        return sp.exp(-sp.Abs(arg)) * sp.besseli(1, arg)


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
        return sp.sqrt(2 * sp.pi) * sp.exp(self**2 / 2)


class log_ndtr(sp.Function):  # noqa: N801
    """log(ndtr(x)), accurate far into the left tail."""

    nargs = 1

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        if argindex != 1:
            raise ArgumentIndexError(self, argindex)
        x = self.args[0]
        # phi(x) / Phi(x), written so that neither factor underflows alone.
        return sp.exp(-(x**2) / 2 - self) / sp.sqrt(2 * sp.pi)


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
        return 2 * x * self - 2 / sp.sqrt(sp.pi)

    def _eval_rewrite_as_erfc(self, arg: sp.Expr, **kwargs: object) -> sp.Expr:
        return sp.exp(arg**2) * sp.erfc(arg)


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


class entr(sp.Function):  # noqa: N801
    """-x * log(x), the elementwise entropy."""

    nargs = 1

    def fdiff(self, argindex: int = 1) -> sp.Expr:
        if argindex != 1:
            raise ArgumentIndexError(self, argindex)
        return -sp.log(self.args[0]) - 1


# Forms only the torch printer writes, each one native kernel where the
# composite is two; the plan rewrites products into them after deriving, so
# they need no derivatives, and rules cannot name them.


class silu(sp.Function):  # noqa: N801
    """x * sigmoid(x)."""

    nargs = 1


class one_plus_erf(sp.Function):  # noqa: N801
    """1 + erf(u), which torch computes as erfc(-u): one kernel, and no cancellation where erf(u) nears -1.

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


#: torch functions that take no Python number (torch.atan2(x, 2.0) raises).
TORCH_TENSOR_ONLY = frozenset({"atan2", "hypot", "logaddexp"})


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

    def _eval_power(self, exponent: sp.Expr) -> sp.Expr | None:
        if exponent.is_negative is not False:
            return None
        return super()._eval_power(exponent)


def _clip(x: sp.Expr, lo: sp.Expr, hi: sp.Expr) -> sp.Expr:
    return sp.Min(sp.Max(x, lo), hi)


def _where(cond: sp.Basic, a: sp.Expr, b: sp.Expr) -> sp.Expr:
    return Piecewise((a, cond), (b, True))


#: The functions a symbolic body may call, by the name it calls them.
#: sympy's names come first; the aliases are the frameworks' spellings.
FUNCTIONS: Mapping[str, Callable[..., sp.Basic]] = MappingProxyType(
    {
        "exp": sp.exp,
        "log": sp.log,
        "sqrt": sp.sqrt,
        "sin": sp.sin,
        "cos": sp.cos,
        "tan": sp.tan,
        "asin": sp.asin,
        "acos": sp.acos,
        "atan": sp.atan,
        "atan2": sp.atan2,
        "sinh": sp.sinh,
        "cosh": sp.cosh,
        "tanh": sp.tanh,
        "asinh": sp.asinh,
        "acosh": sp.acosh,
        "atanh": sp.atanh,
        "log1p": log1p,
        "expm1": expm1,
        "hypot": hypot,
        "erf": sp.erf,
        "erfc": sp.erfc,
        "erfinv": sp.erfinv,
        "gamma": sp.gamma,
        "loggamma": sp.loggamma,
        "digamma": sp.digamma,
        "polygamma": sp.polygamma,
        "Abs": sp.Abs,
        "abs": sp.Abs,
        "sign": sp.sign,
        "Min": sp.Min,
        "Max": sp.Max,
        "min": sp.Min,
        "max": sp.Max,
        "floor": sp.floor,
        "ceiling": sp.ceiling,
        "Piecewise": Piecewise,
        "where": _where,
        "clip": _clip,
        "sigmoid": sigmoid,
        "softplus": softplus,
        "logaddexp": logaddexp,
        "xlogy": xlogy,
        "bessel_i0": bessel_i0,
        "bessel_i1": bessel_i1,
        "bessel_i0e": bessel_i0e,
        "bessel_i1e": bessel_i1e,
        "ndtr": ndtr,
        "ndtri": ndtri,
        "log_ndtr": log_ndtr,
        "logit": logit,
        "erfcx": erfcx,
        "xlog1py": xlog1py,
        "entr": entr,
    }
)

#: Named constants a symbolic body may use.
CONSTANTS: Mapping[str, sp.Expr] = MappingProxyType({"pi": sp.pi, "E": sp.E, "inf": sp.oo, "oo": sp.oo})


def _mp_sigmoid(x: mpmath.mpf) -> mpmath.mpf:
    return 1 / (1 + mpmath.exp(-x))


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


#: mpmath implementations of the functions above that `lambdify(modules="mpmath")`
#: does not know, for the high-precision reference of the checks.
MPMATH_IMPLEMENTATIONS: Mapping[str, Callable[..., mpmath.mpf]] = MappingProxyType(
    {
        "sigmoid": _mp_sigmoid,
        "softplus": _mp_softplus,
        "logaddexp": _mp_logaddexp,
        "xlogy": _mp_xlogy,
        "bessel_i0": lambda x: mpmath.besseli(0, x),
        "bessel_i1": lambda x: mpmath.besseli(1, x),
        "bessel_i0e": _mp_i0e,
        "bessel_i1e": _mp_i1e,
        "log1p": mpmath.log1p,
        "expm1": mpmath.expm1,
        "hypot": mpmath.hypot,
        "erfinv": mpmath.erfinv,
        "loggamma": mpmath.loggamma,
        "polygamma": mpmath.polygamma,
        "ndtr": lambda x: mpmath.ncdf(x),
        "ndtri": lambda p: mpmath.sqrt(2) * mpmath.erfinv(2 * p - 1),
        "log_ndtr": lambda x: mpmath.log(mpmath.ncdf(x)),
        "logit": lambda p: mpmath.log(p / (1 - p)),
        "erfcx": lambda x: mpmath.exp(x**2) * mpmath.erfc(x),
        "xlog1py": lambda x, y: mpmath.mpf(0) if x == 0 else x * mpmath.log1p(y),
        "entr": lambda x: -x * mpmath.log(x) if x > 0 else (mpmath.mpf(0) if x == 0 else -mpmath.inf),
    }
)
