"""Built derivatives are as stable as the frameworks' own on the whole real line, in float32 too.

Forward-only `log(1 + exp(x))` (the JAX docs' own example) was derived as
`exp(x) / (1 + exp(x))`: in float32 its gradient at x = 100 was inf in torch
and nan in JAX.  Rules are brought to the fused forms (softplus, sigmoid,
log1p, expm1) before anything is differentiated.
"""

from __future__ import annotations

import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.special as sps
import torch

from tests.conftest import built_package

RULES = """
rules:
  - {name: docs_log1pexp, inputs: [x], forward: log(1 + exp(x))}
  - {name: log1pexp_swapped, inputs: [x], forward: log(exp(x) + 1)}
  - {name: scaled_softplus, inputs: [x], forward: log(1 + exp(2*x)) / 2}
  - {name: log_sigmoid, inputs: [x], forward: -log(1 + exp(-x))}
  - {name: logistic, inputs: [x], forward: 1 / (1 + exp(-x))}
  - {name: logistic_ratio, inputs: [x], forward: exp(x) / (exp(x) + 1)}
  - {name: gated, inputs: [x, y], forward: x * exp(y) / (1 + exp(y))}
  - {name: gaussian_slope, inputs: [x], forward: x * exp(-x**2)}
  - {name: gaussian_moment, inputs: [x], forward: x**3 * exp(-x**2 / 2)}
"""

# float64 references (value, derivative) and the framework's own function, whose
# float32 autodiff error is the bar: sigmoid's own backward, y * (1 - y), is 0
# where the derivative is below float32's eps.
REFERENCES = {
    "docs_log1pexp": (lambda x: np.logaddexp(0, x), sps.expit, torch.nn.functional.softplus),
    "log1pexp_swapped": (lambda x: np.logaddexp(0, x), sps.expit, torch.nn.functional.softplus),
    "scaled_softplus": (
        lambda x: np.logaddexp(0, 2 * x) / 2,
        lambda x: sps.expit(2 * x),
        lambda x: torch.nn.functional.softplus(x, beta=2),
    ),
    "log_sigmoid": (lambda x: -np.logaddexp(0, -x), lambda x: sps.expit(-x), torch.nn.functional.logsigmoid),
    "logistic": (sps.expit, lambda x: sps.expit(x) * sps.expit(-x), torch.sigmoid),
    "logistic_ratio": (sps.expit, lambda x: sps.expit(x) * sps.expit(-x), torch.sigmoid),
}
WIDE = np.array([-1e4, -100.0, -20.0, -1.0, 0.0, 1.0, 20.0, 100.0, 1e4])
TINY = np.finfo(np.float32).tiny  # XLA's CPU backend flushes subnormal results to zero


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    with built_package(tmp_path_factory.mktemp("stability"), RULES, "rg_stability"):
        yield importlib.import_module("rg_stability.jax"), importlib.import_module("rg_stability.torch")


def _errors(got: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """Relative errors where the exact value is a normal float32 number, 0 elsewhere (flushed to zero)."""
    normal = np.abs(exact) >= TINY
    return np.where(normal, np.abs(got - exact) / np.where(normal, np.abs(exact), 1), 0.0)


def _close_in_float32(got: np.ndarray, exact: np.ndarray, bar: np.ndarray | None = None) -> None:
    """Finite, and within 4 eps of `exact` or no further than the framework's own `bar`."""
    assert np.all(np.isfinite(got)), got
    allowed = 4 * np.finfo(np.float32).eps
    if bar is not None:
        allowed = np.maximum(allowed, _errors(bar, exact))
    assert np.all(_errors(got, exact) <= allowed), (got, exact)
    assert np.all(np.abs(got[np.abs(exact) < TINY]) < 2 * TINY)


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_float32_value_and_gradient_on_the_real_line(package, name):
    jax_pkg, torch_pkg = package
    value, derivative, native = REFERENCES[name]
    x = torch.tensor(WIDE, dtype=torch.float32, requires_grad=True)
    (native_grad,) = torch.autograd.grad(native(x).sum(), x)
    out = getattr(torch_pkg, name)(x)
    (grad,) = torch.autograd.grad(out.sum(), x)
    _close_in_float32(out.detach().numpy(), value(WIDE))
    _close_in_float32(grad.numpy(), derivative(WIDE), native_grad.numpy())
    f = getattr(jax_pkg, name)
    xs = jnp.asarray(WIDE, dtype=jnp.float32)
    _close_in_float32(np.asarray(f(xs)), value(WIDE))
    _close_in_float32(np.asarray(jax.vmap(jax.grad(f))(xs)), derivative(WIDE), native_grad.numpy())


def test_a_product_with_a_logistic_factor(package):
    jax_pkg, torch_pkg = package
    y = torch.tensor(WIDE, dtype=torch.float32, requires_grad=True)
    x = torch.ones_like(y, requires_grad=True)
    grads = torch.autograd.grad(torch_pkg.gated(x, y).sum(), (x, y))
    _close_in_float32(grads[0].numpy(), sps.expit(WIDE))
    (bar,) = torch.autograd.grad(torch.sigmoid(y).sum(), y)
    _close_in_float32(grads[1].numpy(), sps.expit(WIDE) * sps.expit(-WIDE), bar.numpy())
    jax_grads = jax.grad(lambda a, b: jax_pkg.gated(a, b).sum(), argnums=(0, 1))(
        jnp.ones(len(WIDE), jnp.float32), jnp.asarray(WIDE, jnp.float32)
    )
    _close_in_float32(np.asarray(jax_grads[0]), sps.expit(WIDE))
    _close_in_float32(np.asarray(jax_grads[1]), sps.expit(WIDE) * sps.expit(-WIDE), bar.numpy())


@pytest.mark.parametrize("name", ["gaussian_slope", "gaussian_moment"])
def test_a_gaussian_times_a_power_is_zero_far_out_not_nan(package, name):
    # (1 - 2 x**2) exp(-x**2) is inf * 0 = nan past |x| = 1e154 (float64) and 1e19 (float32), where the value and
    # its derivative are 0 and autodiff computes 0; the search never sampled past |x| = 100 (exp(-1e4)), where
    # exact values cost mpmath a second, so it never saw it.  x**3 exp(-x**2 / 2), the value itself, likewise.
    jax_pkg, torch_pkg = package
    for dtype in (np.float64, np.float32):
        top = float(np.finfo(dtype).max)
        points = np.array([-top, -1e30, -1e17, -200.0, 200.0, 1e17, 1e30, top], dtype=dtype)
        x = torch.tensor(points, requires_grad=True)
        out = getattr(torch_pkg, name)(x)
        (grad,) = torch.autograd.grad(out.sum(), x, create_graph=True)
        (second,) = torch.autograd.grad(grad.sum(), x)
        f = getattr(jax_pkg, name)
        xs = jnp.asarray(points)
        found = {
            "torch": (out.detach().numpy(), grad.detach().numpy(), second.numpy()),
            "jax": (
                np.asarray(f(xs)),
                np.asarray(jax.vmap(jax.grad(f))(xs)),
                np.asarray(jax.vmap(jax.grad(jax.grad(f)))(xs)),
            ),
        }
        for backend, orders in found.items():
            for order, values in enumerate(orders):
                np.testing.assert_array_equal(
                    values, np.zeros_like(values), err_msg=f"{name} {backend} {dtype} {order}"
                )
