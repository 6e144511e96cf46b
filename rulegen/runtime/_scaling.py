"""Exact scalings both backends compute alike, given their array namespace (`jnp` or `torch`)."""

import math
from types import ModuleType
from typing import Any


def binade(xp: ModuleType, m: Any) -> Any:
    """The power of two at or below m (within a factor of two), 1 where m is 0, inf or nan.

    Dividing by it is exact: a homogeneous expression computed on its inputs
    over the binade of their largest magnitude keeps its squares and
    products in range (the stabilising search's scaling).  Its exponent is
    held within the normal floats' and its reciprocal's (2**-1022 to
    2**1022 in float64): XLA under `jit` divides by a power of two as a
    multiply by its reciprocal, which at 2**1023 is the subnormal 2**-1023,
    flushed to 0 (hypot's partial x / hypot at (max, 0) was 0, not 1).  Any
    power of two scales exactly, the smallest normal one a subnormal too.
    """
    guarded = xp.where((m > 0) & (m < math.inf), m, 1.0)
    # log2 of the top binade's largest floats rounds up to the format's end
    # (1024 at float64's largest), whose power of two is inf.
    top, bottom = _exponents(xp, m)
    exponent = xp.floor(xp.log2(guarded))
    return 2.0 ** xp.clip(exponent, float(bottom), float(top))


def _exponents(xp: ModuleType, m: Any) -> tuple[int, int]:
    """The exponents of the largest and smallest powers of two whose reciprocals are normal too."""
    info = xp.finfo(m.dtype)
    top = math.frexp(float(info.max))[1] - 2
    return top, -top


def power_product(xp: ModuleType, *pairs: Any, exponent_of: Any = None) -> Any:
    """b1**k1 * b2**k2 * ... of `pairs` (b1, k1, b2, k2, ...), each k an integer: no partial product
    under- or overflows where the whole is in range.

    Each base is multiplied by a power of two that brings it near 1 (two
    normal factors: a subnormal base's own would be 2**1074), the products of
    those taken, and the sum of the exponents taken out put back at the end,
    in two normal halves: every step is exact but the products of the near-1
    numbers, which round as the plain product's do.  t / (s**2 x) at
    (t, s, x) = (-8e301, 1.1e-17, 3.4e289) is 1.9e46, where t / s / s / x is
    inf and t / (s**2 x) is 0 once s**2 underflows.  0, inf and nan bases
    are taken as they are (no exponent out of them): x / 0 is inf, 0 * inf
    nan.  The exponents are piecewise constant: the derivative is that of
    the product of the near-1 numbers, scaled back.  `exponent_of(size)`
    gives floor(log2(size)) of a positive finite size, as a float (any
    integer within one of it scales as well); log2's by default.
    """
    product, low, high = power_product_parts(xp, *pairs, exponent_of=exponent_of)
    return product * low * high


def power_product_parts(
    xp: ModuleType, *pairs: Any, exponent_of: Any = None
) -> tuple[Any, Any, Any]:
    """`power_product`'s near-1 product and the two normal powers of two that
    scale it back, low first: v * product * low * high scales any v by the
    product with no partial product out of range where the whole is in
    range, and is linear in v (JAX's tangent of it)."""
    bases, exponents = pairs[0::2], [int(k) for k in pairs[1::2]]
    product, total = 1.0, 0.0
    for base, k in zip(bases, exponents, strict=True):
        size = xp.abs(base)
        finite = (size > 0) & (size < math.inf)
        guarded = xp.where(finite, size, 1.0)
        exponent = xp.where(
            finite, xp.floor(xp.log2(guarded)) if exponent_of is None else exponent_of(guarded), 0.0
        )
        half = xp.floor(exponent / 2)
        near_one = base * 2.0 ** (-half) * 2.0 ** (half - exponent)
        product = product * near_one**k
        total = total + k * exponent
    # Past twice the normal exponents the product is 0 or inf whatever the near-1 numbers are.
    top, bottom = _normal_exponents(xp, product)
    total = xp.clip(total, 2.0 * bottom, 2.0 * top)
    half = xp.floor(total / 2)
    return product, 2.0**half, 2.0 ** (total - half)


def paired(bases: Any, exponents: Any) -> tuple[Any, ...]:
    """(b1, k1, b2, k2, ...): `power_product`'s arguments from its bases and their exponents."""
    return tuple(a for b, k in zip(bases, exponents, strict=True) for a in (b, k))


def partial_pairs(bases: Any, exponents: Any, i: int) -> tuple[Any, ...]:
    """The arguments of the product in `power_product`'s partial in b_i,
    k_i power_product(..., b_i, k_i - 1, ...), a base whose exponent is then 0
    left out; () where none is left (the partial is k_i)."""
    lowered = [k - 1 if j == i else k for j, k in enumerate(exponents)]
    return tuple(a for b, k in zip(bases, lowered, strict=True) if k != 0 for a in (b, k))


def _normal_exponents(xp: ModuleType, like: Any) -> tuple[int, int]:
    """The exponents of the largest and smallest normal powers of two of `like`'s dtype."""
    info = xp.finfo(like.dtype)
    return math.frexp(float(info.max))[1] - 1, math.frexp(float(info.tiny))[1] - 1


def nth_root(xp: ModuleType, x: Any, n: int) -> Any:
    """x**(1/n), within an ulp.

    pow's exponent 1/n is rounded, which costs 2**-53 |ln x| of the result
    (100 ulps at 1e300); one Newton step on y**n = x removes it.  nan where
    x < 0, as x**(1/n) is.
    """
    y = x ** (1 / n)
    power = y**n
    # Where y**n overflows (float32's 46 largest x), x divided by y n times is in range: x / inf
    # would make the step y / n, a root 2/3 of the right one.  Where it underflows, x / 0 is no
    # step at all (XLA reads a subnormal x as 0: x / y / y / y would be 0 and the step y / n).
    over = x
    for _ in range(int(n)):
        over = over / y
    ratio = xp.where(power < math.inf, x / power, over)
    # Relative, so that the residual is no subnormal (XLA flushes those: no step at x = 1e-300).
    step = y * (1 - ratio) / n
    # x == 0 holds at a subnormal x where XLA reads it as 0 (denormals-are-zero), and its pow
    # reads 2**-1074 as 2**-1075 (cbrt(5e-324) was 1.35e-108 for 1.70e-108): the root of that
    # 0, as its arithmetic reads it.  torch computes subnormals, and only 0 is 0 there.
    return xp.where(x == 0, x * 0, xp.where(xp.isfinite(step), y - step, y))


def _over_binade(xp: ModuleType, x: Any, y: Any) -> tuple[Any, Any, Any, Any]:
    """(u, v, h, r): x and y over the binade s of the larger magnitude, h = hypot(u, v) within
    [1, 3), and r = 1 / s.

    Where an input is infinite and the other finite, (u, v) is the unit vector of its direction
    and r is 0: a product by r is the limit 0 (the scaled quotient would be inf / inf).  A 0 pair
    is (0, 0, 0, 1).  A quotient is multiplied by r, not divided by s: XLA under `jit` computes
    a / s / s as a / (s * s), whose square underflows at the smallest normals (0 / 0 for atan2's
    second derivative at (0, 2.2e-308)).
    """
    size_x, size_y = xp.abs(x), xp.abs(y)
    larger = xp.maximum(size_x, size_y)
    s = binade(xp, larger)
    infinite = larger == math.inf
    # The direction: sign(x) where x is infinite, a zero of its sign where it is finite.
    u = xp.where(infinite, xp.sign(x) * (size_x == math.inf), x / s)
    v = xp.where(infinite, xp.sign(y) * (size_y == math.inf), y / s)
    return u, v, xp.hypot(u, v), xp.where(infinite, 0.0, 1 / s)


def hypot_slope(xp: ModuleType, x: Any, y: Any) -> Any:
    """d/dx hypot(x, y) = x / hypot(x, y), on x and y over their binade: 0 at (0, 0), as the
    frameworks' own, the direction at an infinite input beside a finite one, nan at two."""
    u, _, h, _ = _over_binade(xp, x, y)
    return u / xp.where(h == 0, 1.0, h)


def hypot_curvature(xp: ModuleType, x: Any, y: Any) -> tuple[Any, Any]:
    """hypot_slope's partials (the registry's `hypot_slope.fdiff`): y**2 / h**3, inf at (0, 0)
    (its limit), and -x y / h**3, products of factors of the scaled inputs, never inf * 0."""
    u, v, h, r = _over_binade(xp, x, y)
    zero = h == 0
    h = xp.where(zero, 1.0, h)
    cosine, sine = u / h, v / h
    return xp.where(zero, math.inf, sine * sine / h * r), -(cosine * sine / h * r)


def atan2_slope(xp: ModuleType, u: Any, v: Any) -> Any:
    """u / (u**2 + v**2) (atan2's partials), as ((u' / h') / s) / h' on u and v over their
    binade s: each step within a factor 3 of the result (`functions.atan2_slope`); 0 at an
    infinite input beside a finite one."""
    u, v, h, r = _over_binade(xp, u, v)
    return u / h * r / h


def atan2_curvature(xp: ModuleType, u: Any, v: Any) -> tuple[Any, Any]:
    """atan2_slope's partials (the registry's `atan2_slope.fdiff`): (v - u) (v + u) / h**4 (no
    cancellation near the diagonal) and -2 u v / h**4, on u and v over their binade, each
    factor at most 1 before the products by 1 / s and quotients by h."""
    u, v, h, r = _over_binade(xp, u, v)
    uu = (v - u) / h * ((v + u) / h) * r / h * r / h
    return uu, -2 * (u / h) * (v / h) * r / h * r / h


def _scaled(xp: ModuleType, x: Any, y: Any) -> tuple[Any, Any, Any, Any]:
    """(s, x / s, y / s, h): the inputs over the binade s of the larger magnitude and their hypot h,
    as a person computing the partials of one point writes them (no limit at an infinite input)."""
    s = binade(xp, xp.maximum(xp.abs(x), xp.abs(y)))
    u, v = x / s, y / s
    return s, u, v, xp.hypot(u, v)


def hypot_slopes_inline(xp: ModuleType, x: Any, y: Any) -> tuple[Any, Any]:
    """`hypot_slopes` where nothing differentiates it: on one scaling, nan at an infinite input
    (inf / inf), as the frameworks' own derivatives are."""
    _, u, v, h = _scaled(xp, x, y)
    guarded = xp.where(h == 0, 1.0, h)
    return u / guarded, v / guarded


def atan2_slopes_inline(xp: ModuleType, x: Any, y: Any) -> tuple[Any, Any]:
    """`atan2_slopes` where nothing differentiates it: ((x' / h') / s) / h' on one scaling."""
    s, u, v, h = _scaled(xp, x, y)
    return u / h / s / h, v / h / s / h


def plane_slopes_inline(xp: ModuleType, x: Any, y: Any) -> tuple[Any, Any, Any, Any]:
    """`plane_slopes` where nothing differentiates it: the four quotients on one scaling."""
    s, u, v, h = _scaled(xp, x, y)
    guarded = xp.where(h == 0, 1.0, h)
    return u / guarded, v / guarded, u / h / s / h, v / h / s / h


def hypot_slopes(xp: ModuleType, x: Any, y: Any) -> tuple[Any, Any]:
    """hypot_slope(x, y) and hypot_slope(y, x) on one scaling, each as `hypot_slope` computes it."""
    u, v, h, _ = _over_binade(xp, x, y)
    guarded = xp.where(h == 0, 1.0, h)
    return u / guarded, v / guarded


def atan2_slopes(xp: ModuleType, x: Any, y: Any) -> tuple[Any, Any]:
    """atan2_slope(x, y) and atan2_slope(y, x) on one scaling, each as `atan2_slope` computes it."""
    u, v, h, r = _over_binade(xp, x, y)
    return u / h * r / h, v / h * r / h


def plane_slopes(xp: ModuleType, x: Any, y: Any) -> tuple[Any, Any, Any, Any]:
    """hypot_slope(x, y), hypot_slope(y, x), atan2_slope(x, y) and atan2_slope(y, x) on one scaling:
    x / h, y / h, x / h**2 and y / h**2, h = hypot(x, y) (the partials of hypot and atan2 at a
    point), each computed as the function of its own computes it."""
    u, v, h, r = _over_binade(xp, x, y)
    guarded = xp.where(h == 0, 1.0, h)
    return u / guarded, v / guarded, u / h * r / h, v / h * r / h


def plane_curvature(xp: ModuleType, x: Any, y: Any) -> tuple[tuple[Any, Any], ...]:
    """`plane_slopes`' partials in x and y, output by output, on one scaling: `hypot_curvature`
    and `atan2_curvature` of (x, y) and of (y, x)."""
    u, v, h, r = _over_binade(xp, x, y)
    zero = h == 0
    guarded = xp.where(zero, 1.0, h)
    cosine, sine = u / guarded, v / guarded
    cross = -(cosine * sine / guarded * r)
    across = (v - u) / h * ((v + u) / h) * r / h * r / h
    product = -2 * (u / h) * (v / h) * r / h * r / h
    return (
        (xp.where(zero, math.inf, sine * sine / guarded * r), cross),
        (cross, xp.where(zero, math.inf, cosine * cosine / guarded * r)),
        (across, product),
        (product, -across),
    )


def _signed_power(xp: ModuleType, x: Any, y: Any, k: int) -> tuple[Any, Any]:
    """(|x|**(y - k) where x < 0 (or -0) and y is an integer, else x**(y - k); whether that
    power is negative): y - k rounds to y past 2**53 (2**24 in float32), and x**(y - k) with it
    takes the parity of y, the wrong sign (x**y's derivative at (-1, 1e200) was 1e200).  y / 2
    is exact, an integer where y is even.  Elsewhere IEEE's power, nan below 0 at every other y."""
    integral = ((x < 0) | (1 / x < 0)) & (y == xp.floor(y))
    odd = integral & (y != 2 * xp.floor(y / 2))
    return xp.where(integral, -x, x) ** (y - k), odd if k % 2 == 0 else integral & ~odd


def power_slope(xp: ModuleType, x: Any, y: Any) -> Any:
    """d/dx x**y = y x**(y - 1).

    Where |x| < 1, |y| < 1 and x**(y - 1) overflows (x subnormal, y tiny: 2.5e-311**(-1 - 1e-100)),
    y x**y / x, a number there: the quotient is 0 or inf where x**y under- or overflows, the power
    where it does not, each where the other is not.  x stands in as 1 where the quotient is not
    taken.  (y == 0 is no branch: XLA reads a subnormal y as 0 in a comparison.)"""
    size = xp.abs(x)
    overflows = (size < 1) & (x != 0) & (xp.abs(y) < 1) & (size ** (y - 1) == math.inf)
    power, negative = _signed_power(xp, x, y, 1)
    taken = xp.where(overflows, x, 1.0)
    return xp.where(overflows, taken**y * y / taken, y * xp.where(negative, -power, power))


def power_log(xp: ModuleType, xlogy: Any, x: Any, y: Any) -> Any:
    """d/dy x**y = x**y log(x), as `xlogy(x**y, x)`: 0 where x**y is 0 (x = 0, y > 0: 0 * -inf
    as a product, and its limit 0)."""
    return xlogy(x**y, x)


def power_curvature(xp: ModuleType, xlogy: Any, x: Any, y: Any) -> tuple[Any, Any]:
    """`power_slope`'s partials: y (y - 1) x**(y - 2) and x**(y - 1) (1 + y log(x)), each computed
    whole (autodiff of y x**(y - 1) is 0 * inf at y = 0 beside a subnormal x, and y (y - 1) times an
    overflowed x**(y - 2) at y = 5e-324, x = 2.2e-308, where the derivative is -9.98e291).

    In x: where x**(y - 2) overflows at |x| < 1, power_slope(x, y) (y - 1) / x (0 at y = 0 and
    y = 1); elsewhere (y x**(y - 2)) (y - 1), 0 where the power is 0 however large y is (y (y - 1)
    overflows at y = 1e200).  In y: the product, 1 + xlogy(y, x) for 1 + y log(x) (1 at y = 0
    beside x = 0); at x = 0 its limit from above: 0 for y > 1, -inf for 0 < y <= 1, inf for
    y <= 0."""
    size = xp.abs(x)
    overflows = (size < 1) & (x != 0) & (size ** (y - 2) == math.inf)
    power, negative = _signed_power(xp, x, y, 2)
    direct = y * xp.where(negative, -power, power) * (y - 1)
    quotient = power_slope(xp, x, y) * (y - 1) / xp.where(overflows, x, 1.0)
    in_x = xp.where(overflows, quotient, direct)
    at_zero = xp.where(y > 1, 0.0, xp.where(y > 0, -math.inf, math.inf))
    in_y = xp.where(x == 0, xp.where(y != y, y, at_zero), x ** (y - 1) * (1 + xlogy(y, x)))
    return in_x, in_y


def power_log_curvature(xp: ModuleType, xlogy: Any, x: Any, y: Any) -> tuple[Any, Any]:
    """`power_log`'s partials: x**(y - 1) (1 + y log(x)) (`power_curvature`'s in y) and
    x**y log(x)**2 as xlogy(xlogy(x**y, x), x), each computed whole: autodiff of xlogy(x**y, x)
    in y is log(x) times x**y log(x), -inf * 0 at x = 0, where the limit is 0 for y > 0 (and
    inf for y <= 0, xlogy(-inf, 0))."""
    _, in_y = power_curvature(xp, xlogy, x, y)
    return in_y, xlogy(power_log(xp, xlogy, x, y), x)
