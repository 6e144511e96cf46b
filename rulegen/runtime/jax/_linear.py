"""A map linear in some of its arguments that carries its own transpose.

A rule that gives both a JVP and a VJP body wants each used for its own mode.
A `custom_jvp` carries only the JVP (reverse mode would transpose it), and
`jax.custom_derivatives.linear_call`, which pairs a linear function with a
transpose, has no batching rule, so `vmap` and `jacfwd` over it fail.  This
primitive pairs them with every rule a transform needs: evaluation and
lowering run `apply`, transposition runs `transpose` (the rule's VJP body),
batching binds the primitive again with one more level of `vmap` recorded
(so the VJP body stays in use under `vmap`), and its JVP differentiates
`apply` in the known arguments while staying linear in the others.
"""

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from . import _private

with _private.guarded(jax):
    from jax.extend.core import Primitive
    from jax.interpreters import ad, mlir
    from jax.interpreters import batching as jax_batching
_private.require(jax, ad, "Zero", "instantiate_zeros", "is_undefined_primal")

linear_map_p = Primitive("rulegen_linear_map")
linear_map_p.multiple_results = True


def linear_map(
    apply: Callable[..., Any],
    transpose: Callable[..., Any],
    known: Sequence[Any],
    linear: Sequence[Any],
    statics: Any = (),
) -> Any:
    """`apply(*statics, *known, *linear)`, linear in `linear`, whose transpose is `transpose`.

    `transpose(*statics, *known, *cotangents)` returns one cotangent per
    element of `linear`; both return tuples.
    """
    return linear_map_p.bind(
        *known,
        *linear,
        apply=apply,
        transpose=transpose,
        statics=tuple(statics),
        n_known=len(known),
        axes=(),
    )


def _vmapped(
    fn: Callable[..., Any], axes: tuple[tuple[int | None, ...], ...]
) -> Callable[..., Any]:
    """`fn` under one `vmap` per recorded level, innermost first, every result at axis 0."""
    for level in axes:
        fn = jax.vmap(fn, in_axes=level, out_axes=0)
    return fn


def _impl(
    *operands: Any,
    apply: Callable[..., Any],
    transpose: Callable[..., Any],
    statics: Any,
    n_known: int,
    axes: tuple[tuple[int | None, ...], ...],
) -> Any:
    return tuple(_vmapped(lambda *args: apply(*statics, *args), axes)(*operands))


def _abstract(*avals: Any, **params: Any) -> Any:
    # Traced rather than built from shapes and dtypes: the results' types keep
    # what the arguments' carry beyond those (the varying axes of shard_map).
    return jax.make_jaxpr(functools.partial(_impl, **params))(*avals).out_avals


def _jvp_rule(
    primals: Any,
    tangents: Any,
    *,
    apply: Callable[..., Any],
    transpose: Callable[..., Any],
    statics: Any,
    n_known: int,
    axes: tuple[tuple[int | None, ...], ...],
) -> tuple[Any, list[Any]]:
    params = dict(apply=apply, transpose=transpose, statics=statics, n_known=n_known, axes=axes)
    results = linear_map_p.bind(*primals, **params)
    known, linear = primals[:n_known], primals[n_known:]
    known_dots, linear_dots = tangents[:n_known], tangents[n_known:]
    out_dots = None
    if any(type(t) is not ad.Zero for t in linear_dots):
        # Linear in `linear`: its tangent is the map itself, which keeps the
        # custom transpose in force at the next order.
        linear_dots = [ad.instantiate_zeros(t) for t in linear_dots]
        out_dots = list(linear_map_p.bind(*known, *linear_dots, **params))
    if any(type(t) is not ad.Zero for t in known_dots):
        known_dots = [ad.instantiate_zeros(t) for t in known_dots]
        _, through_known = jax.jvp(
            lambda *values: _impl(*values, *linear, **params), tuple(known), tuple(known_dots)
        )
        out_dots = (
            through_known
            if out_dots is None
            else [a + b for a, b in zip(out_dots, through_known, strict=True)]
        )
    if out_dots is None:
        out_dots = [ad.Zero(jax.typeof(r).to_tangent_aval()) for r in results]
    return results, list(out_dots)


def _transpose_rule(
    cotangents: Any,
    *operands: Any,
    apply: Callable[..., Any],
    transpose: Callable[..., Any],
    statics: Any,
    n_known: int,
    axes: tuple[tuple[int | None, ...], ...],
) -> list[Any]:
    known, linear = operands[:n_known], operands[n_known:]
    if any(ad.is_undefined_primal(k) for k in known):
        raise TypeError("linear_map is linear only in its `linear` arguments")
    cotangents = [ad.instantiate_zeros(c) for c in cotangents]

    def base(*args: Any) -> tuple[Any, ...]:
        return tuple(transpose(*statics, *args))

    fn = base
    for level in axes:
        fn = _transpose_level(fn, level[:n_known], level[n_known:])
    found = fn(*known, *cotangents)
    return [None] * n_known + [
        f if ad.is_undefined_primal(x) else None for f, x in zip(found, linear, strict=True)
    ]


def _transpose_level(
    fn: Callable[..., Any], known_axes: Sequence[int | None], linear_axes: Sequence[int | None]
) -> Callable[..., tuple[Any, ...]]:
    """One `vmap` level of the transpose: cotangents are batched; a linear
    argument that was not batched at this level gets the sum over the batch."""

    def level(*args: Any) -> tuple[Any, ...]:
        n_cotangents = len(args) - len(known_axes)
        found = jax.vmap(fn, in_axes=(*known_axes, *([0] * n_cotangents)), out_axes=0)(*args)
        return tuple(
            f if a is not None else f.sum(0) for f, a in zip(found, linear_axes, strict=True)
        )

    return level


def _batch_rule(
    operands: Any,
    dims: Sequence[int | None],
    *,
    apply: Callable[..., Any],
    transpose: Callable[..., Any],
    statics: Any,
    n_known: int,
    axes: tuple[tuple[int | None, ...], ...],
) -> tuple[Any, list[int]]:
    moved = [x if d is None else jnp.moveaxis(x, d, 0) for x, d in zip(operands, dims, strict=True)]
    level = tuple(None if d is None else 0 for d in dims)
    results = linear_map_p.bind(
        *moved,
        apply=apply,
        transpose=transpose,
        statics=statics,
        n_known=n_known,
        axes=(*axes, level),
    )
    return results, [0] * len(results)


linear_map_p.def_impl(_impl)
linear_map_p.def_abstract_eval(_abstract)
with _private.guarded(jax):
    mlir.register_lowering(linear_map_p, mlir.lower_fun(_impl, multiple_results=True))
    ad.primitive_jvps[linear_map_p] = _jvp_rule
    ad.primitive_transposes[linear_map_p] = _transpose_rule
    jax_batching.primitive_batchers[linear_map_p] = _batch_rule
