"""Tensors to and from host (NumPy) bodies; batching them under vmap, sharding them as DTensors."""

import functools
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import numpy as np
import torch

from . import _host_shapes
from ._route import eager

#: Floats a host body gets in float32: NumPy has no bfloat16, and its float16 rounds every step.
_LOW_PRECISION = (torch.bfloat16, torch.float16)


def to_host(tensor: torch.Tensor) -> np.ndarray:
    """The tensor's values as a NumPy array (a host body sees no autograd).

    bfloat16 and float16 arrive in float32; the float results go back in
    the inputs' dtype (`from_host`), rounded once.
    """
    tensor = tensor.detach()
    if tensor.dtype in _LOW_PRECISION:
        tensor = tensor.float()
    return tensor.numpy(force=True)


def from_host(
    value: Any, like: torch.Tensor | None, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """A host result as a tensor on the device of `like`, cast to `dtype` if given."""
    return torch.as_tensor(
        np.asarray(value), device=like.device if like is not None else None, dtype=dtype
    )


def output_from_host(
    rule: str,
    output: str,
    value: Any,
    like: torch.Tensor | None,
    arrays: Sequence[torch.Tensor],
    dtype: torch.dtype | None,
    *,
    elementwise: bool,
) -> torch.Tensor:
    """A host body's `output` in `dtype` on the device of `like`, shaped as the fake says.

    The fake, as JAX, knows the shape before the body runs (`_host_shapes`).
    """
    shape = tuple(
        torch.broadcast_shapes(*(a.shape for a in arrays)) if elementwise else arrays[0].shape
    )
    array = np.asarray(value)
    if _host_shapes.broadcast_needed(rule, output, array.shape, shape, elementwise=elementwise):
        # A tensor of its own, not a stride-0 view that an in-place update would write through.
        return from_host(np.broadcast_to(array, shape).copy(), like, dtype)
    return from_host(array, like, dtype)


def broadcast_tangents(tangents: Any, shape: Sequence[int]) -> Any:
    """A JVP body's tangents (one, or a tuple) broadcast to the host outputs' `shape`."""
    if isinstance(tangents, tuple):
        return tuple(torch.broadcast_to(t, shape) for t in tangents)
    return torch.broadcast_to(tangents, shape)


def vmap_sequential(
    function: type[torch.autograd.Function], info: Any, in_dims: Sequence[int | None], *args: Any
) -> tuple[Any, Any]:
    """Apply `function` to one slice of the batch at a time and stack the results.

    A vmap rule runs under torch.func, where `function` applies as `eager` makes it (so that a
    forward level outside the vmap sees its jvp), as the public function applies it there.
    """
    results = []
    for k in range(info.batch_size):
        sliced = [a if d is None else a.select(d, k) for a, d in zip(args, in_dims, strict=True)]
        out = eager(function).apply(*sliced)
        results.append(out if isinstance(out, tuple) else (out,))
    stacked = tuple(torch.stack(r) for r in zip(*results, strict=True))
    if len(stacked) == 1:
        return stacked[0], 0
    return stacked, (0,) * len(stacked)


def vmap_elementwise(
    function: type[torch.autograd.Function], info: Any, in_dims: Sequence[int | None], *args: Any
) -> tuple[Any, Any]:
    """Apply an elementwise `function` once to the whole batch (as `eager` makes it: see above)."""
    rank = max(
        (
            a.dim() - (d is not None)
            for a, d in zip(args, in_dims, strict=True)
            if torch.is_tensor(a)
        ),
        default=0,
    )
    aligned = []
    for a, d in zip(args, in_dims, strict=True):
        if d is not None:
            a = a.movedim(d, 0)
            a = a.reshape(a.shape[:1] + (1,) * (rank + 1 - a.dim()) + a.shape[1:])
        aligned.append(a)
    out = eager(function).apply(*aligned)
    if isinstance(out, tuple):
        return out, (0,) * len(out)
    return out, 0


def residual_dtypes(
    forward: Callable[..., Any], outputs: int, *arguments: Any
) -> tuple[torch.dtype, ...]:
    """The torch dtypes of the residuals a host `forward` returns after its `outputs` results.

    A fake cannot run the body on its (symbolic) shapes; the dtype a body
    gives its residuals depends on its arrays' ranks and dtypes and on the
    statics, not on sizes, so a call on ones of those, made once, tells it.
    """
    kinds = tuple(
        ("array", a.dim(), a.dtype) if isinstance(a, torch.Tensor) else ("static", a)
        for a in arguments
    )
    return _probed(forward, outputs, kinds)


# dtypes by name, making no tensor: a fake runs in fake tensor mode, where no tensor reaches NumPy.
_TO_NUMPY = {torch.bfloat16: np.float32, torch.float16: np.float32}  # as to_host lifts them


@functools.cache
def _probed(
    forward: Callable[..., Any], outputs: int, kinds: tuple[tuple[Any, ...], ...]
) -> tuple[torch.dtype, ...]:
    arguments = [
        np.ones((2,) * kind[1], dtype=_TO_NUMPY.get(kind[2], str(kind[2]).removeprefix("torch.")))
        if kind[0] == "array"
        else kind[1]
        for kind in kinds
    ]
    results = forward(*arguments)
    return tuple(getattr(torch, np.asarray(r).dtype.name) for r in results[outputs:])


def host_op(name: str, *, elementwise: bool) -> Callable[[Callable[..., Any]], Any]:
    """A decorator that makes a host forward the torch custom op `name`, sharded as `sharded` says.

    The op is registered here, not where the rule's module decorates its
    forward: torch reads the source line of the frame that registers an
    op's fake, and `inspect` finds a module being imported only by a scan
    of every loaded one (about 5 ms an op after `import torch`), where this
    module's frames it finds at once.
    """

    def register(forward: Callable[..., Any]) -> Any:
        op = torch.library.custom_op(name, forward, mutates_args=())
        return sharded(elementwise=elementwise)(op)

    return register


def sharded(*, elementwise: bool) -> Callable[[Any], Any]:
    """A decorator of a host op (a torch custom op) that tells DTensor how to shard it.

    DTensor knows no strategy for a custom op and refuses it ("does not have
    a sharding strategy registered").  An elementwise host body computes
    each element from the same element of its inputs, so it runs on each
    shard as on the whole: any dimension of the outputs may be sharded, with
    the inputs sharded alike (a broadcast dimension of an input replicated).
    Any other body may read every element: its inputs are gathered
    (replicated) and it runs whole on each rank.  The strategy is registered
    once DTensor is imported (`_AfterDTensor`): importing it costs a second,
    which a program that never makes a DTensor does not pay.
    """

    def register(op: Any) -> Any:
        if torch.distributed.is_available():
            _UNSHARDED.append((op, elementwise))
            if _DTENSOR in sys.modules:
                _register_shardings()
        return op

    return register


_DTENSOR = "torch.distributed.tensor"
_UNSHARDED: list = []  # (host op, elementwise) whose strategy waits for DTensor's import


def _register_shardings() -> None:
    from torch.distributed.tensor.experimental import register_sharding

    while _UNSHARDED:
        op, elementwise = _UNSHARDED.pop()
        outputs = len(op._opoverload._schema.returns)
        register_sharding(op._opoverload)(functools.partial(_shardings, outputs, elementwise))


class _AfterDTensor(importlib.abc.MetaPathFinder):
    """An import hook: `_register_shardings` runs as soon as DTensor's package has been executed."""

    def find_spec(
        self, fullname: str, path: Any, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != _DTENSOR:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            execute = spec.loader.exec_module

            def exec_module(module: ModuleType) -> None:
                execute(module)
                _register_shardings()

            spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if torch.distributed.is_available() and _DTENSOR not in sys.modules:
    sys.meta_path.insert(0, _AfterDTensor())


def _shardings(
    outputs: int, elementwise: bool, *arguments: Any
) -> list[tuple[list[Any], list[Any]]]:
    """The (output placements, input placements) pairs DTensor may run a host op under."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor._dtensor_spec import DTensorSpec

    tensors = [a for a in arguments if isinstance(a, DTensorSpec)]

    def each(placement_of: Callable[[Any], Any]) -> list[Any]:
        return [placement_of(a) if isinstance(a, DTensorSpec) else None for a in arguments]

    found: list[tuple[list[Any], list[Any]]] = [
        ([Replicate()] * outputs, each(lambda a: Replicate()))
    ]
    if not elementwise or not tensors:
        return found
    shape = torch.broadcast_shapes(*(a.shape for a in tensors))
    for dim in range(len(shape)):

        def placement(spec: Any, dim: int = dim) -> Any:
            # The input's dimension aligned with `dim` from the right: whole if missing or broadcast
            own = dim - (len(shape) - spec.ndim)
            return Shard(own) if own >= 0 and spec.shape[own] == shape[dim] else Replicate()

        found.append(([Shard(dim)] * outputs, each(placement)))
    return found
