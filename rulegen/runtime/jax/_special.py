"""Functions whose JAX derivative is wrong, with the registry's at every order.

erfcx's derivative, 2 x erfcx(x) - 2 / sqrt(pi), cancels as x grows (1.1e8
float64 eps off at x = 1e4); the registry's is a series from x = 8
(`_asymptotic.erfcx_slope`), and a rule whose derivative calls erfcx
(log_ndtr's) is differentiated by it here.  Its value is the series from
x = 8 too, where JAX's own erfcx is 0 on a band of each dtype.

JAX differentiates i0 as i0e(x) exp(|x|), whose derivative at 0 is 1
(|x|'s there), where I0'(0) = I1(0) = 0: a derivative that calls I0
(I1's, I0(x) - I1(x) / x) is differentiated by I1 here.  I1 is
differentiated by I0(x) - I1(x) / x, inf - inf where both overflow: here by
`_asymptotic.bessel_i1_slope`, itself differentiated as one product.

ndtri's derivative, 1 / phi(ndtri(x)), is `_asymptotic.ndtri_slope`,
differentiated as ndtri(x) times its square: one product, -inf where it
overflows (autodiff of its tails' erfcx(u) / x is inf - inf there, and JAX's
own derivative of ndtri is 0 at x = 0).
"""

import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import jax.scipy.special
import numpy as np

from . import _asymptotic, _scaling, _util

# Where erfcx is its asymptotic series: jax.scipy.special.erfcx is 0 on
# [9.195, 9.419] in float32 and on [26.544, 26.641] in float64 (JAX 0.10),
# where erfcx is 0.06 and 0.02; the series is within 2 eps from 8.
SERIES_FROM = 8.0


@jax.custom_jvp
def erfcx(x: jax.Array) -> jax.Array:
    """erfcx(x) (its series from x = 8), with the registry's derivative at every order."""
    far = x >= SERIES_FROM
    series = _asymptotic.erfcx_series(jnp, 0, jnp.where(far, x, SERIES_FROM))
    return jnp.where(far, series, jax.scipy.special.erfcx(x))


@erfcx.defjvp
def _erfcx_jvp(
    primals: tuple[jax.Array], tangents: tuple[jax.Array]
) -> tuple[jax.Array, jax.Array]:
    (x,), (x_dot,) = primals, tangents
    out = erfcx(x)
    return out, x_dot * _asymptotic.erfcx_slope(jnp, x, out)


@jax.custom_jvp
def bessel_i0(x: jax.Array) -> jax.Array:
    """I0(x), JAX's, with its derivative I1(x) at every order."""
    return jax.scipy.special.i0(x)


@bessel_i0.defjvp
def _bessel_i0_jvp(
    primals: tuple[jax.Array], tangents: tuple[jax.Array]
) -> tuple[jax.Array, jax.Array]:
    (x,), (x_dot,) = primals, tangents
    return bessel_i0(x), x_dot * bessel_i1(x)


@jax.custom_jvp
def bessel_i1(x: jax.Array) -> jax.Array:
    """I1(x), JAX's, with its derivative `bessel_i1_slope` at every order."""
    return jax.scipy.special.i1(x)


@bessel_i1.defjvp
def _bessel_i1_jvp(
    primals: tuple[jax.Array], tangents: tuple[jax.Array]
) -> tuple[jax.Array, jax.Array]:
    (x,), (x_dot,) = primals, tangents
    return bessel_i1(x), x_dot * bessel_i1_slope(x)


@jax.custom_jvp
def bessel_i1_slope(x: jax.Array) -> jax.Array:
    """I1'(x) (`_asymptotic.bessel_i1_slope`), differentiated by I1''(x) as one product where I0
    and I1 overflow: JAX's derivative of I0 - I1 / x, or of exp(|x|) times the scaled functions,
    is inf - inf there."""
    return _asymptotic.bessel_i1_slope(jnp, jax.scipy.special, x)


@bessel_i1_slope.defjvp
def _bessel_i1_slope_jvp(
    primals: tuple[jax.Array], tangents: tuple[jax.Array]
) -> tuple[jax.Array, jax.Array]:
    (x,), (x_dot,) = primals, tangents
    return bessel_i1_slope(x), x_dot * bessel_i1_curvature(x)


def bessel_i1_curvature(x: jax.Array) -> jax.Array:
    """I1''(x) (`_asymptotic.bessel_i1_curvature`), differentiated by JAX."""
    return _asymptotic.bessel_i1_curvature(jnp, jax.scipy.special, x)


@jax.custom_jvp
def sigmoid_slope(x: jax.Array) -> jax.Array:
    """sigmoid'(x) = sigmoid(x) sigmoid(-x), differentiated as -tanh(x / 2) sigmoid'(x) at
    every order: autodiff of the product, sigmoid(-x) - sigmoid(x) times it, is 0 at
    x = 1e-30 in float32."""
    return jax.nn.sigmoid(x) * jax.nn.sigmoid(-x)


@sigmoid_slope.defjvp
def _sigmoid_slope_jvp(
    primals: tuple[jax.Array], tangents: tuple[jax.Array]
) -> tuple[jax.Array, jax.Array]:
    (x,), (x_dot,) = primals, tangents
    out = sigmoid_slope(x)
    # Each factor at most 1 in magnitude, into the tangent in turn: no product is subnormal
    # where the result is normal (XLA flushes it: tanh'' at 1.5e-38 in float32 was 0).
    return out, x_dot * -jnp.tanh(x / 2) * out


@jax.custom_jvp
def ndtri_slope(x: jax.Array) -> jax.Array:
    """ndtri'(x) = 1 / phi(ndtri(x)) (`_asymptotic.ndtri_slope`), differentiated as
    ndtri(x) ndtri'(x)**2 at every order."""
    return _asymptotic.ndtri_slope(jnp, jax.scipy.special.ndtri, erfcx, x)


@ndtri_slope.defjvp
def _ndtri_slope_jvp(
    primals: tuple[jax.Array], tangents: tuple[jax.Array]
) -> tuple[jax.Array, jax.Array]:
    (x,), (x_dot,) = primals, tangents
    out = ndtri_slope(x)
    return out, x_dot * (jax.scipy.special.ndtri(x) * out) * out


@jax.custom_jvp
def atan2(y: jax.Array, x: jax.Array) -> jax.Array:
    """atan2(y, x) of the signed zeros XLA reads a subnormal input as, with JAX's own derivative.

    XLA's arctan2 flushes a subnormal input partway through its algorithm:
    nan at (1e-45, 1e-45), -pi at (5e-324, -max).  Here a subnormal is the
    zero of its sign (`y * 0`), as XLA's arithmetic reads it, chosen by its
    magnitude: XLA under `jit` simplifies where(y == 0, y * 0, y) to y.
    """
    return jnp.arctan2(_zero_if_subnormal(y), _zero_if_subnormal(x))


def _zero_if_subnormal(v: jax.Array) -> jax.Array:
    return jnp.where(jnp.abs(v) < jnp.finfo(v.dtype).tiny, v * 0, v)


@atan2.defjvp
def _atan2_jvp(
    primals: tuple[jax.Array, jax.Array], tangents: tuple[jax.Array, jax.Array]
) -> tuple[jax.Array, jax.Array]:
    return atan2(*primals), jax.jvp(jnp.arctan2, primals, tangents)[1]


def _two_input_slope(
    partials: Callable[[Any, jax.Array, jax.Array], tuple[Any, Any]],
) -> Callable[[Callable[..., jax.Array]], jax.custom_jvp[jax.Array]]:
    """Decorator: the function of two inputs it decorates (its value) as a custom_jvp,
    differentiated by `partials(jnp, x, y)` (d/dx, d/dy) at every order: an input held constant
    (JAX's symbolic zero) adds no term, not 0 times a partial that may be inf."""

    def slope(value: Callable[..., jax.Array]) -> jax.custom_jvp[jax.Array]:
        function = jax.custom_jvp(value)

        @functools.partial(function.defjvp, symbolic_zeros=True)
        def _jvp(
            primals: tuple[jax.Array, jax.Array], tangents: tuple[Any, Any]
        ) -> tuple[jax.Array, jax.Array]:
            out = function(*primals)
            return out, _tangent(out, partials(jnp, *primals), tangents)

        _jvp.__name__ = _jvp.__qualname__ = f"_{value.__name__}_jvp"  # as jaxprs name it
        return function

    return slope


def _tangent(out: jax.Array, partials: tuple[Any, Any], tangents: tuple[Any, Any]) -> jax.Array:
    """The tangent of `out` by its two `partials`, shaped like it: a symbolic zero adds no term."""
    zero = jax.custom_derivatives.SymbolicZero
    terms = [t * d for t, d in zip(tangents, partials, strict=True) if type(t) is not zero]
    tangent = sum(terms[1:], terms[0]) if terms else jnp.zeros_like(out)
    return jnp.broadcast_to(tangent, jnp.shape(out))


def _power_curvature(xp: Any, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
    return _scaling.power_curvature(xp, xlogy, *_inexact(x, y))


def _power_log_curvature(xp: Any, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
    return _scaling.power_log_curvature(xp, xlogy, *_inexact(x, y))


@_two_input_slope(_scaling.hypot_curvature)
def hypot_slope(x: jax.Array, y: jax.Array) -> jax.Array:
    """x / hypot(x, y) (`_scaling.hypot_slope`), differentiated by the registry's partials."""
    return _scaling.hypot_slope(jnp, x, y)


@_two_input_slope(_scaling.atan2_curvature)
def atan2_slope(u: jax.Array, v: jax.Array) -> jax.Array:
    """u / (u**2 + v**2) (`_scaling.atan2_slope`), differentiated by the registry's partials."""
    return _scaling.atan2_slope(jnp, u, v)


@_two_input_slope(_power_curvature)
def power_slope(x: jax.Array, y: jax.Array) -> jax.Array:
    """d/dx x**y = y x**(y - 1) (`_scaling.power_slope`), differentiated by the registry's
    partials (`_scaling.power_curvature`) at every order."""
    return _scaling.power_slope(jnp, *_inexact(x, y))


@_two_input_slope(_power_log_curvature)
def power_log(x: jax.Array, y: jax.Array) -> jax.Array:
    """d/dy x**y = xlogy(x**y, x) (`_scaling.power_log`), differentiated by the registry's
    partials (`_scaling.power_log_curvature`) at every order."""
    return _scaling.power_log(jnp, xlogy, *_inexact(x, y))


def _joint(name: str, rows: slice) -> Any:
    """`_scaling`'s joint function `name` (several partials of a point on one scaling) as a
    custom_jvp, differentiated by `plane_curvature`'s `rows`: an input held constant adds no
    term."""

    def value(x: jax.Array, y: jax.Array) -> Any:
        return getattr(_scaling, name)(jnp, x, y)

    value.__name__ = value.__qualname__ = name
    value.__doc__ = f"`_scaling.{name}`, differentiated by the registry's partials at every order."
    joint = jax.custom_jvp(value)

    @functools.partial(joint.defjvp, symbolic_zeros=True)
    def _joint_jvp(primals: tuple[jax.Array, jax.Array], tangents: tuple[Any, Any]) -> Any:
        outs = joint(*primals)
        curvature = _scaling.plane_curvature(jnp, *primals)[rows]
        pairs = zip(outs, curvature, strict=True)
        return outs, tuple(_tangent(out, pair, tangents) for out, pair in pairs)

    return joint


#: hypot's and atan2's partials of a point from one call on one scaling (the torch runtime's
#: names): eagerly one scaling where each call of its own computes one (under jit, XLA shares).
hypot_slopes = _joint("hypot_slopes", slice(0, 2))
atan2_slopes = _joint("atan2_slopes", slice(2, 4))
plane_slopes = _joint("plane_slopes", slice(0, 4))


def _log(y: jax.Array) -> jax.Array:
    """log(y), a positive subnormal y read from its bits (an integer k times the smallest
    subnormal: log(k) + log(2**-1074) in float64): XLA reads it as 0 (-inf), in integer
    arithmetic it reads nothing."""
    info = jnp.finfo(y.dtype)
    integer = np.dtype(f"int{8 * y.dtype.itemsize}")
    bits = jax.lax.bitcast_convert_type(y, integer)
    smallest_normal = int(np.asarray(info.tiny, dtype=y.dtype).view(integer))
    subnormal = (bits > 0) & (bits < smallest_normal)
    scaled = jnp.log(bits.astype(y.dtype)) + math.log(float(info.smallest_subnormal))
    return jnp.where(subnormal, scaled, jnp.log(y))


@jax.custom_jvp
def xlogy(x: Any, y: Any) -> jax.Array:
    """x log(y), 0 where x is 0 (but nan at a nan y), as JAX's xlogy, a subnormal y read exactly
    (`_log`); differentiated by log(y) and x / y, an input held constant adding no term."""
    if all(_util.weakly_typed(a) for a in (x, y)):
        # Python numbers, weakly typed: JAX's own keeps its result weakly typed, as jnp's
        # arithmetic of them is; the read of a subnormal below converts to a strong float.
        return jax.scipy.special.xlogy(x, y)
    x, y = _inexact(x, y)
    return jnp.where((x != 0) | jnp.isnan(y), x * _log(y), jnp.zeros_like(x))


def _inexact(*args: Any) -> tuple[jax.Array, ...]:
    dtype = jnp.result_type(*args, float)
    return tuple(jnp.asarray(a).astype(dtype) for a in args)


@functools.partial(xlogy.defjvp, symbolic_zeros=True)
def _xlogy_jvp(primals: tuple[Any, Any], tangents: tuple[Any, Any]) -> tuple[jax.Array, jax.Array]:
    out = xlogy(*primals)  # of the arguments as given: weakly typed where they are
    x, y = _inexact(*primals)
    zero = jax.custom_derivatives.SymbolicZero
    x_dot, y_dot = (None if type(t) is zero else t for t in tangents)
    terms = [t * d for t, d in ((x_dot, _log(y)), (y_dot, x / y)) if t is not None]
    tangent = sum(terms[1:], terms[0]) if terms else jnp.zeros_like(out)
    return out, jnp.broadcast_to(tangent, jnp.shape(out)).astype(out.dtype)
