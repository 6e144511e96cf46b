"""`power_product(b1, k1, b2, k2, ...)`, the runtime's product of powers whose partial products never under- or
overflow where the whole is in range: the value within a few ulps of the exact product at every magnitude, in
both backends and in numpy (the search's evaluation), 0, inf and nan as IEEE's product, and the registry's
derivative a product of the same kind.

Any order of t / (s**2 x)'s multiplications is inf or 0 on the way somewhere: at (-8.1e301, 1.1e-17, 3.4e289)
t / s overflows and s**2 x is in range, at (1, 1e-200, 1e250) s**2 underflows.
"""

import functools
import math

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
import sympy as sp
import torch

from rulegen.derive import functions as fn
from rulegen.runtime import _scaling
from rulegen.runtime.jax import _util as jax_util
from rulegen.runtime.torch import _util as torch_util

jax.config.update("jax_enable_x64", True)

EXPONENTS = (1, -2, -1)


def _exact(bases: tuple[float, ...], exponents: tuple[int, ...], dtype: type) -> float:
    mpmath.mp.prec = 200
    value = mpmath.mpf(1)
    for b, k in zip(bases, exponents, strict=True):
        value *= mpmath.mpf(b) ** k
    with np.errstate(over="ignore"):
        return float(np.asarray(float(value), dtype=np.float64).astype(dtype)) if value != 0 else 0.0


def _points(dtype: type, count: int) -> np.ndarray:
    """Bases log-uniform in magnitude over the dtype's whole line, normal and subnormal, of either sign."""
    info = np.finfo(dtype)
    low, high = math.log10(float(info.smallest_subnormal)), math.log10(float(info.max))
    rng = np.random.default_rng(7)
    signs = rng.choice([-1.0, 1.0], (count, 3))
    return (signs * 10.0 ** rng.uniform(low, high, (count, 3))).astype(dtype)


def _in_ulps(got: np.ndarray, exact: np.ndarray, dtype: type) -> np.ndarray:
    """Per point, the distance in units of the exact value's last place (subnormal results: of the smallest)."""
    info = np.finfo(dtype)
    unit = np.maximum(np.abs(exact), float(info.tiny)) * float(info.eps)
    with np.errstate(all="ignore"):
        return np.where(got == exact, 0.0, np.abs(got.astype(np.float64) - exact) / unit)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("backend", ["numpy", "jax", "torch"])
def test_the_product_is_right_wherever_it_is_a_float_whatever_its_partial_products(backend, dtype):
    points = _points(dtype, 400)
    exact = np.asarray([_exact(tuple(float(b) for b in row), EXPONENTS, dtype) for row in points])
    columns = [points[:, j] for j in range(3)]
    pairs = [a for c, k in zip(columns, EXPONENTS, strict=True) for a in (c, k)]
    if backend == "numpy":
        got = fn.power_product_of(*pairs)
    elif backend == "jax":
        got = np.asarray(jax.jit(jax_util.power_product, static_argnums=(1, 3, 5))(*pairs))
    else:
        got = torch_util.power_product(*(torch.from_numpy(p) if isinstance(p, np.ndarray) else p for p in pairs))
        got = got.numpy()
    assert got.dtype == dtype
    # XLA flushes subnormal inputs and results to 0: judged where neither is subnormal.
    judged = np.ones(len(points), bool)
    if backend == "jax":
        tiny = float(np.finfo(dtype).tiny)
        judged = (np.abs(points) >= tiny).all(axis=1) & ((np.abs(exact) >= tiny) | (exact == 0))
    finite = np.isfinite(exact)
    # Where the exact value is a float, the product is within 4 ulps of it (the plain product of three factors
    # rounds twice); past the largest float it is inf, of the exact value's sign.
    assert (_in_ulps(got, exact, dtype)[judged & finite] <= 4).all()
    assert (got[judged & ~finite] == exact[judged & ~finite]).all()
    # The plain product is inf, nan or 0 somewhere among these where the exact value is a normal float.
    with np.errstate(all="ignore"):
        plain = columns[0] / columns[1] / columns[1] / columns[2]
    normal = finite & (np.abs(exact) >= float(np.finfo(dtype).tiny))
    assert (~np.isfinite(plain[normal]) | (plain[normal] == 0)).any()


def test_the_point_where_every_order_of_a_lognormal_partial_fails():
    t, s, x = -8.088664238509922e301, 1.1253405361045708e-17, 3.3867879885711135e289
    exact = _exact((t, s, x), EXPONENTS, np.float64)
    with np.errstate(all="ignore"):
        assert not math.isfinite(t / s / s / x)
        assert not math.isfinite(t / s / (s * x))
    args = (t, 1, s, -2, x, -1)
    assert float(fn.power_product_of(*args)) == pytest.approx(exact, rel=4e-16)
    assert float(jax_util.power_product(*args)) == pytest.approx(exact, rel=4e-16)
    tensors = [torch.tensor(a, dtype=torch.float64) if k % 2 == 0 else a for k, a in enumerate(args)]
    assert float(torch_util.power_product(*tensors)) == pytest.approx(exact, rel=4e-16)


@pytest.mark.parametrize("backend", ["numpy", "jax", "torch"])
def test_zeros_infinities_and_nan_are_as_the_plain_product(backend):
    bases = [
        (0.0, 2.0, 3.0),  # 0 / 4 / 3
        (1.0, 0.0, 3.0),  # 1 / 0
        (0.0, 0.0, 1.0),  # 0 / 0
        (math.inf, 2.0, 3.0),
        (1.0, math.inf, 3.0),
        (math.inf, math.inf, 1.0),
        (math.nan, 1.0, 1.0),
        (-2.0, 1.0, math.nan),
    ]
    columns = [np.asarray(c) for c in zip(*bases, strict=True)]
    with np.errstate(all="ignore"):
        plain = columns[0] / columns[1] ** 2 / columns[2]
    pairs = [a for c, k in zip(columns, EXPONENTS, strict=True) for a in (c, k)]
    if backend == "numpy":
        got = fn.power_product_of(*pairs)
    elif backend == "jax":
        got = np.asarray(jax_util.power_product(*pairs))
    else:
        got = torch_util.power_product(*(torch.from_numpy(p) if isinstance(p, np.ndarray) else p for p in pairs))
        got = got.numpy()
    np.testing.assert_array_equal(got, plain)


def test_a_python_number_among_the_bases_is_a_tensor_of_the_others_dtype():
    x = torch.tensor([1e30, 3.0], dtype=torch.float32)
    got = torch_util.power_product(x, 2, 1e-30, 1, x, -1)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, torch.tensor([1.0, 3e-30]), rtol=1e-6, atol=0)


def test_the_registry_differentiates_it_into_a_product_of_the_same_kind():
    t, s, x = sp.symbols("t s x", real=True)
    product = fn.power_product(t, 1, s, -2, x, -1)
    assert product.diff(s) == -2 * fn.power_product(t, 1, s, -3, x, -1)
    assert product.diff(t) == fn.power_product(s, -2, x, -1)
    assert sp.simplify(product.diff(x).rewrite(sp.Mul) - (t / (s**2 * x)).diff(x)) == 0
    # Equal bases merge; a single base left is its power.
    assert fn.power_product(t, 1, s, 1, s, -1) == t
    with pytest.raises(TypeError):
        fn.power_product(t, s)


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_autodiff_of_the_runtime_product_is_the_products_derivative(backend):
    # The exponents taken out are piecewise constant: autodiff differentiates the near-1 product, scaled back.
    t, s, x = -8.088664238509922e301, 1.1253405361045708e-17, 3.3867879885711135e289
    mpmath.mp.prec = 200
    exact = [
        float(mpmath.mpf(s) ** -2 / mpmath.mpf(x)),
        float(-2 * mpmath.mpf(t) * mpmath.mpf(s) ** -3 / mpmath.mpf(x)),
        float(-mpmath.mpf(t) * mpmath.mpf(s) ** -2 / mpmath.mpf(x) ** 2),
    ]
    if backend == "jax":
        product = functools.partial(_scaling.power_product, jnp)
        grads = jax.grad(lambda a, b, c: product(a, 1, b, -2, c, -1), (0, 1, 2))(t, s, x)
    else:
        inputs = [torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in (t, s, x)]
        value = torch_util.power_product(inputs[0], 1, inputs[1], -2, inputs[2], -1)
        grads = torch.autograd.grad(value, inputs)
    for got, want in zip(grads, exact, strict=True):
        assert float(got) == pytest.approx(want, rel=1e-15)
