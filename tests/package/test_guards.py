"""A `where` that guards a division keeps guarding it, at every order.

sympy distributed 1 / where(x != 0, x, 1) into where(x != 0, 1/x, 1): an
array `where` computes both branches, so 1/0 came back at x = 0, and with it
nan second derivatives (inf times a zero cotangent).
"""

from __future__ import annotations

import importlib

import jax
import jax.numpy as jnp
import pytest
import torch

from tests.conftest import built_package

RULES = """
rules:
  - {name: guarded_ratio, inputs: [x], forward: "x*x / where(x != 0, x, 1.0)"}
  - {name: guarded_reciprocal_square, inputs: [x], forward: "sin(x)**2 / Piecewise((x**2, x != 0), (1.0, True))"}
"""
COMPOSITES = {
    "guarded_ratio": lambda x: x * x / jnp.where(x != 0, x, 1.0),
    "guarded_reciprocal_square": lambda x: jnp.sin(x) ** 2 / jnp.where(x != 0, x**2, 1.0),
}


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    with built_package(tmp_path_factory.mktemp("guards"), RULES, "rg_guards"):
        yield importlib.import_module("rg_guards.jax"), importlib.import_module("rg_guards.torch")


@pytest.mark.parametrize("name", sorted(COMPOSITES))
@pytest.mark.parametrize("x", [0.0, 0.5, -2.0])
def test_first_and_second_derivatives_match_autodiff_of_the_composite(package, name, x):
    jax_pkg, torch_pkg = package
    composite = COMPOSITES[name]
    expected = [composite(x), jax.grad(composite)(x), jax.grad(jax.grad(composite))(x)]
    f = getattr(jax_pkg, name)
    got = [f(x), jax.grad(f)(x), jax.grad(jax.grad(f))(x)]
    assert [float(v) for v in got] == pytest.approx([float(v) for v in expected], rel=1e-12, abs=1e-12)
    t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    value = getattr(torch_pkg, name)(t)
    (grad,) = torch.autograd.grad(value, t, create_graph=True)
    (grad2,) = torch.autograd.grad(grad, t)
    assert [value.item(), grad.item(), grad2.item()] == pytest.approx(
        [float(v) for v in expected], rel=1e-12, abs=1e-12
    )
