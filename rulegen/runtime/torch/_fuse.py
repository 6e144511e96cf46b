"""Bodies of rules with `fuse: true`, compiled by torch.compile where that is possible.

Eager torch runs one kernel per operation; compiled, a rule's forward and
its first-order backward each become one fused loop.  The plain body runs
instead wherever compiling cannot or should not happen: inside an outer
torch.compile (which traces the body itself), under torch.func transforms
(Dynamo refuses functorch tracing from eager code), when the backward is
being differentiated (create_graph: autograd records the plain body), in forward-mode AD, and
after a failed compile (no C++ compiler, say), which is reported once.
"""

import functools
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ._plain import plain_tensors


def _eager_only(args: Sequence[Any]) -> bool:
    if torch.compiler.is_compiling():
        return True
    return not plain_tensors([a for a in args if isinstance(a, torch.Tensor)])


def tanh_expm1(u: torch.Tensor) -> torch.Tensor:
    """tanh(u) for compiled bodies: inductor's CPU tanh is several times slower than its expm1.

    Within a few ulps of tanh, with its nan, infinities and signed zeros; its
    derivative at 0 is not tanh's, so eager code, which autograd may
    differentiate, never calls it.
    """
    t = torch.expm1(-2 * u.abs())
    return torch.copysign(-t / (t + 2), u)


def fused(
    body: Callable[..., Any] | None = None, *, compiled: Callable[..., Any] | None = None
) -> Any:
    """`body`, compiled on first use where possible, else as it is.

    `compiled` is what to compile instead of `body` itself, where the two
    compute the same values in different forms.  `@fused(compiled=f)` works
    too.
    """
    if body is None:
        return functools.partial(fused, compiled=compiled)
    compiled = torch.compile(compiled or body, fullgraph=True)
    failed = False

    @functools.wraps(body)
    def call(*args: Any) -> Any:
        nonlocal failed
        if failed or _eager_only(args):
            return body(*args)
        try:
            return compiled(*args)
        except Exception as error:
            result = body(*args)  # raises again if the error was the caller's, not the compiler's
            failed = True
            warnings.warn(
                f"{body.__module__}: torch.compile failed, running eagerly: {error}", stacklevel=2
            )
            return result

    return call
