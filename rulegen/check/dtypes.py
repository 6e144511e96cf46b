"""The dtype checks: float32, bfloat16 and float16, float64 throughout, Python numbers for arrays."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from rulegen.check.derivatives import cotangents, jax_grad, jvp_torch, sum_of, tangents, torch_grads, vjp_torch
from rulegen.check.outcome import CheckFailed, NotApplicable, compare
from rulegen.check.subject import Subject, from_numpy, to_numpy


def _float64_of(s: Subject, xs64: Sequence[np.ndarray], grads: bool) -> list[np.ndarray]:
    """The float64 outputs (or gradients of their sum) of the first installed backend: JAX, else torch."""
    if "jax" in s.backends:
        import jax.numpy as jnp

        if grads:
            return jax_grad(s, sum_of(s.jax_f), tuple(range(len(xs64))))(*[jnp.asarray(x) for x in xs64])
        return [to_numpy(o) for o in s.jax_f(*xs64)]
    import torch

    leaves = [torch.from_numpy(x).requires_grad_() for x in xs64]
    if grads:
        return [to_numpy(g) for g in torch_grads(s, sum_of(s.torch_f)(*leaves), leaves)]
    return [to_numpy(o) for o in s.torch_f(*leaves)]


def check_float32(s: Subject) -> str:
    xs64 = s.xs()
    ref = _float64_of(s, xs64, grads=False)
    found = []
    grads64: Any = None
    # Non-differentiable float arrays go to float32 too: the whole call is float32.
    # A complex rule's single precision is complex64.
    narrow = {np.dtype(np.float64): np.float32, np.dtype(np.complex128): np.complex64}
    s32 = dataclasses.replace(
        s,
        values=[v.astype(narrow[v.dtype]) if isinstance(v, np.ndarray) and v.dtype in narrow else v for v in s.values],
    )
    for name in s.backends:
        convert = _narrowing(name, narrow)
        f32 = s32.f(name)
        outs = f32(*[convert(x) for x in xs64])
        for k, (o, r) in enumerate(zip(outs, ref, strict=True)):
            o = to_numpy(o)
            if o.dtype != narrow[r.dtype]:
                raise CheckFailed(
                    f"{name}: output {s.output_name(k)} is {o.dtype} for {np.dtype(narrow[r.dtype])} inputs"
                )
            finite = np.isfinite(r)
            if not np.isfinite(o[finite]).all():
                where = s.at_first(finite & ~np.isfinite(o))
                raise CheckFailed(f"{name}: output {s.output_name(k)} is not finite in float32 where float64 is{where}")
            s.compare(
                f"{name}: float32 output {s.output_name(k)} vs float64",
                o,
                r,
                1e-4,
                1e-5 * max(1.0, float(np.max(np.abs(r[finite]), initial=0.0))),
            )
        if s.diff:
            argnums = tuple(range(len(xs64)))
            if name == "jax":
                grads = jax_grad(s, sum_of(f32), argnums)(*[convert(x) for x in xs64])
            else:
                leaves = [convert(x).requires_grad_() for x in xs64]
                grads = torch_grads(s, sum_of(f32)(*leaves), leaves)
            # The float64 gradients, taken once for both backends, where the first needs them.
            if grads64 is None:
                grads64 = _float64_of(s, xs64, grads=True)
            for k, (g, g64) in enumerate(zip(grads, grads64, strict=True)):
                g, g64 = to_numpy(g), to_numpy(g64)
                finite = np.isfinite(g64)
                if not np.isfinite(g[finite]).all():
                    where = s.at_first(finite & ~np.isfinite(g))
                    raise CheckFailed(f"{name}: float32 gradient {s.partial(k)} is not finite where float64 is{where}")
                s.compare(
                    f"{name}: float32 gradient {s.partial(k)} vs float64",
                    g,
                    g64,
                    1e-3,
                    1e-4 * max(1.0, float(np.max(np.abs(g64[finite]), initial=0.0))),
                )
        found.append(name)
    return f"float32 finite and within 1e-4 of float64 ({', '.join(found)})"


def _narrowing(backend: str, narrow: dict[np.dtype, Any]) -> Callable[[np.ndarray], Any]:
    """A float64 (complex128) NumPy array as the backend's float32 (complex64) array."""
    to_backend = from_numpy(backend)
    return lambda x: to_backend(x.astype(narrow[x.dtype]))


#: Within this many eps of the float64 value at the rounded inputs, relative to max(|value|, 1).
LOW_PRECISION_EPS = 4.0


def check_low_precision(s: Subject) -> str:
    """bfloat16 and float16 in: outputs and gradients of that dtype, within a few of its eps of float64."""
    if s.rule.complex:
        raise NotApplicable("bfloat16 and float16 have no complex counterpart (complex32 is no dtype JAX has)")
    for label in ("bfloat16", "float16"):
        _check_low_dtype(s, label)
    backends = ", ".join(s.backends)
    return f"bfloat16 and float16: values and gradients within {LOW_PRECISION_EPS:g} eps of float64 ({backends})"


def _low_dtype(backend: str, label: str) -> Any:
    """The backend's dtype named `label` (`bfloat16`, `float16`)."""
    if backend == "jax":
        import jax.numpy as jnp

        return getattr(jnp, label)
    import torch

    return getattr(torch, label)


def _check_low_dtype(s: Subject, label: str) -> None:
    # The first installed backend rounds the inputs and gives the float64 reference: both round alike.
    first = s.backends[0]
    rounding = functools.partial(_rounded64, backend=first, dtype=_low_dtype(first, label))
    rounded = [rounding(x) for x in s.xs()]
    # The reference: float64 at the rounded inputs, non-differentiated float arrays rounded too.
    exact = dataclasses.replace(s, values=[_low_value(v, rounding) for v in s.values])
    ref = [_to_numpy_any(o) for o in exact.f(first)(*map(from_numpy(first), rounded))]
    grads64 = _grads(first, exact.f(first), [from_numpy(first)(x) for x in rounded], low=False) if s.diff else []
    info = _finfo(first, _low_dtype(first, label))
    eps, largest = float(info.eps), float(info.max)
    for name in s.backends:
        # Arguments as each backend's own arrays: NumPy has no bfloat16 that torch takes.
        convert = _low_converter(name, _low_dtype(name, label))
        low = dataclasses.replace(s, values=[_low_value(v, convert) for v in s.values])
        f = low.f(name)
        xs = [convert(x) for x in rounded]
        for k, (o, r) in enumerate(zip(map(_to_numpy_any, f(*xs)), ref, strict=True)):
            if np.issubdtype(r.dtype, np.floating):
                _within_eps(f"{name}: {label} output {s.output_name(k)}", o, r, eps, largest, exact)
        if s.diff:
            grads = _grads(name, f, xs, low=True)
            for k, (g, g64) in enumerate(zip(grads, grads64, strict=True)):
                _within_eps(f"{name}: {label} gradient {s.partial(k)}", g, g64, eps, largest, exact)


def _low_converter(backend: str, dtype: Any) -> Callable[[Any], Any]:
    if backend == "jax":
        import jax.numpy as jnp

        return functools.partial(jnp.asarray, dtype=dtype)
    import torch

    return functools.partial(torch.tensor, dtype=dtype)


def _finfo(backend: str, dtype: Any) -> Any:
    if backend == "jax":
        import jax.numpy as jnp

        return jnp.finfo(dtype)
    import torch

    return torch.finfo(dtype)


def _rounded64(value: np.ndarray, backend: str, dtype: Any) -> np.ndarray:
    """`value` rounded to the backend's `dtype`, back in float64."""
    return _to_numpy_any(_low_converter(backend, dtype)(value))


def _low_value(value: Any, convert: Callable[[np.ndarray], Any]) -> Any:
    """A float64 array argument through `convert` (to the low dtype); other arguments as they are."""
    return convert(value) if isinstance(value, np.ndarray) and value.dtype == np.float64 else value


def _to_numpy_any(value: Any) -> np.ndarray:
    """A backend's array as NumPy: low-precision floats widened to float64 (NumPy has no bfloat16)."""
    if type(value).__module__.startswith("torch"):
        return value.detach().double().numpy() if value.is_floating_point() else value.numpy()
    array = np.asarray(value)
    # ml_dtypes' bfloat16 (JAX's) is no np.floating: every dtype but bool, integers and complex is widened.
    return array if array.dtype.kind in "biuc" else array.astype(np.float64)


def _grads(backend: str, f: Callable[..., Sequence[Any]], xs: Sequence[Any], low: bool) -> list[np.ndarray]:
    """The gradients of the sum of `f`'s outputs; `low`: summed in float32, as a low-precision user sums."""
    return _grads_jax(f, xs, None if low else np.float64) if backend == "jax" else _grads_torch(f, xs)


def _grads_jax(f: Callable[..., Sequence[Any]], xs: Sequence[Any], dtype: Any) -> list[np.ndarray]:
    import jax
    import jax.numpy as jnp

    total = lambda *a: sum(o.astype(jnp.float32).sum() if dtype is None else o.sum() for o in f(*a))  # noqa: E731
    return [_to_numpy_any(g) for g in jax.grad(total, tuple(range(len(xs))))(*[jnp.asarray(x) for x in xs])]


def _grads_torch(f: Callable[..., Sequence[Any]], xs: Sequence[Any]) -> list[np.ndarray]:
    import torch

    leaves = [x.clone().requires_grad_() for x in xs]
    grads = torch.autograd.grad(sum_of(f)(*leaves), leaves, allow_unused=True, materialize_grads=True)
    return [_to_numpy_any(g) for g in grads]


def _within_eps(what: str, got: np.ndarray, exact: np.ndarray, eps: float, largest: float, point: Subject) -> None:
    """`got` within LOW_PRECISION_EPS eps of `exact` relative to max(|exact|, 1), where the dtype holds it.

    `point`: the rounded inputs, named in the message where `got` is off.
    """
    held = np.isfinite(exact) & (np.abs(exact) <= largest)
    if not np.isfinite(got[held]).all():
        where = point.at_first(held & ~np.isfinite(got))
        raise CheckFailed(f"{what} is not finite where its dtype holds the exact value{where}")
    with np.errstate(invalid="ignore"):
        error = np.where(held, np.abs(got - exact) / np.maximum(np.abs(exact), 1.0) / eps, 0.0)
    worst = float(np.max(error, initial=0.0))
    if worst > LOW_PRECISION_EPS:
        where = point.at_first(error == worst)
        raise CheckFailed(
            f"{what} is {worst:.3g} eps from float64 at the rounded inputs{where} (bound {LOW_PRECISION_EPS:g})"
        )


@contextmanager
def _torch_default_dtype(dtype: Any) -> Iterator[None]:
    """torch's default dtype set to `dtype` (a torch dtype or its name) for the block; None leaves it alone."""
    if dtype is None:
        yield
        return
    import torch

    previous = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, dtype) if isinstance(dtype, str) else dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def _torch_results(s: Subject) -> list[np.ndarray]:
    """Outputs, JVP (where torch has forward mode) and VJP of the rule in torch, at float64 inputs."""
    xs = s.xs()
    outs = [to_numpy(o) for o in s.torch_f(*[__import__("torch").from_numpy(x) for x in xs])]
    if not s.diff:
        return outs
    directions = tangents(s)
    weights = cotangents(s, outs)
    found = [*outs, *vjp_torch(s, xs, weights)]
    if s.torch_forward_mode:
        found += jvp_torch(s, xs, directions)
    return found


def check_dtype(s: Subject) -> str:
    """float64 in is float64 throughout: results, tangents and cotangents, and every intermediate.

    An intermediate that torch makes in its default dtype (`torch.where(c,
    0.1, 0.2)`, `torch.exp` of an integer tensor, `torch.tensor(0.1)`) is
    float32 by default, a relative error near 1e-8 that other checks'
    tolerances let pass.  Under a bfloat16 default it is an error near 1e-3,
    and code that never uses the default dtype gives the same numbers.
    """
    outputs = [f"output {s.output_name(k)}" for k in range(len(s.outputs))]
    done = []
    if "torch" in s.backends:
        _float64_throughout_torch(s, outputs)
        done.append("torch: the same results under a bfloat16 default dtype")
    if "jax" in s.backends:
        _float64_throughout_jax(s, outputs)
        done.append("jax")
    absent = "".join(f"; {b} is not installed" for b in s.absent)
    return f"float64 throughout ({', '.join(done)}{absent})"


def _float64_throughout_torch(s: Subject, outputs: list[str]) -> None:
    rng_state = s.rng.bit_generator.state
    reference = _torch_results(s)
    s.rng.bit_generator.state = rng_state
    with _torch_default_dtype(__import__("torch").bfloat16):
        narrow = _torch_results(s)
    # What _torch_results returns, by name: the outputs, the cotangents, the tangents.
    labels = [*outputs, *(f"cotangent of {s.input_name(k)}" for k in range(len(s.diff)))]
    labels += [f"tangent of {s.output_name(k)}" for k in range(len(s.outputs))]
    for what, got, ref in zip(labels, narrow, reference, strict=False):
        if ref.dtype.kind == "f" and ref.dtype != np.float64:
            raise CheckFailed(f"torch: {what} is {ref.dtype} for float64 inputs")
        if ref.dtype.kind == "c" and ref.dtype != np.complex128:
            raise CheckFailed(f"torch: {what} is {ref.dtype} for complex128 inputs")
        s.compare(f"torch: {what} with a bfloat16 default dtype vs the float32 default's", got, ref, 1e-12, 1e-300)


def _float64_throughout_jax(s: Subject, outputs: list[str]) -> None:
    import jax.numpy as jnp

    outs = s.jax_f(*[jnp.asarray(x) for x in s.xs()])
    results = list(outs)
    if s.diff:
        results += list(jax_grad(s, sum_of(s.jax_f), tuple(range(len(s.diff))))(*[jnp.asarray(x) for x in s.xs()]))
    for what, r in zip([*outputs, *(f"gradient {s.partial(k)}" for k in range(len(s.diff)))], results, strict=False):
        if jnp.issubdtype(r.dtype, jnp.complexfloating) and r.dtype != jnp.complex128:
            raise CheckFailed(f"jax: {what} is {r.dtype} for complex128 inputs")
        if jnp.issubdtype(r.dtype, jnp.floating) and r.dtype != jnp.float64:
            raise CheckFailed(f"jax: {what} is {r.dtype} for float64 inputs")


def _call_both(s: Subject, values: Sequence[Any]) -> dict[str, list[np.ndarray]]:
    """Each installed backend's outputs for arguments given as they are (numbers stay numbers)."""
    found = {}
    for name in s.backends:
        convert = from_numpy(name)
        out = s.fn(name)(*[convert(v) if isinstance(v, np.ndarray) else v for v in values])
        found[name] = [to_numpy(o) for o in (out if isinstance(out, tuple) else (out,))]
    return found


def _same_calls(what: str, got: dict[str, list[np.ndarray]], expected: dict[str, list[np.ndarray]], s: Subject) -> None:
    for backend, outs in got.items():
        for k, (o, e) in enumerate(zip(outs, expected[backend], strict=True)):
            if np.shape(o) != np.shape(e) and np.size(o) == 1:
                o = np.broadcast_to(o, np.shape(e))  # an elementwise rule of numbers alone gives a number
            compare(f"{backend}: {what}, output {s.rule.outputs[k].name}", o, e, s.rtol, s.atol)


def check_scalars(s: Subject) -> str:
    """Calls as users make them: a Python number for each array input in turn, and the defaults left out.

    torch's `apply` hands numbers on as numbers, which torch functions
    refuse; JAX takes them.  Each call must give what the call with arrays
    of that number gives.
    """
    done = []
    arrays = [k for k, i in enumerate(s.rule.inputs) if not i.static and i.dtype == "float"]
    if s.elementwise:
        for k in arrays:
            number = float(np.ravel(s.values[k])[0])
            with_number = [number if j == k else v for j, v in enumerate(s.values)]
            with_array = [np.full_like(v, number) if j == k else v for j, v in enumerate(s.values)]
            what = f"a Python number for {s.rule.inputs[k].name}"
            # A number beside no float tensor takes torch's default dtype: float64 here, as in the array call.
            with _torch_default_dtype("float64" if "torch" in s.backends else None):
                got = _call_both(s, with_number)
            _same_calls(what, got, _call_both(s, with_array), s)
        done.append(f"a number for each of {len(arrays)} float array(s)")
    defaulted = [k for k, i in enumerate(s.rule.inputs) if i.has_default]
    if defaulted:
        explicit = [s.rule.inputs[k].default if k in defaulted else v for k, v in enumerate(s.values)]
        _same_calls("defaults left out", _call_both(s, explicit[: defaulted[0]]), _call_both(s, explicit), s)
        done.append(f"{len(defaulted)} default(s) left out")
    if not done:
        raise NotApplicable(
            "no float array input takes a number (the rule is not elementwise) and no input has a default"
        )
    return "; ".join(done) + (", in both backends" if len(s.backends) == 2 else f", in {s.backends[0]}")
