"""x**(1/n) in the runtime (`nth_root`): differentiated by its stated derivative, nth_root(x, n)**(1 - n) / n,
at every order.

Autodiff of the root's refinement step (a Newton step on y**n = x) was nan at the smallest normals, at 1e-300,
at 1e-30 in float32 and at inf, and half the second derivative at 1.29e20 in float32.
"""

import jax
import mpmath
import numpy as np
import pytest
import torch

jax.config.update("jax_enable_x64", True)

#: Points where autodiff of the refinement step was wrong, with a few ordinary ones.
POINTS = {
    "float64": [1e-300, 2.2250738585072014e-308, 1e200, 8.0, 0.3, 0.0, np.inf],
    "float32": [1e-30, 3.64e-31, 1.1754943508222875e-38, 1.29e20, 8.0, 0.3, 0.0, np.inf],
}


def _exact_second(x: float, dtype: np.dtype) -> float:
    """d2/dx2 x**(1/3) = -2/9 x**(-5/3), rounded to `dtype`: -inf at 0 (its limit), 0 at inf."""
    if x == 0:
        return -np.inf
    if np.isinf(x):
        return 0.0
    with mpmath.workdps(40):
        x = float(np.asarray(x, dtype=dtype))
        exact = float(-mpmath.mpf(2) / 9 * mpmath.mpf(x) ** (-mpmath.mpf(5) / 3))
    return -np.inf if -exact > float(np.finfo(dtype).max) else exact


def _agrees(got: np.ndarray, points: list[float], dtype: np.dtype) -> None:
    exact = np.asarray([_exact_second(v, dtype) for v in points], dtype=dtype)
    finite = np.isfinite(exact)
    assert np.array_equal(got[~finite], exact[~finite]), (got, exact)
    np.testing.assert_allclose(got[finite], exact[finite], rtol=8 * np.finfo(dtype).eps, atol=0)


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_jax_nth_roots_second_derivative_is_its_stated_ones(dtype, jit):
    from rulegen.runtime.jax._util import nth_root

    second = jax.vmap(jax.grad(jax.grad(lambda x: nth_root(x, 3))))
    x = np.asarray(POINTS[dtype], dtype=dtype)
    got = np.asarray((jax.jit(second) if jit else second)(x))
    assert got.dtype == dtype
    _agrees(got, POINTS[dtype], np.dtype(dtype))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_torch_nth_roots_second_derivative_is_its_stated_ones(dtype):
    from rulegen.runtime.torch._special import nth_root

    x = torch.tensor(POINTS[dtype], dtype=getattr(torch, dtype))
    second = torch.func.grad(torch.func.grad(lambda x: nth_root(x, 3)))
    got = torch.func.vmap(second)(x).numpy()
    _agrees(got, POINTS[dtype], np.dtype(dtype))


def test_torch_nth_root_is_the_value_alone_where_nothing_differentiates_it():
    from rulegen.runtime.torch._special import nth_root

    x = torch.tensor([8.0, 1e-300, 0.0], dtype=torch.float64)
    assert nth_root(x, 3).grad_fn is None
    assert nth_root(x.requires_grad_(), 3).grad_fn is not None
