"""Helpers that the generated torch rules share."""

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

# Re-exported: generated modules import every helper they call from here.
from . import _asymptotic, _private, _scaling, _structures

with _private.guarded(torch):
    from torch._C import _are_functorch_transforms_active
    from torch._C._functorch import is_functorch_wrapped_tensor
# Called by the rule modules that `sigmoid_product` is printed into.
_private.require(torch, torch.ops.aten, "softplus_backward")

unpack_fields = _structures.unpack_fields
unpack_keys = _structures.unpack_keys
unpack_tuple = _structures.unpack_tuple
binade = functools.partial(_scaling.binade, torch)
log1pmx = functools.partial(_asymptotic.log1pmx, torch)


def erfcx_series(order: int, x: torch.Tensor) -> torch.Tensor:
    """`_asymptotic.erfcx_series` of torch tensors (see `_read_above`)."""
    series = functools.partial(_asymptotic.erfcx_series, torch, order)
    return _read_above(series, _asymptotic.ERFCX_SERIES_FROM, x)


def bessel_ie_series(nu: int, order: int, x: torch.Tensor) -> torch.Tensor:
    """`_asymptotic.bessel_ie_series` of torch tensors (see `_read_above`)."""
    series = functools.partial(_asymptotic.bessel_ie_series, torch, nu, order)
    return _read_above(series, _asymptotic.BESSEL_IE_SERIES_FROM, x)


def _read_above(
    series: Callable[[torch.Tensor], torch.Tensor], start: float, x: torch.Tensor
) -> torch.Tensor:
    """`series(x)` of a stand-in x: x where x >= start, start where a `where` drops the value.

    Where nothing differentiates it, computed only above start (at start it
    is one number): a series' terms cost two kernels each, which eager
    torch would run on every element.  Differentiated (a backward with
    `create_graph`; at start the number would have no derivative), compiled
    or under torch.func (where a boolean index has no fixed shape), it is
    computed everywhere.
    """
    if (
        torch.compiler.is_compiling()
        or _are_functorch_transforms_active()
        or (torch.is_grad_enabled() and x.requires_grad)
    ):
        return series(x)
    at = x.new_tensor(float(start))
    result = torch.empty_like(x).fill_(series(at))
    above = x > at
    result[above] = series(x[above])
    return result


# A complex dtype's real counterpart (a table: Dynamo cannot trace dtype.to_real()).
_REAL = {torch.complex64: torch.float32, torch.complex128: torch.float64}


def as_tensors(rule: str, names: Sequence[str], kinds: str, *values: Any) -> tuple[Any, ...]:
    """A rule's array arguments as tensors, as torch's own arithmetic would read them.

    `kinds` has a letter per argument: `f` (float), `c` (complex), `i` (int),
    `b` (bool).  The float arguments take the dtype torch's arithmetic of them
    would compute in (`torch.result_type`): that of the dimensioned float
    tensors, else of the 0-d ones, else the default dtype, so a 0-d tensor or
    a Python number beside a dimensioned tensor takes its dtype
    (`x_bf16 * torch.tensor(2.0)` is bfloat16).  A NumPy array counts as the
    tensor it becomes; an integer array given for a float argument takes the
    float dtype, as NumPy would promote it.  A complex argument given as real
    becomes complex.  All take the tensors' device.  A complex array for a
    real argument is refused: the rule's derivatives are real.
    """
    for name, kind, value in zip(names, kinds, values, strict=True):
        if kind != "c" and isinstance(value, torch.Tensor) and value.is_complex():
            raise TypeError(_real_only(rule, name, value.dtype))
    # Float tensors of one dtype, as most calls are, need nothing.
    if _alike(kinds, values):
        return values
    given = [v for v in values if isinstance(v, torch.Tensor)]
    device = given[0].device if given else None
    # A NumPy array keeps its dtype and ranks as the tensor it is.
    values = tuple(
        torch.as_tensor(v, device=device) if _numpy_kind(v) in "fiub" else v for v in values
    )
    dtype = _promoted(v for v, kind in zip(values, kinds, strict=True) if kind in "fc")
    converted = []
    for name, kind, value in zip(names, kinds, values, strict=True):
        if kind == "c":
            converted.append(_complex(value, dtype, device))
            continue
        if isinstance(value, torch.Tensor):
            # Promoted before anything is computed: exp(x) of a float32 x beside a float64 y is
            # float64 arithmetic; an integer array for a float input is computed as floats.
            if kind == "f" and value.dtype != dtype:
                value = value.to(dtype)
        elif not (
            isinstance(value, list | tuple) and any(isinstance(v, torch.Tensor) for v in value)
        ):
            if isinstance(value, complex) or _numpy_kind(value) == "c":
                raise TypeError(_real_only(rule, name, "complex"))
            value = torch.as_tensor(value, dtype=dtype if kind == "f" else None, device=device)
            if kind == "b":
                value = value.bool()
        converted.append(value)
    return tuple(converted)


def _alike(kinds: str, values: Any) -> bool:
    """Whether every argument is a tensor of its kind, the float ones of one dtype."""
    if not all(isinstance(v, torch.Tensor) for v in values):
        return False
    pairs = list(zip(kinds, values, strict=True))
    if not all(
        v.is_complex() if k == "c" else v.is_floating_point() for k, v in pairs if k in "fc"
    ):
        return False
    return len({v.dtype for k, v in pairs if k == "f"}) <= 1


def _numpy_kind(value: Any) -> str:
    """The dtype kind of a NumPy array or scalar (`f`, `c`, ...); "x" for anything else.

    Python numbers are told apart first: under torch.compile they may be
    symbolic, whose attributes Dynamo cannot look up.
    """
    if isinstance(value, torch.Tensor | bool | int | float | complex | list | tuple):
        return "x"
    return getattr(getattr(value, "dtype", None), "kind", "x")


def _promoted(values: Iterable[Any]) -> torch.dtype:
    """The real dtype torch's arithmetic of `values` computes in, as `torch.result_type` ranks them.

    Dimensioned float (or complex) tensors decide; without any, 0-d ones; without
    those, the default dtype (Python numbers, integer tensors).  A complex
    tensor counts by its precision.
    """
    tiers: tuple[list[torch.dtype], list[torch.dtype]] = ([], [])
    for value in values:
        if isinstance(value, torch.Tensor) and (value.is_floating_point() or value.is_complex()):
            tiers[value.dim() == 0].append(_REAL.get(value.dtype, value.dtype))
    for dtypes in tiers:
        if dtypes:
            return functools.reduce(torch.promote_types, dtypes)
    return torch.get_default_dtype()


def check_statics(rule: str, names: Sequence[str], kinds: str, *values: Any) -> None:
    """Refuse a tensor that is differentiated or batched for a static input.

    A static is handed to the Function as it is, and its backward returns
    None for it: a tensor that requires grad (or is under a torch.func
    transform, or carries a forward-mode tangent) would get a silent None
    gradient.  `kinds` has a letter per static: `n`, a number the rule would
    differentiate were it declared `static: false`; `v`, another.
    """
    for name, kind, value in zip(names, kinds, values, strict=True):
        if isinstance(value, torch.Tensor) and _tracked(value):
            raise TypeError(_tracked_static(rule, name, kind))


def _tracked(tensor: torch.Tensor) -> bool:
    """Whether something would differentiate or batch `tensor`.

    No public API tells a tensor that torch.func wraps (its `requires_grad`
    is False under `jvp` and `vmap`); Dynamo does not trace that private
    test, and compiled code sees only `requires_grad`.
    """
    if torch.compiler.is_compiling():
        return tensor.requires_grad
    return (
        tensor.requires_grad
        or is_functorch_wrapped_tensor(tensor)
        or torch.autograd.forward_ad.unpack_dual(tensor).tangent is not None
    )


def _tracked_static(rule: str, name: str, kind: str) -> str:
    message = (
        f"{rule}: {name} is a static input, a Python value handed to the rule as it is, "
        "but it was given a tensor that requires grad (or one that torch.func transforms, or "
        "a dual tensor), whose gradient the rule would silently leave None. Pass a Python "
        "number (`.item()`)"
    )
    if kind == "n":
        return f"{message}; to differentiate it, declare it `static: false` in the rule."
    return f"{message}; the rule cannot differentiate it."


def _real_only(rule: str, name: str, dtype: Any) -> str:
    return (
        f"{rule}: complex inputs are not supported for {name}, a real input ({name} is {dtype}); "
        "a holomorphic rule declares its inputs `dtype: complex`"
    )


def _complex(value: Any, dtype: Any, device: torch.device | None) -> torch.Tensor:
    """A complex argument as a complex tensor; a real one made complex at its own precision."""
    if not isinstance(value, torch.Tensor):
        value = torch.as_tensor(value, device=device)
        if not value.is_complex():
            value = value.to(dtype)
    if value.is_complex():
        return value
    real = value if value.is_floating_point() else value.to(dtype)
    return real.to(torch.promote_types(real.dtype, torch.complex64))


def fresh_outputs(result: Any, *inputs: torch.Tensor) -> Any:
    """`result` (a tensor or a tuple) with a copy of any output that is one of `inputs` as it is.

    torch refuses to save for backward an input that a Function returned as
    it is, and a view of it would need a view for its tangent too.
    """
    if isinstance(result, tuple):
        return tuple(fresh_outputs(r, *inputs) for r in result)
    return result.clone() if any(result is i for i in inputs) else result


_LOW_PRECISION = (torch.bfloat16, torch.float16)


def as_opmath_tensors(
    rule: str, names: Sequence[str], kinds: str, *values: Any
) -> tuple[tuple[Any, ...], torch.dtype | None]:
    """`as_tensors`, its bfloat16 and float16 float arguments in float32, and the dtype to round to.

    As torch's own kernels compute those dtypes (their "opmath"); see
    `in_float32`.  The dtype is None where nothing was lifted.
    """
    tensors = list(as_tensors(rule, names, kinds, *values))
    floats = [k for k, kind in enumerate(kinds) if kind == "f"]
    lifted, low = in_float32(*(tensors[k] for k in floats))
    for k, tensor in zip(floats, lifted, strict=True):
        tensors[k] = tensor
    return tuple(tensors), low


def in_float32(*tensors: Any) -> tuple[tuple[Any, ...], torch.dtype | None]:
    """bfloat16 and float16 tensors in float32, and the dtype to round results to (None: keep them).

    As torch's own kernels compute these dtypes (their "opmath"): each
    result is rounded once, where computing in the dtype rounds every step.
    """
    # A snippet rule may take a pytree (a tuple of tensors) for an array input: it is left as it is.
    floats = [t.dtype for t in tensors if isinstance(t, torch.Tensor)]
    low = functools.reduce(torch.promote_types, floats) if floats else None
    if low not in _LOW_PRECISION:
        return tensors, None
    return tuple(_lifted(t) for t in tensors), low


def _lifted(tensor: Any) -> Any:
    low = isinstance(tensor, torch.Tensor) and tensor.dtype in _LOW_PRECISION
    return tensor.float() if low else tensor


def _is_float_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point()


def rounded(low: torch.dtype | None, *results: Any) -> Any:
    """`results`, each float one rounded to `low` (None: as they are); one result bare."""
    if low is not None:
        results = tuple(r.to(low) if _is_float_tensor(r) else r for r in results)
    return results[0] if len(results) == 1 else results
