"""Host bodies whose outputs read fewer of the arrays than the others (rules/host_broadcast.yaml).

Both backends know a host body's output shapes before it runs (JAX traces,
torch's fake tensors): the broadcast shape of the arrays with `batching:
elementwise`, else the first array's. Before, JAX reshaped `np.sin(x)` of a
number into (3, 4) and raised ("cannot reshape array of size 1"), torch
returned it unbroadcast in eager (and broadcast under compile), and JAX's
forward mode of a VJP body failed for broadcast inputs.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from generated import jax as gj
from generated import torch as gt

RULES = ["host_mul_sin_jvp", "host_mul_sin_vjp"]


@pytest.mark.parametrize("name", RULES)
def test_a_python_number_beside_an_array(name):
    p, s = getattr(gj, name)(0.5, jnp.ones((3, 4)))
    assert p.shape == s.shape == (3, 4)
    tp, ts = getattr(gt, name)(0.5, torch.ones(3, 4, dtype=torch.float64))
    assert tp.shape == ts.shape == (3, 4)
    np.testing.assert_allclose(ts.numpy(), np.full((3, 4), np.sin(0.5)))
