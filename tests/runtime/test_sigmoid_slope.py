"""sigmoid'(x) in the runtime: its derivative is the registry's, -tanh(x / 2) sigmoid'(x), at every order.

Autodiff of sigmoid(x) sigmoid(-x) is a difference of two logistics, 0 at x = 1e-30 in float32 where the
second derivative of sigmoid is -x / 8 (and tanh's, 8 sigmoid''(2x), is -2x).
"""

import jax
import mpmath
import numpy as np
import pytest
import sympy as sp
import torch

from rulegen.derive import functions as fn
from rulegen.derive.forms import with_slopes

jax.config.update("jax_enable_x64", True)

POINTS = [1e-30, -1e-30, 1e-6, 0.5, -3.0, 20.0, -80.0, 0.0]


def _exact_curvature(x: float) -> float:
    with mpmath.workdps(60):
        s = 1 / (1 + mpmath.exp(-mpmath.mpf(x)))
        return float(-mpmath.tanh(mpmath.mpf(x) / 2) * s * (1 - s))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_jax_sigmoid_slope_is_differentiated_by_the_registry(dtype):
    from rulegen.runtime.jax._special import sigmoid_slope

    x = np.asarray(POINTS, dtype=dtype)
    got = np.asarray(jax.vmap(jax.grad(sigmoid_slope))(x))
    assert got.dtype == dtype
    exact = np.asarray([_exact_curvature(v) for v in POINTS], dtype=dtype)
    np.testing.assert_allclose(got, exact, rtol=8 * np.finfo(dtype).eps, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_torch_sigmoid_slope_is_differentiated_by_the_registry(dtype):
    from rulegen.runtime.torch._special import sigmoid_slope

    x = torch.tensor(POINTS, dtype=dtype, requires_grad=True)
    (got,) = torch.autograd.grad(sigmoid_slope(x).sum(), x)
    exact = torch.tensor([_exact_curvature(v) for v in POINTS], dtype=dtype)
    torch.testing.assert_close(got, exact, rtol=8 * torch.finfo(dtype).eps, atol=0)
    # Forward mode and the value where nothing differentiates it: the same numbers.
    tangent = torch.func.jvp(sigmoid_slope, (x.detach(),), (torch.ones_like(x),))[1]
    torch.testing.assert_close(tangent, exact, rtol=8 * torch.finfo(dtype).eps, atol=0)
    with torch.no_grad():
        plain = sigmoid_slope(x)
    torch.testing.assert_close(plain, torch.sigmoid(x) * torch.sigmoid(-x), rtol=2 * torch.finfo(dtype).eps, atol=0)


def test_products_of_opposite_logistics_become_slopes():
    x, y = sp.symbols("x y", real=True)
    s = fn.sigmoid
    assert with_slopes(4 * s(2 * x) * s(-2 * x)) == 4 * fn.sigmoid_slope(2 * x)
    assert with_slopes(y * s(x) ** 2 * s(-x)) == y * s(x) * fn.sigmoid_slope(x)
    assert with_slopes(s(x) * (1 - s(x))) == s(x) * (1 - s(x))  # not the same value: 1 - s(x) rounds
    assert with_slopes(s(x) * s(-y)) == s(x) * s(-y)
    # Its derivative is the registry's, and its value the product's.
    assert sp.diff(fn.sigmoid_slope(x), x) == -sp.tanh(x / 2) * fn.sigmoid_slope(x)
    assert float(fn.sigmoid_slope(x).rewrite(sp.exp).subs(x, 0.7)) == pytest.approx(
        float((s(x) * s(-x)).rewrite(sp.exp).subs(x, 0.7))
    )


def test_jax_tanh_curvature_at_the_smallest_float32_normals_is_not_flushed():
    # tanh'' = d/dx 4 sigmoid'(2x) = -8 tanh(x) sigmoid'(2x): the tangent 8 times -tanh(x) first, then sigmoid'(2x);
    # -tanh(x) sigmoid'(2x) alone is subnormal at x = 1.5e-38, which XLA flushes to 0.
    from rulegen.runtime.jax._special import sigmoid_slope

    x = np.float32(1.5e-38)
    curvature = jax.jit(jax.grad(lambda v: 4 * sigmoid_slope(2 * v)))(x)
    assert float(curvature) == pytest.approx(-2 * float(x), rel=1e-6)
