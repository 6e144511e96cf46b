"""log1pmx, log1p(z) - z without its cancellation at small z, as both backends' runtime computes it."""

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
import torch

from rulegen.runtime import _asymptotic
from rulegen.runtime.jax._util import log1pmx as jax_log1pmx
from rulegen.runtime.torch._util import log1pmx as torch_log1pmx

jax.config.update("jax_enable_x64", True)

# Both sides of 0 down to below float32's smallest normal, the series' edge at |z| = 1/2, near -1 and far above.
POINTS = np.concatenate(
    [
        -np.logspace(-40, -0.01, 300),
        np.logspace(-40, 30, 300),
        [0.0, -0.5, 0.5, np.nextafter(0.5, 0), -np.nextafter(0.5, 0), -0.999999, 1.0, 3.0],
    ]
)


def _exact(z: float) -> mpmath.mpf:
    with mpmath.workprec(400):
        return mpmath.log1p(mpmath.mpf(z)) - mpmath.mpf(z)


def _ulps(got: np.ndarray, points: np.ndarray, dtype: type, *, flushed: bool) -> float:
    """The most ulps `got` is off; with `flushed`, a subnormal exact value may be 0 (XLA on the CPU flushes them)."""
    worst = 0.0
    for g, z in zip(got, points, strict=True):
        exact = dtype(float(_exact(float(z))))
        if flushed and abs(exact) < np.finfo(dtype).tiny and g == 0:
            continue
        if g != exact:
            worst = max(worst, abs(float(g) - float(exact)) / float(np.spacing(np.abs(exact))))
    return worst


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_log1pmx_is_within_a_few_ulps_of_its_exact_value(backend, dtype):
    # log1p(z) - z as written loses log2(2/|z|) bits: 40 at z = 1e-12 in float64.
    points = POINTS.astype(dtype)
    if backend == "jax":
        got = np.asarray(jax_log1pmx(jnp.asarray(points)))
    else:
        got = torch_log1pmx(torch.from_numpy(points)).numpy()
    assert got.dtype == dtype
    assert _ulps(got, points, dtype, flushed=backend == "jax") <= 4


def test_log1pmx_is_differentiated_by_both_backends_without_nan():
    # Each branch is fed a stand-in where the other is taken: log1p(z) - z of the untaken branch at z = -1 is -inf,
    # and its derivative times the `where`'s 0 would be nan.
    points = [-1.0, -0.75, -0.5, -1e-8, 0.0, 1e-8, 0.5, 2.0]
    x = torch.tensor(points, dtype=torch.float64, requires_grad=True)
    (slope,) = torch.autograd.grad(torch_log1pmx(x).sum(), x, create_graph=True)
    (curvature,) = torch.autograd.grad(slope.sum(), x)
    jax_slope = jax.vmap(jax.grad(jax_log1pmx))(jnp.asarray(points))
    exact = [-z / (1 + z) for z in points[1:]]
    np.testing.assert_allclose(slope.detach().numpy()[1:], exact, rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(np.asarray(jax_slope)[1:], exact, rtol=1e-12, atol=1e-300)
    assert torch.isfinite(curvature[1:]).all(), curvature
    assert _asymptotic.log1pmx(np, np.float64(-1.0)) == -np.inf
