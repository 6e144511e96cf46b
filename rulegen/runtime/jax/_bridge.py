"""Rules written for torch only, called from JAX.

The forward runs in torch through `jax.pure_callback`; reverse mode is a
`custom_vjp` whose backward is torch's own VJP (`torch.func.vjp`), bridged
the same way, so `jax.grad` nests as deep as the rule's `depth`.  Forward
mode is not bridged: a JVP would need torch's forward mode inside a
callback that JAX cannot transpose.

torch is imported on the first call, not with the package: importing the
JAX rules must not cost a torch import where no bridged rule runs.
"""

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from ._util import Callback, value_key, varying_like


def _result_types(
    function: Callable[..., Any], arrays: Sequence[Any]
) -> tuple[jax.ShapeDtypeStruct, ...]:
    """Shapes and dtypes of `function`'s results, found by running it on meta tensors."""
    import torch

    meta = [torch.empty(a.shape, dtype=_torch_dtype(a.dtype), device="meta") for a in arrays]
    try:
        results = function(*meta)
    except (NotImplementedError, RuntimeError):
        results = function(*[torch.zeros(a.shape, dtype=_torch_dtype(a.dtype)) for a in arrays])
    results = results if isinstance(results, tuple) else (results,)
    return tuple(
        jax.ShapeDtypeStruct(tuple(r.shape), jax.dtypes.canonicalize_dtype(_numpy_dtype(r.dtype)))
        for r in results
    )


def _torch_dtype(dtype: Any) -> Any:
    return _to_torch(np.zeros((), dtype=dtype)).dtype


def _numpy_dtype(dtype: Any) -> np.dtype:
    import torch

    return _to_numpy(torch.zeros((), dtype=dtype)).dtype


def _to_torch(value: Any) -> Any:
    """A NumPy array (a JAX array's values) as a tensor of the same dtype.

    NumPy and torch share no bfloat16: it crosses as float32, which holds it exactly.
    """
    import torch

    array = np.asarray(value)
    if array.dtype == jax.numpy.bfloat16:
        return torch.from_numpy(array.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(np.array(array))


def _to_numpy(tensor: Any) -> np.ndarray:
    """A tensor's values as a NumPy array of the same dtype (bfloat16 as JAX's, through float32)."""
    import torch

    tensor = tensor.detach()
    if tensor.dtype == torch.bfloat16:
        return tensor.float().numpy(force=True).astype(jax.numpy.bfloat16)
    return tensor.numpy(force=True)


def _host(function: Callable[..., Any], types: Sequence[jax.ShapeDtypeStruct]) -> Callback:
    """`function` on NumPy arrays, its results cast to the declared types.

    Equal for equal functions and types (see `Callback`): the generated
    code passes a fresh lambda over the rule's statics on every call.
    """

    def call(*values: Any) -> tuple[np.ndarray, ...]:
        import torch

        tensors = [_to_torch(v) for v in values]
        with torch.no_grad():
            results = function(*tensors)
        results = results if isinstance(results, tuple) else (results,)
        return tuple(
            np.asarray(_to_numpy(r), dtype=t.dtype) for r, t in zip(results, types, strict=True)
        )

    return Callback(
        call, ("forward", value_key(function), tuple((t.shape, t.dtype) for t in types))
    )


def _torch_vjp(function: Callable[..., Any], count: int) -> Callback:
    """The torch function (arrays, cotangents) -> cotangents of the first `count` arrays."""

    def vjp(*values: Any) -> tuple[Any, ...]:
        import torch

        arrays, cotangents = values[:count], values[count:]
        floating = [k for k, a in enumerate(arrays) if a.is_floating_point()]

        def restricted(*xs: Any) -> Any:
            full = list(arrays)
            for k, x in zip(floating, xs, strict=True):
                full[k] = x
            return function(*full)

        with torch.enable_grad():
            # Two values without has_aux (torch's annotation allows for its three).
            results, pullback = torch.func.vjp(restricted, *[arrays[k] for k in floating])  # type: ignore[misc]
            grads = pullback(cotangents if isinstance(results, tuple) else cotangents[0])
        found = dict(zip(floating, grads, strict=True))
        return tuple(found.get(k, torch.zeros_like(a)) for k, a in enumerate(arrays))

    return Callback(vjp, ("vjp", value_key(function), count))


class TorchBridge:
    """Calls torch functions from JAX, differentiable `depth` times in reverse mode."""

    def __init__(self, name: str, depth: int) -> None:
        self.name = name
        self.depth = depth

    def __call__(self, function: Callable[..., Any], *arrays: Any) -> Any:
        results = self._bridged(function, self.depth)(*map(jax.numpy.asarray, arrays))
        return results[0] if len(results) == 1 else results

    def _bridged(self, function: Callable[..., Any], depth: int) -> Callable[..., Any]:
        name = self.name

        def call(*arrays: Any) -> Any:
            types = _result_types(function, arrays)
            results = jax.pure_callback(
                _host(function, types), types, *arrays, vmap_method="sequential"
            )
            return varying_like(results, *arrays)

        @jax.custom_vjp
        def bridged(*arrays: Any) -> Any:
            return call(*arrays)

        def fwd(*arrays: Any) -> tuple[Any, tuple[Any, ...]]:
            # The bridged function, not the bare callback: at higher order
            # JAX differentiates fwd too.
            return bridged(*arrays), arrays

        def bwd(arrays: tuple[Any, ...], cotangents: Sequence[Any]) -> tuple[Any, ...]:
            if depth == 0:
                raise TypeError(
                    f"{name} is differentiable {self.depth} time(s) from JAX (its rule's `depth`)"
                )
            vjp = self._bridged(_torch_vjp(function, len(arrays)), depth - 1)
            grads = vjp(*arrays, *cotangents)
            return tuple(
                g if jax.numpy.issubdtype(a.dtype, jax.numpy.floating) else None
                for g, a in zip(grads, arrays, strict=True)
            )

        bridged.defvjp(fwd, bwd)
        return bridged
