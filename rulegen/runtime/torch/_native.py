"""torch's own kernels and objects the generated bodies call for what no composite does as well.

Native kernels autograd cannot differentiate are called where nothing differentiates them.

`torch.ops.aten.silu_backward` computes a cotangent times silu's derivative in
one pass where the composite takes four, but it has no derivative of its own:
differentiating it (a backward with create_graph, forward mode over a
backward, nested torch.func transforms such as `hessian`) raises "derivative
for aten::silu_backward is not implemented".  torch's own silu rule switches
to a composite when grad mode is on; the generated bodies switch on what the
tensors are (`plain_tensors`), so a backward that nothing records keeps the
kernel (it runs with grad mode off) and so does a jvp of plain tensors.
"""

import torch

from . import _private
from ._plain import plain_tensors
from ._util import in_float32, rounded

with _private.guarded(torch):
    #: grad * (1 - t**2) for t = tanh(u): tanh's backward through its value, one kernel where the
    #: composite takes three; unlike silu's, aten's has derivatives (forward AD, double backward,
    #: batching rules).
    tanh_backward = torch.ops.aten.tanh_backward
    _sigmoid_backward = torch.ops.aten.sigmoid_backward
    _silu_backward = torch.ops.aten.silu_backward
    _efficient_zero = torch._efficientzerotensor


def silu_backward(grad: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """grad * d/du silu(u): one kernel on plain tensors, else a differentiable composite.

    Both compute bfloat16 and float16 in float32 and round once, so a rule
    whose bodies call it takes those dtypes as they are (plan.torch's
    `_opmath_bodies`): the kernel does so itself, the composite here.
    """
    # Inside torch.compile the composite fuses into one loop anyway (the casts
    # too), and the functorch queries of plain_tensors are not traced.
    if torch.compiler.is_compiling() or not plain_tensors((grad, u)):
        (grad, u), low = in_float32(grad, u)
        s = torch.sigmoid(u)
        # silu' = s + u s (1 - s), the second term sigmoid's own backward
        # kernel (differentiable at every order): four kernels where
        # s * (1 + u * (1 - s)) takes six, each a fresh tensor.  The
        # cotangent last: the factor of u alone is what AOTAutograd's
        # partitioner may compute in the forward's loop and keep.
        return rounded(low, grad * (s + _sigmoid_backward(u, s)))
    return _silu_backward(grad, u)


def tangent_or_zero(tangent: torch.Tensor | None, primal: torch.Tensor) -> torch.Tensor:
    """`tangent`, or where its input has none (held constant), torch's efficient zero like `primal`.

    A product with that zero is zero, never nan, and it allocates nothing:
    a dense zero times a partial that overflows is nan (0 * inf), where
    autodiff, which has no term for a constant, is right.  torch's own
    forward-mode formulas read an absent tangent so.
    """
    if tangent is not None:
        return tangent
    return _efficient_zero(primal.shape, dtype=primal.dtype, device=primal.device)
