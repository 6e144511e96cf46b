"""Host bodies with outputs of fewer arrays, built: shapes, dtypes and derivatives in both backends.

Both backends know a host body's output shapes before it runs (JAX traces,
torch's fake tensors): the broadcast shape of the arrays with `batching:
elementwise`, else the first array's. Before, JAX reshaped `np.sin(x)` of a
number into (3, 4) and raised ("cannot reshape array of size 1"), torch
returned it unbroadcast in eager (and broadcast under compile), and JAX's
forward mode of a VJP body failed for broadcast inputs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from generated import jax as gj
from generated import torch as gt
from tests.conftest import built_package
from tests.runtime.test_host_broadcast import RULES

SHAPES = [((), (3, 4)), ((3, 1), (1, 4)), ((3, 4), ())]


def _inputs(x_shape, y_shape):
    rng = np.random.default_rng(0)
    return rng.uniform(-2, 2, x_shape), rng.uniform(-2, 2, y_shape)


@pytest.mark.parametrize("name", RULES)
@pytest.mark.parametrize(("x_shape", "y_shape"), SHAPES)
def test_every_output_has_the_broadcast_shape_and_its_derivatives(name, x_shape, y_shape):
    x, y = _inputs(x_shape, y_shape)
    shape = np.broadcast_shapes(x_shape, y_shape)
    p_ref, s_ref = x * y, np.broadcast_to(np.sin(x), shape)

    def total_jax(a, b):
        p, s = getattr(gj, name)(a, b)
        return p.sum() + s.sum()

    p, s = getattr(gj, name)(jnp.asarray(x), jnp.asarray(y))
    np.testing.assert_allclose(p, p_ref, rtol=1e-14)
    np.testing.assert_allclose(s, s_ref, rtol=1e-14)
    gx, gy = jax.grad(total_jax, argnums=(0, 1))(jnp.asarray(x), jnp.asarray(y))
    want_gx = np.sum(np.broadcast_to(y + np.cos(x), shape), axis=_summed(x_shape, shape)).reshape(x_shape)
    want_gy = np.sum(np.broadcast_to(x, shape), axis=_summed(y_shape, shape)).reshape(y_shape)
    np.testing.assert_allclose(gx, want_gx, rtol=1e-13)
    np.testing.assert_allclose(gy, want_gy, rtol=1e-13)
    dx, dy = np.ones(x_shape), np.ones(y_shape)
    _, (p_dot, s_dot) = jax.jvp(getattr(gj, name), (jnp.asarray(x), jnp.asarray(y)), (jnp.asarray(dx), jnp.asarray(dy)))
    np.testing.assert_allclose(p_dot, np.broadcast_to(y + x, shape), rtol=1e-13)
    np.testing.assert_allclose(s_dot, np.broadcast_to(np.cos(x), shape), rtol=1e-13)

    tx, ty = (torch.tensor(a, requires_grad=True) for a in (x, y))
    tp, ts = getattr(gt, name)(tx, ty)
    assert tp.shape == ts.shape == shape
    np.testing.assert_allclose(ts.detach().numpy(), s_ref, rtol=1e-14)
    (tp.sum() + ts.sum()).backward()
    np.testing.assert_allclose(tx.grad.numpy(), want_gx, rtol=1e-13)
    np.testing.assert_allclose(ty.grad.numpy(), want_gy, rtol=1e-13)
    primals = (torch.tensor(x), torch.tensor(y))
    _, (_, ts_dot) = torch.func.jvp(getattr(gt, name), primals, (torch.tensor(dx), torch.tensor(dy)))
    np.testing.assert_allclose(ts_dot.numpy(), np.broadcast_to(np.cos(x), shape), rtol=1e-13)


def _summed(input_shape, shape):
    """The axes a cotangent of `shape` sums over to reach `input_shape` (which broadcast into it)."""
    lead = len(shape) - len(input_shape)
    return tuple(range(lead)) + tuple(lead + k for k, n in enumerate(input_shape) if n == 1 and shape[lead + k] != 1)


NOT_ELEMENTWISE = """
name: wrong_shape
inputs: [x, y]
outputs: [p, s]
forward:
  numpy: return x * y, np.sin(x)
jvp:
  python: return y * x_dot + x * y_dot, xp.cos(x) * x_dot
"""


def test_an_output_of_another_shape_than_declared_is_a_clear_error_in_both_backends(tmp_path):
    # Without `batching: elementwise`, outputs have the first array's shape; x * y has y's.
    import importlib

    with built_package(tmp_path, NOT_ELEMENTWISE, "rg_wrong_shape"):
        jax_rule = importlib.import_module("rg_wrong_shape.jax").wrong_shape
        torch_rule = importlib.import_module("rg_wrong_shape.torch").wrong_shape
        message = r"wrong_shape: its numpy forward returned p of shape \(3, 4\) where \(\) was expected"
        with pytest.raises(Exception, match=message) as raised:
            jax.block_until_ready(jax_rule(0.5, jnp.ones((3, 4))))
        assert "batching: elementwise" in str(raised.value)
        with pytest.raises(ValueError, match=message):
            torch_rule(0.5, torch.ones(3, 4, dtype=torch.float64))


INTEGER_OUTPUT = """
name: mul_positive
inputs: [x, y]
outputs:
  p: {}
  k: {dtype: int, diff: false}
forward:
  numpy: return x * y, (x > 0).astype(np.int32)
jvp:
  python: return y * x_dot + x * y_dot
batching: elementwise
"""


def test_an_integer_output_of_fewer_arrays_has_the_shape_and_dtype_the_fake_gives_it(tmp_path):
    # torch's fake (torch.compile, export) says int64 of the broadcast shape; eagerly the host's
    # int32 column came back as it was.
    import importlib

    with built_package(tmp_path, INTEGER_OUTPUT, "rg_integer_output"):
        torch_rule = importlib.import_module("rg_integer_output.torch").mul_positive
        jax_rule = importlib.import_module("rg_integer_output.jax").mul_positive
        x = np.array([[1.0], [-1.0], [2.0]])
        p, k = torch_rule(torch.tensor(x), torch.ones(1, 4, dtype=torch.float64))
        assert p.shape == k.shape == (3, 4) and k.dtype == torch.int64
        np.testing.assert_array_equal(k.numpy(), np.broadcast_to(x > 0, (3, 4)))
        jp, jk = jax_rule(jnp.asarray(x), jnp.ones((1, 4)))
        assert jp.shape == jk.shape == (3, 4)
        np.testing.assert_array_equal(np.asarray(jk), np.broadcast_to(x > 0, (3, 4)))
