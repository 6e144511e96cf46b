"""A static input given a value that a transform differentiates, batches or traces is refused by name.

A focal loss learning its `gamma`, declared static: `jax.grad` with respect
to gamma returned 0.0 (custom_jvp holds a nondiff argument constant) and
torch left a requires_grad tensor's `.grad` at None.  Both now raise,
naming the rule and the input, and say that `static: false` differentiates
it where it would.
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
# stabilise: false: the search over three inputs takes minutes, and what is tested is the call.
rules:
  - name: focal
    inputs:
      z: {}
      y: {domain: [0, 1]}
      gamma: {static: true, default: 2.0}
    stabilise: false
    forward: -(y*(1 - sigmoid(z))**gamma*log(sigmoid(z)) + (1 - y)*sigmoid(z)**gamma*log(1 - sigmoid(z)))
  - name: focal_learned
    inputs:
      z: {}
      y: {domain: [0, 1]}
      gamma: {default: 2.0}
    stabilise: false
    forward: -(y*(1 - sigmoid(z))**gamma*log(sigmoid(z)) + (1 - y)*sigmoid(z)**gamma*log(1 - sigmoid(z)))
"""

Z, Y = np.array([0.3, -1.2, 2.0]), np.array([1.0, 0.0, 1.0])
STATIC_FALSE = "declare it `static: false` in the rule"


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    with built_package(tmp_path_factory.mktemp("statics"), RULES, "rg_static_misuse"):
        yield importlib.import_module("rg_static_misuse.jax"), importlib.import_module("rg_static_misuse.torch")


def _refused(backend: str, name: str = "focal", static: str = "gamma"):
    what = "a traced value" if backend == "jax" else "a tensor that requires grad"
    return pytest.raises(TypeError, match=f"^{name}: {static} is a static input.*but it was given {what}")


def test_jax_grad_with_respect_to_a_static_gamma_is_refused_not_zero(package):
    jax_pkg, _ = package
    loss = lambda g: jax_pkg.focal(Z, Y, g).sum()  # noqa: E731
    with _refused("jax") as raised:
        jax.grad(loss)(2.0)
    assert STATIC_FALSE in str(raised.value)
    for transformed in (
        lambda: jax.jvp(loss, (2.0,), (1.0,)),
        lambda: jax.vmap(lambda g: jax_pkg.focal(Z, Y, g))(jnp.asarray([1.0, 2.0])),
        lambda: jax.jit(loss)(2.0),
        lambda: jax.grad(jax.jit(loss))(2.0),  # inside jit no one sees the grad: every tracer is refused
    ):
        with _refused("jax"):
            transformed()


def test_statics_given_as_values_work_in_jax(package):
    jax_pkg, _ = package
    want = np.asarray(jax_pkg.focal(Z, Y, 1.5))
    for gamma in (jnp.asarray(1.5), np.float64(1.5)):
        np.testing.assert_array_equal(np.asarray(jax_pkg.focal(Z, Y, gamma)), want)
    np.testing.assert_array_equal(jax.jit(jax_pkg.focal, static_argnames="gamma")(Z, Y, gamma=1.5), want)
    np.testing.assert_array_equal(jax.jit(lambda z: jax_pkg.focal(z, Y, 1.5))(Z), want)
    assert jax.grad(lambda z: jax_pkg.focal(z, Y, 1.5).sum())(jnp.asarray(Z)).shape == Z.shape


def test_torch_refuses_a_static_gamma_that_requires_grad_rather_than_leave_its_grad_none(package):
    _, torch_pkg = package
    z, y = torch.tensor(Z), torch.tensor(Y)
    with _refused("torch") as raised:
        torch_pkg.focal(z, y, torch.tensor(2.0, dtype=torch.float64, requires_grad=True))
    assert STATIC_FALSE in str(raised.value)
    gamma = torch.tensor(2.0, dtype=torch.float64)
    for transformed in (
        lambda: torch.func.grad(lambda g: torch_pkg.focal(z, y, g).sum())(gamma),
        lambda: torch.func.jvp(lambda g: torch_pkg.focal(z, y, g), (gamma,), (torch.ones_like(gamma),)),
        lambda: torch.func.vmap(lambda g: torch_pkg.focal(z, y, g))(torch.tensor([1.0, 2.0])),
    ):
        with _refused("torch"):
            transformed()
    want = torch_pkg.focal(z, y, 2.0)
    torch.testing.assert_close(torch_pkg.focal(z, y, gamma), want)  # a tensor nothing differentiates is a value
    zg = z.clone().requires_grad_()
    torch_pkg.focal(zg, y, 2.0).sum().backward()
    assert zg.grad is not None


def test_static_false_is_the_differentiable_gamma_the_message_promises(package):
    jax_pkg, torch_pkg = package
    grad = jax.grad(lambda g: jax_pkg.focal_learned(Z, Y, g).sum())(2.0)
    h = 1e-6
    fd = (jax_pkg.focal(Z, Y, 2.0 + h).sum() - jax_pkg.focal(Z, Y, 2.0 - h).sum()) / (2 * h)
    np.testing.assert_allclose(grad, fd, rtol=1e-7)
    assert float(grad) != 0.0
    gamma = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    torch_pkg.focal_learned(torch.tensor(Z), torch.tensor(Y), gamma).sum().backward()
    np.testing.assert_allclose(gamma.grad.item(), float(grad), rtol=1e-12)


def test_a_static_the_rule_cannot_differentiate_says_so(built):
    jax_pkg, torch_pkg, _ = built
    x = np.array([[3.0, 1.0, 2.0]])
    with _refused("jax", "numpy_sort", "dim") as raised:
        jax.jit(jax_pkg.numpy_sort)(x, -1)
    assert "the rule cannot differentiate it" in str(raised.value)
    assert STATIC_FALSE not in str(raised.value)
    np.testing.assert_array_equal(jax.jit(jax_pkg.numpy_sort, static_argnums=1)(x, -1), np.sort(x))
    with _refused("torch", "scaled_tanh", "log_scale") as raised:
        torch_pkg.scaled_tanh(torch.tensor(x), torch.tensor(0.5, requires_grad=True))
    assert STATIC_FALSE in str(raised.value)
