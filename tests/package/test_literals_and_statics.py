"""Numbers and static inputs in built rules: floats and tensors where each framework wants them, at every order.

`xlogy(1, y)` printed the integer 1, an integer array to JAX, whose xlogy
rule then gave it a float0 tangent at second order; `Max(x, lo)` with a
static `lo` printed `torch.maximum(lo, x)`, which refuses the Python float;
a `Piecewise` of numbers came back from JAX as a float64 (or integer) array
for float32 inputs; `sqrt((2*beta - 2/beta)**2 + 1) / beta` shared `t0 = 1 /
beta` and printed `torch.sqrt` of that Python float.
"""

from __future__ import annotations

import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from tests.conftest import built_package

RULES = """
rules:
  - name: entropy_term
    inputs: [y]
    forward: y * log(y) - y
    derivatives:
      y: xlogy(1, y) + xlog1py(0, y)
  - name: bounded
    inputs:
      x: {}
      lo: {static: true, default: 0.5}
      hi: {static: true, default: 2}
    forward: Max(x, lo) + Min(hi, x, 3) + clip(x, lo, hi) * Max(lo, hi)
  - name: step
    inputs: [x]
    forward: Piecewise((1, x > 0), (0, True))
  - name: shifted
    inputs:
      x: {}
      s: {default: 0.5}
    forward: x + s * x**2
  - name: shared_static
    inputs:
      x: {}
      beta: {static: true, default: 1.5}
    forward: beta * x - sqrt((2 * beta - 2 / beta)**2 + 1) / beta
"""


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    with built_package(tmp_path_factory.mktemp("literals"), RULES, "rg_literals"):
        yield importlib.import_module("rg_literals.jax"), importlib.import_module("rg_literals.torch")


def test_integer_literals_in_functions_are_floats_at_second_order(package):
    jax_pkg, torch_pkg = package
    assert float(jax.grad(jax.grad(jax_pkg.entropy_term))(2.0)) == pytest.approx(0.5)
    y = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(torch_pkg.entropy_term(y), y, create_graph=True)
    (h,) = torch.autograd.grad(g, y)
    assert h.item() == pytest.approx(0.5)


def _bounded(x, lo=0.5, hi=2.0):
    return np.maximum(x, lo) + np.minimum(np.minimum(hi, x), 3) + np.clip(x, lo, hi) * max(lo, hi)


@pytest.mark.parametrize("statics", [(), (0.25,), (0.25, 3), (-1, 1.5)])
def test_static_bounds_of_max_min_and_clip(package, statics):
    jax_pkg, torch_pkg = package
    x = np.array([-2.0, 0.3, 1.0, 2.5, 4.0])
    expected = _bounded(x, *statics)
    np.testing.assert_allclose(jax_pkg.bounded(jnp.asarray(x), *statics), expected, rtol=1e-15)
    xt = torch.tensor(x, requires_grad=True)
    out = torch_pkg.bounded(xt, *statics)
    np.testing.assert_allclose(out.detach().numpy(), expected, rtol=1e-15)
    out.sum().backward()
    jax_grad = jax.grad(lambda v: jax_pkg.bounded(v, *statics).sum())(jnp.asarray(x))
    np.testing.assert_allclose(xt.grad.numpy(), jax_grad, rtol=1e-15)
    grad = torch.func.grad(lambda v: torch_pkg.bounded(v, *statics).sum())(torch.tensor(x))
    np.testing.assert_allclose(grad.numpy(), jax_grad, rtol=1e-15)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_piecewise_of_numbers_has_the_inputs_dtype(package, dtype):
    jax_pkg, torch_pkg = package
    x = np.array([-1.0, 2.0], dtype=dtype)
    assert jax_pkg.step(jnp.asarray(x)).dtype == dtype
    assert jax.jit(jax_pkg.step)(jnp.asarray(x)).dtype == dtype
    assert torch_pkg.step(torch.tensor(x)).dtype == torch.from_numpy(x).dtype


def test_an_array_input_with_a_default_may_be_left_out(package):
    jax_pkg, torch_pkg = package
    x = np.array([1.0, 2.0])
    np.testing.assert_allclose(jax_pkg.shifted(jnp.asarray(x)), x + 0.5 * x**2, rtol=1e-15)
    xt = torch.tensor(x, requires_grad=True)
    out = torch_pkg.shifted(xt)
    assert out.dtype == torch.float64
    np.testing.assert_allclose(out.detach().numpy(), x + 0.5 * x**2, rtol=1e-15)
    grad = torch.func.grad(lambda v: torch_pkg.shifted(v).sum())(torch.tensor(x))
    np.testing.assert_allclose(grad.numpy(), 1 + x, rtol=1e-15)
    np.testing.assert_allclose(jax.grad(lambda v: jax_pkg.shifted(v).sum())(jnp.asarray(x)), 1 + x, rtol=1e-15)


@pytest.mark.parametrize("beta", [1.5, 2.0])
def test_a_temporary_of_static_inputs_alone_is_a_python_number(package, beta):
    jax_pkg, torch_pkg = package
    x = np.array([-1.0, 0.0, 2.0])
    expected = beta * x - np.sqrt((2 * beta - 2 / beta) ** 2 + 1) / beta
    np.testing.assert_allclose(jax_pkg.shared_static(jnp.asarray(x), beta), expected, rtol=1e-15)
    xt = torch.tensor(x, requires_grad=True)
    out = torch_pkg.shared_static(xt, beta)
    np.testing.assert_allclose(out.detach().numpy(), expected, rtol=1e-15)
    out.sum().backward()
    np.testing.assert_allclose(xt.grad.numpy(), np.full(3, beta), rtol=1e-15)
    with torch.no_grad():  # the in-place body
        np.testing.assert_allclose(torch_pkg.shared_static(torch.tensor(x), beta).numpy(), expected, rtol=1e-15)
