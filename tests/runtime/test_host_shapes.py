"""A host body's misshaped output: one message, written once, that both backends raise."""

from __future__ import annotations

import ast

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from rulegen.render.layout import RUNTIME
from rulegen.runtime.jax import _host as jax_host
from rulegen.runtime.torch import _host as torch_host


@pytest.mark.parametrize("elementwise", [True, False])
def test_both_backends_refuse_a_misshaped_output_in_the_same_words(elementwise):
    x = np.ones((3, 4))
    with pytest.raises(ValueError) as jax_error:
        jax_host.shaped("r", "y", np.ones(5), (3, 4), elementwise=elementwise)
    with pytest.raises(ValueError) as torch_error:
        torch_host.output_from_host("r", "y", np.ones(5), None, [torch.as_tensor(x)], None, elementwise=elementwise)
    # Elementwise: NumPy's own refusal to broadcast (5,) against (3, 4), the same from both.
    assert str(jax_error.value) == str(torch_error.value)
    if not elementwise:
        assert str(jax_error.value).startswith("r: its numpy forward returned y of shape (5,) where (3, 4)")


def test_a_broadcastable_output_is_broadcast_by_both():
    shaped = jax_host.shaped("r", "y", np.ones(4), (3, 4), elementwise=True)
    tensor = torch_host.output_from_host(
        "r", "y", np.ones(4), None, [torch.ones(3, 1), torch.ones(4)], None, elementwise=True
    )
    assert shaped.shape == tuple(tensor.shape) == (3, 4)
    assert jnp.asarray(shaped).shape == (3, 4)


def test_the_host_shape_message_is_written_once_in_the_runtime():
    """Each string constant of the message occurs in one runtime module only."""
    where = set()
    for path in RUNTIME.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and "its numpy forward returned" in node.value
            ):
                where.add(path.relative_to(RUNTIME).as_posix())
    assert where == {"_host_shapes.py"}
