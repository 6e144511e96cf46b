"""Tensors no transform or autograd recording watches: where generated bodies may take shortcuts."""

from collections.abc import Iterable

import torch
from torch.autograd import forward_ad

from . import _private

with _private.guarded(torch):
    from torch._C._functorch import (
        is_functorch_wrapped_tensor,
        is_legacy_batchedtensor,
        peek_interpreter_stack,
    )


def plain_tensors(tensors: Iterable[torch.Tensor]) -> bool:
    """True when no torch.func transform, forward-mode AD or autograd recording sees `tensors`."""
    if peek_interpreter_stack() is not None:
        return False
    # The autograd engine may run a backward of a batched gradient with the
    # transform's tensors but not its stack, or with the legacy vmap's
    # tensors (gradcheck's check_batched_grad).
    if any(is_functorch_wrapped_tensor(t) or is_legacy_batchedtensor(t) for t in tensors):
        return False
    if any(forward_ad.unpack_dual(t).tangent is not None for t in tensors):
        return False
    return not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))
