"""The runtime's `summed_like` (torch and JAX): a term is a (cotangent, partial) pair, multiplied where
the cotangent is present; JAX's `as_lifted_arrays`, the arguments lifted in one call; torch's
`saves_inputs`, the setup_context most Functions share."""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from rulegen.runtime.jax import _util as jax_util
from rulegen.runtime.torch import _function as torch_function


def test_torch_pairs_are_multiplied_where_the_cotangent_is_present():
    x = torch.zeros(3, dtype=torch.float64)
    bar = torch.full((3,), 2.0, dtype=torch.float64)
    partial = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    torch.testing.assert_close(torch_function.summed_like(x, (bar, partial)), bar * partial)
    torch.testing.assert_close(torch_function.summed_like(x, (bar, partial), bar), bar * partial + bar)
    # An absent cotangent adds nothing, not 0 * inf = nan.
    inf = torch.full((3,), math.inf, dtype=torch.float64)
    torch.testing.assert_close(torch_function.summed_like(x, (None, inf), (bar, partial)), bar * partial)
    assert torch_function.summed_like(x, (None, inf), None) is None


def test_jax_pairs_are_multiplied_where_the_tangent_is_present():
    out = jnp.zeros(3)
    dot = jnp.full(3, 2.0)
    partial = jnp.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(jax_util.summed_like(out, (dot, partial), (None, jnp.inf)), dot * partial)
    np.testing.assert_array_equal(jax_util.summed_like(out, (None, jnp.inf)), jnp.zeros(3))


@pytest.mark.parametrize("low", [jnp.bfloat16, jnp.float16])
def test_as_lifted_arrays_lifts_the_float_arguments_and_names_the_dtype_to_round_to(low):
    (x, k), got = jax_util.as_lifted_arrays("r", ("x", "k"), "fi", jnp.ones(2, low), jnp.arange(2))
    assert x.dtype == jnp.float32 and got == low
    assert k.dtype == jnp.arange(2).dtype
    (y,), none = jax_util.as_lifted_arrays("r", ("y",), "f", jnp.ones(2, jnp.float32))
    assert y.dtype == jnp.float32 and none is None


def test_saves_inputs_saves_every_input_then_the_last_outputs_and_leaves_absent_cotangents_none():
    seen = []

    class Cube(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return x**3, 3 * x * x

        setup_context = torch_function.saves_inputs(residuals=1, materialize_grads=False)

        @staticmethod
        def backward(ctx, out_bar, dx_bar):
            x, dx = ctx.saved_tensors
            seen.append(dx_bar)
            return torch_function.summed_like(x, (out_bar, dx), (dx_bar, 6 * x))

    x = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    out, _ = Cube.apply(x)
    (grad,) = torch.autograd.grad(out.sum(), x)
    torch.testing.assert_close(grad, 3 * x.detach() ** 2)
    assert seen == [None]


def test_saves_inputs_saves_the_outputs_at_the_positions_named():
    class Polar(torch.autograd.Function):
        @staticmethod
        def forward(x, y):
            return torch.hypot(x, y), torch.atan2(y, x)

        setup_context = torch_function.saves_inputs(outputs=(0,))

        @staticmethod
        def backward(ctx, r_bar, theta_bar):
            x, y, r = ctx.saved_tensors
            return r_bar * x / r - theta_bar * y / r / r, r_bar * y / r + theta_bar * x / r / r

    x = torch.tensor([3.0], dtype=torch.float64, requires_grad=True)
    y = torch.tensor([4.0], dtype=torch.float64, requires_grad=True)
    r, theta = Polar.apply(x, y)
    grads = torch.autograd.grad(r + theta, (x, y))
    torch.testing.assert_close(grads[0], torch.tensor([3 / 5 - 4 / 25], dtype=torch.float64))
    torch.testing.assert_close(grads[1], torch.tensor([4 / 5 + 3 / 25], dtype=torch.float64))
