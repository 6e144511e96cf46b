"""erfcx's derivatives in the runtime at float32's largest x: finite, as the exact values are."""

import jax
import numpy as np
import torch

from rulegen.runtime import _asymptotic

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
