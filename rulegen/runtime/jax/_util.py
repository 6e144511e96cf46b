"""Helpers that the generated JAX rules share."""

import functools
import types
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

# Re-exported: generated modules import every helper they call from here.
from . import _asymptotic, _scaling, _structures

unpack_fields = _structures.unpack_fields
unpack_keys = _structures.unpack_keys
unpack_tuple = _structures.unpack_tuple
binade = functools.partial(_scaling.binade, jnp)


def power_product(*pairs: Any) -> jax.Array:
    """`_scaling.power_product` of JAX arrays or Python numbers (b1, k1, b2, k2, ...),
    differentiated by its stated partials at every order (`_power_product`)."""
    bases = jnp.broadcast_arrays(*(jnp.asarray(b) for b in pairs[0::2]))
    return _power_product(tuple(int(k) for k in pairs[1::2]), *bases)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _power_product(exponents: tuple[int, ...], *bases: jax.Array) -> jax.Array:
    """b1**k1 * b2**k2 * ... of `bases` and the integer `exponents`, whose partial in b_i is
    k_i power_product(..., b_i, k_i - 1, ...), a product of the same kind (`_scaled_by`).

    Autodiff of the scaling multiplies the cotangent by the scale-back powers of two before the
    near-1 product's 0: the gradient of power_product(x, 1, y, 1) at (max, 0) was nan, not
    (0, max).
    """
    return _scaling.power_product(jnp, *_scaling.paired(bases, exponents), exponent_of=_exponent_of)


def _scaled_by(t: Any, exponents: tuple[int, ...], bases: tuple[Any, ...], i: int) -> Any:
    """t times the partial in b_i, k_i power_product(..., b_i, k_i - 1, ...) (a base whose
    exponent is then 0 left out): linear in t, which JAX transposes in reverse mode (t taken in
    as one more base, as torch takes it, is not: its exponent is taken out of it).

    Where the partial is a normal float, t times it: the partial is this function again, so
    every order is stated.  Elsewhere (out of range, subnormal or 0), t multiplied into its
    near-1 product before the powers of two that scale it back: 0 where t is 0 (a one-hot
    tangent of jacfwd, not 0 * inf), a float where t times the partial is one.
    """
    pairs = _scaling.partial_pairs(bases, exponents, i)
    if not pairs:
        return exponents[i] * t
    partial = _power_product(tuple(pairs[1::2]), *pairs[0::2])
    product, low, high = _scaling.power_product_parts(jnp, *pairs, exponent_of=_exponent_of)
    normal = jnp.isfinite(partial) & (jnp.abs(partial) >= jnp.finfo(partial.dtype).tiny)
    # Reverse mode takes both sides, the other's cotangent 0: each side's factors are finite.
    kept_partial = jnp.where(normal, partial, 1.0)
    return exponents[i] * jnp.where(normal, t * kept_partial, t * product * low * high)


def _power_product_jvp(
    exponents: tuple[int, ...], primals: tuple[Any, ...], tangents: tuple[Any, ...]
) -> tuple[jax.Array, jax.Array]:
    out = _power_product(exponents, *primals)
    # An input with no tangent adds no term.
    terms = [
        _scaled_by(t, exponents, primals, i)
        for i, t in enumerate(tangents)
        if not isinstance(t, jax.custom_derivatives.SymbolicZero)
    ]
    tangent = sum(terms[1:], terms[0]) if terms else jnp.zeros_like(out)
    return out, tangent


_power_product.defjvp(_power_product_jvp, symbolic_zeros=True)


def _exponent_of(size: jax.Array) -> jax.Array:
    """floor(log2(size)) from the float's bits (`frexp`), not a logarithm: XLA computes a log2
    as a log."""
    return (jnp.frexp(size)[1] - 1).astype(size.dtype)


erfcx_series = functools.partial(_asymptotic.erfcx_series, jnp)
bessel_ie_series = functools.partial(_asymptotic.bessel_ie_series, jnp)
log1pmx = functools.partial(_asymptotic.log1pmx, jnp)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def nth_root(x: jax.Array, n: int) -> jax.Array:
    """x**(1/n) within an ulp (`_scaling.nth_root`), differentiated by its stated derivative
    nth_root(x, n)**(1 - n) / n at every order.

    Autodiff of the refinement step is nan at the smallest normals, at 1e-300 and at inf
    (inf * 0 and 0 / 0 in its residual), and half the derivative at 1e20 in float32.
    """
    return _scaling.nth_root(jnp, x, n)


@nth_root.defjvp
def _nth_root_jvp(
    n: int, primals: tuple[jax.Array], tangents: tuple[jax.Array]
) -> tuple[jax.Array, jax.Array]:
    (x,), (x_dot,) = primals, tangents
    out = nth_root(x, n)
    # A power of the root, not a quotient by one: its derivative (1 - n) out**-n out' is 0 at
    # x = inf, where that of 1 / out**(n - 1) is inf * 0.
    return out, x_dot * (out ** (1 - n) / n)


def quotient(a: ArrayLike, b: ArrayLike) -> jax.Array:
    """a / b, whose derivative in b is -(a / b) / b.

    JAX's own, -a * b**-2, is 0 * inf = nan where b**2 under- or overflows
    and the quotient's derivative is a float (x / y at (0, 1e-38), and
    inf / (1 + y) at y = 3.4e38).
    """
    # An integer divides as a float, of the other's type where that is one (jnp's true_divide).
    inexact = [jnp.issubdtype(jnp.result_type(v), jnp.inexact) for v in (a, b)]
    if not inexact[0]:
        a = jnp.asarray(a, jnp.result_type(b) if inexact[1] else float)
    if not inexact[1]:
        b = jnp.asarray(b, jnp.result_type(a))
    return _quotient(a, b)


@jax.custom_jvp
def _quotient(a: jax.Array, b: jax.Array) -> jax.Array:
    return a / b


@_quotient.defjvp
def _quotient_jvp(
    primals: tuple[jax.Array, jax.Array], tangents: tuple[jax.Array, jax.Array]
) -> tuple[jax.Array, jax.Array]:
    a, b = primals
    a_dot, b_dot = tangents
    q = _quotient(a, b)
    # Held whole: XLA would reassociate (a / b) / b into a / (b * b), the square this rule avoids.
    return q, _quotient(a_dot, b) - _quotient(jax.lax.optimization_barrier(q), b) * b_dot


class Callback:
    """A host callback equal to any other of the same `key`: one compiled executable per key.

    Outside `jit`, `jax.pure_callback` compiles an executable for its
    callback and keeps it keyed by that callback; a fresh closure on every
    call compiled anew on every call (10-20 ms each, and memory that grew
    with every call).  A key that cannot be hashed (a static list) makes
    the callback equal only to itself, which is right, and slow.
    """

    def __init__(self, call: Callable[..., Any], key: Hashable) -> None:
        self._call = call
        try:
            hash(key)
        except TypeError:
            key = object()
        self._key = key

    def __call__(self, *values: Any) -> Any:
        return self._call(*values)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Callback) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)


def value_key(value: Any) -> Hashable:
    """`value` as a key that tells apart what `==` does not: 1, 1.0 and True, 0.0 and -0.0, nan.

    A function made by the same code over the same values (a lambda taking a
    rule's statics) is the same function.
    """
    if isinstance(value, float):
        return (float, value.hex())
    if isinstance(value, (tuple, list)):
        return (type(value), tuple(value_key(v) for v in value))
    if isinstance(value, types.FunctionType):
        try:
            cells = tuple(c.cell_contents for c in value.__closure__ or ())
        except ValueError:  # a cell not yet filled
            return (type(value), value)
        return (
            value.__code__,
            id(value.__globals__),
            value_key(cells),
            value_key(value.__defaults__ or ()),
        )
    return (type(value), value)


def sum_to_shape(x: jax.Array, shape: Sequence[int]) -> jax.Array:
    """Sum `x` over the axes that broadcasting added to an array of `shape`."""
    lead = x.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + k for k, n in enumerate(shape) if n == 1 and x.shape[lead + k] != 1
    )
    return jnp.sum(x, axis=axes).reshape(shape) if axes else x


def present(tangents: Sequence[Any]) -> tuple[Any, ...]:
    """A JVP rule's tangents, None for each input held constant (JAX's symbolic zero)."""
    return tuple(None if type(t) is jax.custom_derivatives.SymbolicZero else t for t in tangents)


def summed_like(like: ArrayLike, *terms: Any) -> jax.Array:
    """Output `like`'s tangent: the sum of `terms`, in its shape.

    A term is a pair (tangent, partial), their product where the tangent is
    present, or a tangent alone (a partial of 1).  An input held constant
    (tangent None) adds nothing, not a zero times its partial (0 * inf = nan
    where that partial overflows); with every term absent, the tangent is
    zero.  Under jit, a partial no present tangent reads is never computed.
    """
    total = None
    for term in map(_product, terms):
        if term is not None:
            total = term if total is None else total + term
    if total is None:
        return jnp.zeros_like(like)
    return jnp.broadcast_to(total, jnp.shape(like))


def _product(term: Any) -> Any:
    """A term of `summed_like`: a (tangent, partial) pair's product, None where the tangent is."""
    if not isinstance(term, tuple):
        return term
    tangent, partial = term
    return None if tangent is None else tangent * partial


def unbroadcast(x_bar: Any, x: Any) -> Any:
    """`x_bar` summed back to the shape of `x`, leaf by leaf when `x` is a pytree."""
    return jax.tree.map(lambda g, p: sum_to_shape(g, jnp.shape(p)), x_bar, x)


def as_arrays(rule: str, names: Sequence[str], kinds: str, *values: Any) -> tuple[Any, ...]:
    """A rule's array arguments (arrays, numbers or pytrees of them), as the rule reads them.

    `kinds` has a letter per argument: `f` (float), `c` (complex), `i` (int),
    `b` (bool).  The float arguments take the dtype `jnp.result_type` gives
    them, Python numbers weakly typed as in `jnp` arithmetic: beside an
    array they take its dtype, alone they stay weakly typed numbers of the
    default float dtype (a Python int too).  An integer or boolean array
    given for a float argument becomes an array of that dtype.  A complex
    argument given as real becomes complex; a complex array for a real
    argument is refused, the rule's derivatives being real.
    """
    leaves = [jax.tree.leaves(v) for v in values]
    floats = [
        leaf
        for v, kind in zip(leaves, kinds, strict=True)
        if kind == "f"
        for leaf in v
        if jnp.issubdtype(jnp.result_type(leaf), jnp.floating)
    ]
    # Only arrays fix a dtype: weakly typed numbers alone keep theirs.
    strong = [leaf for leaf in floats if not weakly_typed(leaf)]
    target = jnp.result_type(*floats) if strong else None

    def read(name: str, kind: str, leaf: Any) -> Any:
        # Every leaf an array: a Python number stays weakly typed, but 1 / 0.0 must not raise, and
        # under jax.grad of a number the tracer's primal is a Python float, which the JVP rule
        # would compute with (x**2 raising OverflowError at 1e200): asarray of the tracer is not.
        weak = weakly_typed(leaf)
        leaf = jnp.asarray(leaf)
        dtype = jnp.result_type(leaf)
        if kind == "c":
            complex_ = jnp.issubdtype(dtype, jnp.complexfloating)
            return leaf if complex_ else jnp.asarray(leaf, jnp.result_type(leaf, 1j))
        if jnp.issubdtype(dtype, jnp.complexfloating):
            raise TypeError(
                f"{rule}: complex inputs are not supported for {name}, a real input "
                f"({name} is {dtype}); a holomorphic rule declares its inputs `dtype: complex`"
            )
        if kind != "f" or (dtype == target and not weak):
            return leaf
        if target is not None:
            return jnp.asarray(leaf, dtype=target)
        if jnp.issubdtype(dtype, jnp.floating):
            return leaf
        # A weakly typed int + 0.0 is a weakly typed float (asarray would make it strong).
        return leaf + 0.0 if weak else jnp.asarray(leaf, dtype=float)

    return tuple(
        jax.tree.map(lambda leaf, n=name, k=kind: read(n, k, leaf), value)
        for name, kind, value in zip(names, kinds, values, strict=True)
    )


def as_lifted_arrays(
    rule: str, names: Sequence[str], kinds: str, *values: Any
) -> tuple[tuple[Any, ...], Any]:
    """`as_arrays`, its bfloat16 and float16 float arguments in float32, and the dtype to round to.

    As `in_float32` computes them; the dtype is None where nothing was lifted.
    """
    arrays = list(as_arrays(rule, names, kinds, *values))
    floats = [k for k, kind in enumerate(kinds) if kind == "f"]
    lifted, low = in_float32(*(arrays[k] for k in floats))
    for k, array in zip(floats, lifted, strict=True):
        arrays[k] = array
    return tuple(arrays), low


def weakly_typed(leaf: Any) -> bool:
    """Whether `leaf` is weakly typed: a Python number, or an array (a tracer) made of one.

    A NumPy scalar is not (`np.float64` is a `float`, and strongly typed to JAX).
    """
    return type(leaf) in (int, float) or getattr(leaf, "weak_type", False)


def check_statics(rule: str, names: Sequence[str], kinds: str, *values: Any) -> None:
    """Refuse a traced value for a static input (an argument of `jit`, `grad`, `jvp` or `vmap`).

    A static is a Python value the trace is made for (`nondiff_argnums`):
    traced, `custom_jvp` would hold it constant, so its gradient would be a
    silent zero, and inside `jit` no one can tell whether an outer `grad` is
    differentiating it.  `kinds` has a letter per static: `n`, a number the
    rule would differentiate were it declared `static: false`; `v`, another.
    """
    for name, kind, value in zip(names, kinds, values, strict=True):
        if any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(value)):
            raise TypeError(_traced_static(rule, name, kind))


def _traced_static(rule: str, name: str, kind: str) -> str:
    message = (
        f"{rule}: {name} is a static input, a Python value fixed when JAX traces the rule, "
        "but it was given a traced value (an argument that jax.grad, jvp, vmap or jit "
        "transforms), whose derivative the rule would silently take as zero. Pass a Python "
        "number or a concrete array (under jax.jit, mark it static: "
        f"static_argnames=({name!r},), or close over it)"
    )
    if kind == "n":
        return f"{message}; to differentiate it, declare it `static: false` in the rule."
    return f"{message}; the rule cannot differentiate it."


def varying_axes(*arrays: Any) -> tuple[str, ...]:
    """The manual mesh axes (of `shard_map`) along which any of `arrays` varies; () outside one."""
    axes = set()
    for leaf in jax.tree.leaves(arrays):
        aval = jax.typeof(leaf)
        mat = getattr(aval, "manual_axis_type", None)  # JAX 0.10; earlier, `vma`
        axes |= set(mat.varying) if mat is not None else set(getattr(aval, "vma", ()))
    return tuple(sorted(axes))


def varying_like(results: Any, *arrays: Any) -> Any:
    """`results` of a host callback, typed as varying along the mesh axes that `arrays` vary along.

    Under `shard_map`, JAX types a callback's results as the same on every
    shard; a host rule computes them from its shard, so they vary as its
    inputs do, and its derivatives must have the inputs' types.
    """
    axes = varying_axes(*arrays)
    if not axes:
        return results

    def cast(result: jax.Array) -> jax.Array:
        missing = tuple(a for a in axes if a not in varying_axes(result))
        if not missing:
            return result
        if hasattr(jax.lax, "pcast"):
            return jax.lax.pcast(result, missing, to="varying")
        return jax.lax.pvary(result, missing)  # type: ignore[attr-defined]  # before JAX 0.7

    return jax.tree.map(cast, results)


def no_tangent(output: ArrayLike) -> Any:
    """The tangent of an integer or boolean output: float0 zeros, of the output's type.

    Under `shard_map` that type names the mesh axes the output varies
    along, which a bare NumPy float0 array does not: JAX refused the
    differentiated rule ("primal int32[2]{V:i} with tangent float0[2]").
    """
    return varying_like(np.zeros(jnp.shape(output), dtype=jax.dtypes.float0), output)


_LOW_PRECISION = (jnp.bfloat16, jnp.float16)


def in_float32(*arrays: Any) -> tuple[tuple[Any, ...], Any]:
    """bfloat16 and float16 arrays in float32, and the dtype to round results to (None: keep them).

    XLA computes each operation of these dtypes in them, rounding every
    step; in float32, each result of the rule is rounded once.
    """
    # A snippet rule may take a pytree (a tuple of arrays) for an array input: it is left as it is.
    dtypes = [a.dtype for a in arrays if hasattr(a, "dtype")]
    low = jnp.result_type(*dtypes) if dtypes else None
    if low not in _LOW_PRECISION:
        return arrays, None
    return tuple(_lifted(a) for a in arrays), low


def _lifted(array: Any) -> Any:
    return array.astype(jnp.float32) if getattr(array, "dtype", None) in _LOW_PRECISION else array


def rounded(low: Any, *results: Any) -> Any:
    """`results`, each float one rounded to `low` (None: as they are); one result bare."""
    if low is not None:
        results = tuple(
            r.astype(low) if jnp.issubdtype(getattr(r, "dtype", int), jnp.floating) else r
            for r in results
        )
    return results[0] if len(results) == 1 else results
