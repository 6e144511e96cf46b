"""Every value of a symbolic rule is computed in its float inputs' dtype.

Integer arrays in arithmetic (`2**k`, `exp(k)`, `k / 2`) and tensors built
from numbers alone (`torch.where(c, 0.1, 0.2)`, `torch.tensor(0.1)`) once
came out in integer arithmetic or in float32 inside float64 code.
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
  - name: int_power
    inputs:
      x: {}
      k: {dtype: int}
    forward: x * 2**k + x * 3**(-k)
  - name: int_functions
    inputs:
      x: {}
      k: {dtype: int}
    forward: x * exp(k / 3) + sqrt(k**2 + 1) * x / 7
  - name: number_pieces
    inputs: [x]
    forward: x * sqrt(where(x > 0, 2, 3)) + exp(Piecewise((1, x > 0), (0, True))) * x
  - name: number_pieces_of_int
    inputs:
      x: {}
      k: {dtype: int}
    forward: x * where(k > 0, 0.1, 0.3)
  - name: tensor_only_numbers
    inputs: [x]
    forward: hypot(x, 0.1) + atan2(x, 0.3) + logaddexp(x, 0.7)
  - name: bool_weights
    inputs:
      x: {}
      m: {dtype: bool}
    forward: x * exp(m / 10) + 0.1 * m
  - name: two_float_dtypes
    inputs:
      x: {}
      y: {}
      k: {dtype: int}
    forward: x * y * exp(k / 10) + where(x > y, 0.1, 0.2)
"""

X = np.array([-1.5, -0.25, 0.5, 2.0])
K = np.array([-2, -1, 0, 3])
M = np.array([True, False, True, False])


def _exact(name: str, x: np.ndarray, other: np.ndarray | None = None) -> np.ndarray:
    """float64 NumPy references, computed with the integer inputs as floats."""
    k = K.astype(np.float64)
    references = {
        "int_power": lambda: x * 2.0**k + x * 3.0 ** (-k),
        "int_functions": lambda: x * np.exp(k / 3) + np.sqrt(k**2 + 1) * x / 7,
        "number_pieces": lambda: x * np.sqrt(np.where(x > 0, 2.0, 3.0)) + np.exp(np.where(x > 0, 1.0, 0.0)) * x,
        "number_pieces_of_int": lambda: x * np.where(K > 0, 0.1, 0.3),
        "tensor_only_numbers": lambda: np.hypot(x, 0.1) + np.arctan2(x, 0.3) + np.logaddexp(x, 0.7),
        "bool_weights": lambda: x * np.exp(M / 10) + 0.1 * M,
        "two_float_dtypes": lambda: x * other * np.exp(k / 10) + np.where(x > other, 0.1, 0.2),
    }
    return references[name]()


NAMES = [
    "int_power",
    "int_functions",
    "number_pieces",
    "number_pieces_of_int",
    "tensor_only_numbers",
    "bool_weights",
]


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    with built_package(tmp_path_factory.mktemp("dtypes"), RULES, "rg_dtype_discipline"):
        yield importlib.import_module("rg_dtype_discipline.jax"), importlib.import_module("rg_dtype_discipline.torch")


def _second(name: str):
    return {"bool_weights": M, "number_pieces": None, "tensor_only_numbers": None}.get(name, K)


def _args(name: str, x, module):
    other = _second(name)
    return (x,) if other is None else (x, module(other))


@pytest.mark.parametrize("name", NAMES)
def test_float64_in_is_float64_throughout_in_torch(package, name):
    _, torch_pkg = package
    assert torch.get_default_dtype() == torch.float32
    x = torch.tensor(X, dtype=torch.float64, requires_grad=True)
    out = getattr(torch_pkg, name)(*_args(name, x, torch.as_tensor))
    assert out.dtype == torch.float64
    np.testing.assert_allclose(out.detach().numpy(), _exact(name, X), rtol=1e-15, atol=1e-15)
    (grad,) = torch.autograd.grad(out.sum(), x)
    assert grad.dtype == torch.float64


@pytest.mark.parametrize("name", NAMES)
def test_float64_in_is_float64_throughout_in_jax(package, name):
    jax_pkg, _ = package
    out = getattr(jax_pkg, name)(*_args(name, jnp.asarray(X), jnp.asarray))
    assert out.dtype == jnp.float64
    np.testing.assert_allclose(np.asarray(out), _exact(name, X), rtol=1e-15, atol=1e-15)


@pytest.mark.parametrize("name", NAMES)
def test_float32_in_is_float32_out(package, name):
    jax_pkg, torch_pkg = package
    x32 = X.astype(np.float32)
    out = getattr(torch_pkg, name)(*_args(name, torch.tensor(x32), torch.as_tensor))
    assert out.dtype == torch.float32
    np.testing.assert_allclose(out.numpy(), _exact(name, X), rtol=1e-6, atol=1e-6)
    out = getattr(jax_pkg, name)(*_args(name, jnp.asarray(x32), jnp.asarray))
    assert out.dtype == jnp.float32
    jax_grad = jax.grad(lambda x: getattr(jax_pkg, name)(*_args(name, x, jnp.asarray)).sum())(jnp.asarray(x32))
    assert jax_grad.dtype == jnp.float32


def test_mixed_float_inputs_compute_in_the_wider_dtype(package):
    jax_pkg, torch_pkg = package
    y = np.linspace(-1, 1, 4)
    out = torch_pkg.two_float_dtypes(torch.tensor(X, dtype=torch.float32), torch.tensor(y), torch.tensor(K))
    assert out.dtype == torch.float64
    exact = _exact("two_float_dtypes", X.astype(np.float32).astype(np.float64), y)
    np.testing.assert_allclose(out.numpy(), exact, rtol=1e-14)
    out = jax_pkg.two_float_dtypes(jnp.asarray(X, dtype=jnp.float32), jnp.asarray(y), jnp.asarray(K))
    np.testing.assert_allclose(np.asarray(out), exact, rtol=1e-14)


def test_a_float32_input_beside_a_float64_one_is_promoted_before_anything_is_computed(built):
    # sin(x) * exp(-x**2) * y with a float32 x and a float64 y: the result is float64, and was
    # computed from float32 sin(x) and exp(-x**2) (float32 accuracy, 1e-8 off), promoted only after.
    jax_pkg, torch_pkg, _ = built
    x32 = np.asarray([1.3, 2.7], dtype=np.float32)
    y64 = np.asarray([1.0, 3.0])
    x = x32.astype(np.float64)  # the float32 values, exactly
    exact = np.sin(x) * np.exp(-(x**2)) * y64
    got_jax = jax_pkg.sin_exp_mul(jnp.asarray(x32), jnp.asarray(y64))
    got_torch = torch_pkg.sin_exp_mul(torch.from_numpy(x32), torch.from_numpy(y64))
    for got in (np.asarray(got_jax), got_torch.numpy()):
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, exact, rtol=1e-14)
    xt = torch.from_numpy(x32).requires_grad_()
    (grad,) = torch.autograd.grad(torch_pkg.sin_exp_mul(xt, torch.from_numpy(y64)).sum(), xt)
    assert grad.dtype == torch.float32
    assert jax.grad(lambda a: jax_pkg.sin_exp_mul(a, jnp.asarray(y64)).sum())(jnp.asarray(x32)).dtype == jnp.float32
