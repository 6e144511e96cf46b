"""A quotient of arrays in generated JAX code differentiates in its divisor as -(a / b) / b.

JAX's own rule for a / b in b is -a * b**-2: the square under- or overflows where the derivative is a float, and
0 * inf is nan.  A partial such as xlogy's x / y is differentiated by JAX for the second derivative: at
(0, 1e-38) it was nan where it is 0, and xlog1py's x / (1 + y) at (inf, max) nan where it is -inf.  Under
`jax.jit` XLA would reassociate (a / b) / b into a / (b * b): the runtime holds the quotient whole.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import generated.jax as gj
from generated.jax._util import quotient

jax.config.update("jax_enable_x64", True)

pytestmark = pytest.mark.unit

DTYPES = (np.float32, np.float64)


def _second(f, argnum, x, y, *, jit):
    g = jax.vmap(jax.grad(jax.grad(f, argnums=argnum), argnums=argnum))
    return np.asarray((jax.jit(g) if jit else g)(jnp.asarray(x), jnp.asarray(y)))


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_xlogy_second_derivative_in_y_where_y_squared_underflows(dtype, jit):
    tiny = float(np.finfo(dtype).tiny)
    x = np.asarray([0.0, -0.0, 2.0], dtype=dtype)
    y = np.asarray([tiny, tiny, 4.0], dtype=dtype)
    np.testing.assert_array_equal(_second(gj.f_xlogy, 1, x, y, jit=jit), [0.0, 0.0, -0.125])


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_xlog1py_second_derivative_in_y_where_the_square_overflows(dtype, jit):
    big = float(np.finfo(dtype).max)
    x = np.asarray([np.inf, -np.inf, 2.0], dtype=dtype)
    y = np.asarray([big, big, 3.0], dtype=dtype)
    np.testing.assert_array_equal(_second(gj.f_xlog1py, 1, x, y, jit=jit), [-np.inf, np.inf, -0.125])


@pytest.mark.parametrize("dtype", DTYPES)
def test_quotient_is_division_in_value_dtype_and_first_derivatives(dtype):
    a = jnp.asarray([1.0, -3.0, 0.5], dtype=dtype)
    b = jnp.asarray([3.0, 7.0, -2.0], dtype=dtype)
    assert quotient(a, b).dtype == (a / b).dtype
    np.testing.assert_array_equal(quotient(a, b), a / b)
    for argnum in (0, 1):
        ours = jax.vmap(jax.grad(quotient, argnums=argnum))(a, b)
        theirs = jax.vmap(jax.grad(lambda u, v: u / v, argnums=argnum))(a, b)
        np.testing.assert_allclose(ours, theirs, rtol=4 * float(np.finfo(dtype).eps))
    # A Python number keeps its weak type, an integer array is divided as a float, as `/` does.
    assert quotient(a, 2.0).dtype == a.dtype
    assert quotient(jnp.arange(3), jnp.asarray(2.0, dtype)).dtype == (jnp.arange(3) / jnp.asarray(2.0, dtype)).dtype
