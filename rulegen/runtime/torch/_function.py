"""What generated torch Functions call: where they run (`routed`), whether in place (`plain`), and
the shapes, saves and absent cotangents every Function handles alike."""

import torch

from ._inplace import plain
from ._route import routed

__all__ = ["broadcast", "plain", "routed", "save_for_derivatives", "shaped_like"]


def broadcast(value, *arrays):
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


def shaped_like(value, like):
    """A gradient for `like`: `value` summed to its shape, or broadcast to it.

    `value` may be a number, where the cotangents it reads were absent.
    """
    if _kept_as_it_is(value, like.shape, like.dtype):
        return value
    return (value + torch.zeros_like(like)).sum_to_size(like.shape)


def _kept_as_it_is(value, shape, dtype):
    """Whether adding zeros of `shape` and `dtype` to `value` would give `value` over again."""
    return (
        isinstance(value, torch.Tensor)
        and value.shape == shape
        and torch.promote_types(value.dtype, dtype) == value.dtype
    )


def save_for_derivatives(ctx, *tensors):
    """Keep `tensors` on the Function's context for backward and jvp alike."""
    ctx.save_for_backward(*tensors)
    ctx.save_for_forward(*tensors)
