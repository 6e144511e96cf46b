"""JAX's xlogy in the runtime: a subnormal y read exactly, as XLA's pow reads it.

XLA on the CPU reads a subnormal y as 0 in log(y), where its pow reads it as a number: x**y log(x), the
derivative of x**y in y as xlogy(x**y, x), was 1 * -inf at (5e-324, 2.2e-308), where it is -744.44.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

jax.config.update("jax_enable_x64", True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_xlogy_reads_a_subnormal_exactly(dtype):
    from rulegen.runtime.jax._special import xlogy

    info = np.finfo(dtype)
    y = jnp.asarray([info.smallest_subnormal, 3 * info.smallest_subnormal, info.tiny, 0.5, 0.0, -1.0, np.nan], dtype)
    x = jnp.ones_like(y)
    for f in (xlogy, jax.jit(xlogy)):
        got = np.asarray(f(x, y))
        assert got.dtype == dtype
        exact = [math.log(float(v)) if v > 0 else (-math.inf if v == 0 else math.nan) for v in np.asarray(y)]
        np.testing.assert_allclose(got, np.asarray(exact, dtype=dtype), rtol=4 * float(info.eps))
    # JAX's own reads the subnormal as 0 (the defect mended here).
    assert float(jax.scipy.special.xlogy(x[:1], y[:1])[0]) == -math.inf
    # 0 where x is 0, but at a nan y; the derivatives log(y) and x / y.
    assert float(xlogy(dtype(0), dtype(0))) == 0.0 and math.isnan(float(xlogy(dtype(0), dtype(np.nan))))
    dx, dy = jax.grad(xlogy, argnums=(0, 1))(dtype(2.0), dtype(0.5))
    assert float(dx) == pytest.approx(math.log(0.5)) and float(dy) == pytest.approx(4.0)


def test_the_derivative_of_a_power_in_its_exponent_at_a_subnormal_base():
    from rulegen.runtime.jax._special import xlogy

    x, y = jnp.float64(5e-324), jnp.float64(2.2250738585072014e-308)
    assert float(xlogy(x**y, x)) == pytest.approx(-744.4400719213812, rel=1e-15)


def test_xlogy_of_python_numbers_is_weakly_typed_as_jnp_s():
    # The subnormal read converted its arguments to a strong float: f_xlogy(2.0, 3.0) was strongly typed where
    # jnp's arithmetic of two Python numbers is weakly typed (tests/package/test_promotion.py).
    from rulegen.runtime.jax._special import xlogy

    for x, y in ((2.0, 3.0), (2, 3), (2.0, 3)):
        got = xlogy(jnp.asarray(x) + 0.0, jnp.asarray(y) + 0.0)
        assert got.weak_type and float(got) == pytest.approx(x * math.log(y))
        out, _ = jax.jvp(xlogy, (jnp.asarray(x) + 0.0, jnp.asarray(y) + 0.0), (1.0, 1.0))
        assert out.weak_type  # the jvp's primal is the function's own
    assert not xlogy(jnp.asarray([2.0]), 3.0).weak_type
