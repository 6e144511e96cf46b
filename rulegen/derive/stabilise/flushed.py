"""numpy evaluation as XLA computes on the CPU: subnormal numbers flushed to zero, read and written.

XLA sets the CPU's flush-to-zero and denormals-are-zero modes, in float32 and float64 alike: a subnormal
result of any operation is written as a zero of its sign, and a subnormal operand is read as one
(`jnp.array([2.2e-308]) / 2` is 0, eagerly and under `jit`).  numpy and torch keep subnormals.  A form
measured in numpy alone can be right there and wrong under JAX: cbrt's derivative as nth_root(1/x, 3)**2/3
goes through 1/x, subnormal at the largest floats, and is 0 under XLA where nth_root(x, 3)**-2/3 is right.

`flushed_call` runs a lambdified numpy function on arrays that flush every ufunc's result (operators and
scipy's special functions are ufuncs) and every result of numpy's other functions (`where`, `select`), after
flushing the inputs themselves: op by op, as XLA does, with the lambdified function unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np


def flush(values: np.ndarray, tiny: float | None = None) -> np.ndarray:
    """`values` with each number below `tiny` in magnitude (the smallest normal of its dtype unless given) a zero
    of its sign: the subnormals flushed.  A float array; anything else as it is."""
    if values.dtype.kind != "f" or not values.size:
        return values
    with np.errstate(invalid="ignore"):
        small = np.abs(values) < (np.finfo(values.dtype).tiny if tiny is None else tiny)
    if not small.any():
        return values
    return np.where(small, np.copysign(np.zeros((), values.dtype), values), values)


class _Flushing(np.ndarray):
    """An array whose operations flush their results, and the numbers they are given, below `tiny` to 0: the
    smallest normal of the dtype computed in, also where numpy computes wider (scipy's polygamma of float32 is
    float64), as XLA computes it all in that dtype."""

    tiny: float = 0.0

    def _read(self, value: Any) -> Any:
        """An operand as XLA reads it: a subnormal number a zero of its sign (a `_Flushing` array is flushed
        already; a plain one is what a registered function's numpy implementation returned)."""
        if isinstance(value, _Flushing):
            return value.view(np.ndarray)
        if isinstance(value, np.ndarray):
            return flush(value, self.tiny)
        if isinstance(value, float) and value != 0 and abs(value) < self.tiny:
            return math.copysign(0.0, value)
        return value

    def _wrapped(self, result: Any) -> Any:
        """A result of numpy as an array of this class, flushed; tuples item by item; anything else as it is."""
        if isinstance(result, tuple):
            return tuple(self._wrapped(r) for r in result)
        if isinstance(result, np.ndarray | np.generic):
            return flush(np.asarray(result), self.tiny).view(type(self))
        return result

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        operands = [self._read(i) for i in inputs]
        if "out" in kwargs:
            kwargs["out"] = tuple(self._read(o) for o in kwargs["out"])
        return self._wrapped(getattr(ufunc, method)(*operands, **kwargs))

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        return self._wrapped(super().__array_function__(func, types, args, kwargs))


#: Per dtype computed in, its `_Flushing` arrays.
_FLUSHING: dict[np.dtype[Any], type[_Flushing]] = {
    np.dtype(dtype): type(f"_Flushing_{np.dtype(dtype).name}", (_Flushing,), {"tiny": float(np.finfo(dtype).tiny)})
    for dtype in (np.float16, np.float32, np.float64)
}


def flushed_call(fn: Callable[..., Any], columns: Sequence[np.ndarray], dtype: Any) -> np.ndarray:
    """`fn` (numpy code) at `columns` computing in `dtype`, every subnormal input, intermediate and result (of
    `dtype`) flushed to 0, as XLA computes it on the CPU."""
    flushing = _FLUSHING[np.dtype(dtype)]
    result = fn(*[flush(np.asarray(c), flushing.tiny).view(flushing) for c in columns])
    # A registered function's numpy implementation returns a plain array, unflushed.
    return flush(np.asarray(result).view(np.ndarray), flushing.tiny)


def read_as_zero(columns: Sequence[np.ndarray], dtype: Any) -> np.ndarray:
    """The points (rows of `columns`) where an input is subnormal in `dtype`: XLA reads it as 0, and computes
    there what a form computes at 0, whatever the form; no form is judged there as XLA computes it."""
    tiny = np.finfo(dtype).tiny
    return np.logical_or.reduce([(c != 0) & (np.abs(c) < tiny) for c in columns], axis=0)
