"""What generated torch Functions call: where they run (`routed`), whether in place (`plain`), and
the shapes, saves and absent cotangents every Function handles alike."""

from typing import Any

import torch

from ._inplace import plain
from ._route import routed

__all__ = [
    "RuleFunction",
    "broadcast",
    "no_forward_mode",
    "plain",
    "routed",
    "save_for_derivatives",
    "saves_inputs",
    "summed_like",
]


class RuleFunction(torch.autograd.Function):
    """A generated rule's autograd.Function: torch.func style, its vmap rule torch's own.

    Its `forward`, `setup_context`, `backward` and `jvp` are torch code, so
    `torch.func.vmap` runs them on batched tensors (`generate_vmap_rule`).
    Where the derivative is a number per element (one real input, one
    output), it scales a tangent as it does a cotangent: `jvp = backward`.
    Its public function computes bfloat16 and float16 in float32 and rounds
    once, as torch's own kernels do (`as_opmath_tensors`).
    """

    generate_vmap_rule = True


def broadcast(value: Any, *arrays: torch.Tensor) -> Any:
    """An output that reads only some of `arrays` (or none: a number), in the shape of all of them.

    A fresh tensor of their broadcast shape, in the dtype the first one
    promotes it to, where `value` has another shape or dtype, or is one of
    `arrays` (an output never aliases an input); `value` itself elsewhere.
    """
    shape = torch.broadcast_shapes(*(a.shape for a in arrays))
    first = arrays[0]
    if _kept_as_it_is(value, shape, first.dtype) and not any(value is a for a in arrays):
        return value
    return value + torch.zeros(shape, dtype=first.dtype, device=first.device)


def summed_like(like: torch.Tensor, *terms: Any) -> torch.Tensor | None:
    """The gradient for `like`: the sum of `terms`, in its shape.

    A term is a pair (cotangent, partial), their product where the
    cotangent is present, or a cotangent alone (a partial of 1).  Absent
    cotangents (None) add nothing, not a zero (0 * inf = nan where another
    output's partial overflows, and a kernel of its own); with every one
    absent, the gradient is None, which autograd reads as zeros.  The sum
    may be broadcast beyond `like` (summed back) or be a number (broadcast
    to it).
    """
    total = None
    for term in map(_product, terms):
        if term is not None:
            total = term if total is None else total + term
    if total is None or _kept_as_it_is(total, like.shape, like.dtype):
        return total
    return (total + torch.zeros_like(like)).sum_to_size(like.shape)


def _product(term: Any) -> Any:
    """A `summed_like` term: a (cotangent, partial) pair's product, None where the cotangent is."""
    if not isinstance(term, tuple):
        return term
    cotangent, partial = term
    return None if cotangent is None else cotangent * partial


def _kept_as_it_is(value: Any, shape: torch.Size, dtype: torch.dtype) -> bool:
    """Whether adding zeros of `shape` and `dtype` to `value` would give `value` over again."""
    return (
        isinstance(value, torch.Tensor)
        and value.shape == shape
        and torch.promote_types(value.dtype, dtype) == value.dtype
    )


def save_for_derivatives(ctx: Any, *tensors: torch.Tensor) -> None:
    """Keep `tensors` on the Function's context for backward and jvp alike."""
    ctx.save_for_backward(*tensors)
    ctx.save_for_forward(*tensors)


def saves_inputs(
    residuals: int = 0, *, outputs: tuple[int, ...] = (), materialize_grads: bool = True
) -> Any:
    """A Function's `setup_context` that saves every input, then forward's values at positions
    `outputs`, then its last `residuals` values.

    What most Functions keep, written once: `backward` and `jvp` unpack
    `ctx.saved_tensors` as the inputs, then those values, in order
    (`save_for_derivatives`).  With `materialize_grads=False`, an absent
    cotangent or tangent arrives as None, not as zeros.
    """

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        if not materialize_grads:
            ctx.set_materialize_grads(False)
        values = output if isinstance(output, tuple) else (output,)
        kept = [values[k] for k in outputs]
        save_for_derivatives(ctx, *inputs, *kept, *values[len(values) - residuals :])

    return staticmethod(setup_context)


def no_forward_mode(reason: str) -> Any:
    """A Function's `jvp` where the rule has no forward mode: raises NotImplementedError(reason)."""

    def jvp(ctx: Any, *tangents: Any) -> Any:
        raise NotImplementedError(reason)

    return staticmethod(jvp)
