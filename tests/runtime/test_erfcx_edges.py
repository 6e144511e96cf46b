"""erfcx's derivatives in the runtime at float32's largest x: finite, as the exact values are."""

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
import torch

from rulegen.runtime import _asymptotic

jax.config.update("jax_enable_x64", True)

LARGEST = float(np.finfo(np.float32).max)
# erfcx''(x) ~ 1 / (sqrt(pi) x**3) * 2: 2.9e-116, below float32's smallest subnormal; erfcx' is -1/(sqrt(pi) x**2).
EXACT_SLOPE_F32 = -0.0


def _torch_slope_and_curvature(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.clone().requires_grad_(True)
    out = torch.special.erfcx(x).detach()
    slope = _asymptotic.erfcx_slope(torch, x, out)
    (curvature,) = torch.autograd.grad(slope.sum(), x)
    return slope.detach(), curvature


def test_erfcx_slope_and_its_derivative_are_finite_at_the_largest_float32():
    # The series was divided by x**2 (inf there: its derivative times the quotient's 0 was nan), and the untaken
    # difference 2 x erfcx(x) - 2/sqrt(pi) was inf there, its partial in erfcx(x), 2x, times the where's 0 nan.
    slope, curvature = _torch_slope_and_curvature(torch.tensor([LARGEST, 1e30, 10.0], dtype=torch.float32))
    assert torch.isfinite(slope).all() and torch.isfinite(curvature).all(), (slope, curvature)
    assert curvature[0] == 0 and slope[0] == EXACT_SLOPE_F32


def test_jax_erfcx_second_derivative_is_finite_at_the_largest_float32():
    from rulegen.runtime.jax._special import erfcx

    second = jax.grad(jax.grad(lambda v: erfcx(v)))
    got = float(second(np.float32(LARGEST)))
    assert got == 0.0  # 2.9e-116, below float32's smallest subnormal


@pytest.mark.parametrize(("dtype", "band"), [(np.float32, (9.195, 9.419)), (np.float64, (26.544, 26.641))])
def test_jax_erfcx_is_right_where_jax_s_own_is_zero(dtype, band):
    # jax.scipy.special.erfcx is 0 on these bands (JAX 0.10), where erfcx is 0.06 and 0.02: a rule's
    # log(erfcx(x)) was -inf at x = 9.27 in float32.  The runtime's erfcx is its asymptotic series from 8.
    from rulegen.runtime.jax._special import erfcx

    x = np.linspace(*band, 9, dtype=dtype)
    with mpmath.workdps(40):
        exact = np.array([float(mpmath.exp(mpmath.mpf(float(v)) ** 2) * mpmath.erfc(float(v))) for v in x])
    for f in (erfcx, jax.jit(erfcx)):
        got = np.asarray(f(jnp.asarray(x)))
        assert got.dtype == dtype
        np.testing.assert_allclose(got, exact, rtol=4 * float(np.finfo(dtype).eps))
        assert np.isfinite(np.log(got)).all()
