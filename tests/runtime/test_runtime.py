"""The runtime helpers (`rulegen/runtime/`), tested where they live, and copied verbatim into packages."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from rulegen.render.layout import HELPER_HEADER, helper_closure, helper_source
from rulegen.runtime.jax import _util as jax_util
from rulegen.runtime.torch import _plain
from rulegen.runtime.torch import _util as torch_util
from tests.conftest import ROOT


def test_generated_helpers_are_the_runtime_modules_verbatim():
    helpers = sorted(p.relative_to(ROOT / "generated").as_posix() for p in (ROOT / "generated").glob("*/_[!_]*.py"))
    assert helpers, "generated/ holds no helper"
    for rel in helpers:
        assert (ROOT / "generated" / rel).read_text() == HELPER_HEADER + helper_source(rel).read_text(), rel


def test_a_helper_brings_the_helpers_it_imports():
    assert helper_closure(["torch/_inplace.py"]) == {"torch/_inplace.py", "torch/_plain.py", "torch/_private.py"}
    found = helper_closure(["torch/_fuse.py", "jax/_util.py"])
    shared = {"jax/_asymptotic.py", "jax/_scaling.py", "jax/_structures.py"}
    assert found == {"torch/_fuse.py", "torch/_plain.py", "torch/_private.py", "jax/_util.py", *shared}


@pytest.mark.parametrize(
    ("shape", "target", "expected"),
    [((2, 3), (3,), [2.0, 2.0, 2.0]), ((2, 3), (1, 3), [[2.0, 2.0, 2.0]]), ((2, 3), (2, 1), [[3.0], [3.0]])],
)
def test_sum_to_shape_sums_the_broadcast_axes(shape, target, expected):
    np.testing.assert_array_equal(jax_util.sum_to_shape(jnp.ones(shape), target), np.array(expected))


def test_as_arrays_promotes_integers_to_the_float_arguments_dtype_and_refuses_complex():
    x, k = jax_util.as_arrays("r", ("x", "k"), "ff", jnp.ones(2, jnp.float32), np.arange(2))
    assert x.dtype == jnp.float32 and k.dtype == jnp.float32
    (number,) = jax_util.as_arrays("r", ("x",), "f", 2)
    assert jnp.result_type(number) == jnp.result_type(float)
    with pytest.raises(TypeError, match="r: complex inputs are not supported for"):
        jax_util.as_arrays("r", ("z",), "f", jnp.ones(2, jnp.complex64))


def test_as_tensors_reads_numbers_and_arrays_as_torch_arithmetic_would():
    x = torch.ones(2, dtype=torch.float64)
    _, s, k, m = torch_util.as_tensors("r", ("x", "s", "k", "m"), "ffib", x, 0.5, [1, 2], [True, False])
    assert s.dtype == torch.float64 and s.item() == 0.5
    assert k.dtype == torch.int64 and m.dtype == torch.bool
    (n,) = torch_util.as_tensors("r", ("n",), "f", np.arange(3))
    assert n.dtype == torch.get_default_dtype()
    (same,) = torch_util.as_tensors("r", ("x",), "f", x)
    assert same is x  # nothing to convert: no copy
    with pytest.raises(TypeError, match="complex"):
        torch_util.as_tensors("r", ("z",), "f", 1j)


def test_fresh_outputs_copies_only_returned_inputs():
    x, y = torch.ones(2), torch.zeros(2)
    a, b = torch_util.fresh_outputs((x, y * 2), x)
    assert a is not x and torch.equal(a, x) and b is not y


def test_plain_tensors_only_where_nothing_watches():
    x = torch.ones(3)
    assert _plain.plain_tensors([x])
    assert not _plain.plain_tensors([x.requires_grad_()])
    with torch.no_grad():
        assert _plain.plain_tensors([x])
    seen = []
    torch.func.vmap(lambda t: seen.append(_plain.plain_tensors([t])) or t)(torch.ones(2, 3))
    assert seen == [False]
    jax.config.update("jax_enable_x64", True)  # leave JAX as conftest set it


class _Flatten(torch.autograd.Function):
    """A view of its input, and a gradient of twice the cotangent: not autodiff's."""

    @staticmethod
    def forward(x):
        return x.view(-1)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.shape = inputs[0].shape

    @staticmethod
    def backward(ctx, out_bar):
        return 2 * out_bar.reshape(ctx.shape)


def test_a_rule_op_copies_views_and_keeps_the_functions_backward():
    from rulegen.runtime.torch import _route

    op = _route.rule_op(_Flatten, "(Tensor x) -> Tensor")
    # Named after the Function, in its module's namespace: one op per rule of each generated package.
    assert op._qualname == f"{__name__.replace('.', '_')}::_Flatten"
    x = torch.ones(2, 3, requires_grad=True)
    op(x).sum().backward()  # an op's result may not be a view of its argument
    torch.testing.assert_close(x.grad, torch.full((2, 3), 2.0))
    # Eagerly, the Function itself (applied without `apply`'s signature binding), not the op.
    assert _route.route(_Flatten, _Flatten, op) is _route.applied(_Flatten)
    transformed = torch.func.grad(lambda x: _route.route(_Flatten, _Flatten, op)(x).sum())(x.detach())
    torch.testing.assert_close(transformed, torch.full((2, 3), 2.0))


@torch.library.custom_op(f"{__name__.replace('.', '_')}::_Tripled", mutates_args=())
def _tripled_op(x: torch.Tensor) -> torch.Tensor:
    """A host forward as a custom op (as `_host.host_op` makes one)."""
    return torch.as_tensor(3 * x.detach().numpy())


_tripled_op.register_fake(lambda x: torch.empty_like(x))


class _Tripled(torch.autograd.Function):
    """A host rule's Function: its forward the op, a gradient of half the cotangent (not the forward's)."""

    @staticmethod
    def forward(x):
        return _tripled_op(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, out_bar):
        return out_bar / 2


def test_a_host_rule_op_is_the_host_op_with_the_functions_backward():
    """A host rule's exported op is its host op itself, given the Function's autograd: no second op."""
    from rulegen.runtime.torch import _route

    apply = _route.routed(_Tripled, op=_tripled_op)

    class Module(torch.nn.Module):
        def forward(self, x):
            return apply(x)

    program = torch.export.export(Module(), (torch.ones(3),))
    assert [str(n.target) for n in program.graph.nodes if n.op == "call_function"] == [
        f"{__name__.replace('.', '_')}._Tripled.default"
    ]
    x = torch.ones(3, requires_grad=True)
    program.module()(x).sum().backward()
    torch.testing.assert_close(x.grad, torch.full((3,), 0.5))
    torch.testing.assert_close(program.module()(torch.ones(3)), torch.full((3,), 3.0))


def test_numbers_gives_the_ieee_value_where_math_raises_even_of_a_function_it_does_not_name():
    """A function registered after `_numbers` was written (math.exp2) still computes static inputs."""
    from rulegen.runtime import _numbers

    assert _numbers.log(0.0) == -math.inf and math.isnan(_numbers.sqrt(-1.0))
    assert _numbers.exp2(2000.0) == math.inf and _numbers.exp2(3.0) == 8.0
    assert math.isnan(_numbers.erfc(math.nan)) and math.isnan(_numbers.fmod(1.0, 0.0))
