"""A host body's output shapes, as both backends read them.

The shape is known before the body runs (JAX traces, torch's fake tensors):
the first array input's, or with elementwise batching the broadcast of the
arrays', to which an output of fewer inputs (`np.sin(x)` beside `x * y`) is
broadcast, as the same rule in array code would be.  Any other shape is a
ValueError saying so, never an array that compiled code would take for
another shape.
"""

import numpy as np


def broadcast_needed(
    rule: str, output: str, got: tuple[int, ...], shape: tuple[int, ...], *, elementwise: bool
) -> bool:
    """Whether a host output of shape `got` is broadcast to `shape` (False: it has it).

    Any other shape is the ValueError saying what was expected.
    """
    if got == shape:
        return False
    if elementwise and np.broadcast_shapes(got, shape) == shape:
        return True
    expected = (
        "the broadcast of its array inputs' shapes" if elementwise else "its first array's shape"
    )
    hint = (
        "" if elementwise else "; `batching: elementwise` makes them the broadcast of its arrays'"
    )
    raise ValueError(
        f"{rule}: its numpy forward returned {output} of shape {got} where {shape} "
        f"was expected: a host body's outputs have {expected}{hint}"
    )
