"""When a generated Function may update the tensors it allocates in place.

Eager torch allocates a tensor for every operation, and on the CPU a large
allocation costs about what the arithmetic does.  Where nothing records or
transforms the computation, the generated bodies update the buffers they
allocated themselves (never an input, a saved tensor or a shared value);
elsewhere they run out of place, as written.
"""

from typing import cast

import torch

from ._plain import plain_tensors


def plain(*tensors: torch.Tensor | None) -> bool:
    """Whether in-place bodies may run: plain tensors (see above) of one float dtype and shape.

    An absent cotangent (None) is not one: the in-place backward reads every
    output's.
    """
    if torch.compiler.is_compiling() or any(t is None for t in tensors):
        return False
    present = cast("tuple[torch.Tensor, ...]", tensors)  # none of them None
    first = present[0]
    if not first.is_floating_point() or any(
        t.shape != first.shape or t.dtype != first.dtype for t in present
    ):
        return False
    return plain_tensors(present)
