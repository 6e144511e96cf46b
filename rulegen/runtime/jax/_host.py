"""Rules whose forward runs on the host (NumPy), as JAX primitives.

`jax.pure_callback` has no derivative and no transpose, and a custom_jvp or
custom_vjp around it carries only one mode.  A primitive carries both: its
JVP rule is the rule's JVP body (reverse mode then transposes it), its
transpose rule is the VJP body (used when another rule's JVP applies this
rule to a tangent), and its batching rule binds the primitive again, so the
rule stays in force under `vmap` of `grad` and the rest.
"""

import contextlib
import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np

from . import _host_shapes, _private
from ._util import Callback, sum_to_shape, unbroadcast, value_key, varying_like

with _private.guarded(jax):
    from jax.extend.core import Primitive
    from jax.interpreters import ad, mlir
    from jax.interpreters import batching as jax_batching
_private.require(jax, ad, "Zero", "instantiate_zeros", "is_undefined_primal")

_RESULT_DTYPES = {"int": np.int64, "bool": np.bool_}


def _call(body: Callable[..., Any], scope: dict[str, Any]) -> Any:
    """Call `body` with the names it takes from `scope`."""
    return body(**{name: scope[name] for name in inspect.signature(body).parameters})


def _host_array(value: Any) -> np.ndarray:
    """A NumPy array for a host body: bfloat16 and float16 in float32, rounded back once after."""
    array = np.asarray(value)
    if array.dtype in (jnp.bfloat16, jnp.float16):
        return array.astype(np.float32)
    return array


def shaped(
    rule: str, output: str, value: Any, shape: Sequence[int], *, elementwise: bool
) -> np.ndarray:
    """A host body's `output` in the `shape` both backends give it (`_host_shapes`)."""
    array = np.asarray(value)
    shape = tuple(shape)
    if _host_shapes.broadcast_needed(rule, output, array.shape, shape, elementwise=elementwise):
        return np.broadcast_to(array, shape)
    return array


def _as_tuple(value: Any, count: int) -> tuple[Any, ...]:
    return tuple(value) if count > 1 else (value,)


class HostRule:
    """One rule: a host forward, and the JVP / VJP bodies that give it derivatives."""

    def __init__(
        self,
        name: str,
        host: Callable[..., Any],
        *,
        arrays: Sequence[str],
        statics: Any,
        outputs: Sequence[tuple[str, str]],
        residuals: Sequence[str] = (),
        diff_inputs: Sequence[str] = (),
        diff_outputs: Sequence[str] = (),
        jvp: Callable[..., Any] | None = None,
        vjp: Callable[..., Any] | None = None,
        batching: str = "sequential",
    ) -> None:
        self.name = name
        self.host = host
        self.arrays = tuple(arrays)
        self.statics = tuple(statics)
        self.outputs = tuple(outputs)  # (name, dtype kind) for each output
        self.residuals = tuple(residuals)  # names the host returns after the outputs
        self.diff_inputs = tuple(diff_inputs)
        self.diff_outputs = tuple(diff_outputs)
        self.jvp = jvp
        self.vjp = vjp
        self.batching = batching
        self._probed: dict[Any, list[jax.ShapeDtypeStruct]] = {}
        self.primitive = Primitive(name)
        self.primitive.multiple_results = True
        self.primitive.def_impl(self._impl)
        self.primitive.def_abstract_eval(self._abstract)
        with _private.guarded(jax):
            lower = mlir.lower_fun(self._impl, multiple_results=True)
            mlir.register_lowering(self.primitive, lower)
            ad.primitive_jvps[self.primitive] = self._jvp_rule
            ad.primitive_transposes[self.primitive] = self._transpose_rule
            jax_batching.primitive_batchers[self.primitive] = self._batch_rule

    def __call__(self, /, *arrays: Any, **statics: Any) -> Any:
        """Every result (outputs, then residuals) for these arguments."""
        return self.primitive.bind(*arrays, statics=tuple(statics.items()))

    # ------------------------------------------------------------ evaluation

    def _host_results(self, arrays: Sequence[Any], statics: Any) -> tuple[Any, ...]:
        results = _call(self.host, {**dict(zip(self.arrays, arrays, strict=True)), **dict(statics)})
        return _as_tuple(results, len(self.outputs) + len(self.residuals))

    def _result_types(self, avals: Any, statics: Any) -> list[jax.ShapeDtypeStruct]:
        """Outputs take the first array's shape (the broadcast shape if elementwise)."""
        elementwise = self.batching == "elementwise"
        shape = jnp.broadcast_shapes(*(a.shape for a in avals)) if elementwise else avals[0].shape
        float_dtype = jnp.result_type(
            *(a.dtype for a in avals if jnp.issubdtype(a.dtype, jnp.floating)), float
        )
        types = [
            jax.ShapeDtypeStruct(
                shape, jax.dtypes.canonicalize_dtype(_RESULT_DTYPES.get(kind, float_dtype))
            )
            for _, kind in self.outputs
        ]
        if self.residuals:
            types.extend(self._residual_types(avals, statics))
        return types

    def _residual_types(self, avals: Any, statics: Any) -> list[jax.ShapeDtypeStruct]:
        """A residual's shape and dtype: what the host body makes of ones of these shapes.

        Found once per signature: every eager call asks again.
        """
        key = (tuple((a.shape, a.dtype) for a in avals), value_key(statics))
        try:
            return self._probed[key]
        except (KeyError, TypeError):
            pass
        with np.errstate(all="ignore"):
            probe = self._host_results([np.ones(a.shape, a.dtype) for a in avals], statics)
        found = [
            jax.ShapeDtypeStruct(np.shape(r), jax.dtypes.canonicalize_dtype(np.asarray(r).dtype))
            for r in probe[len(self.outputs) :]
        ]
        with contextlib.suppress(TypeError):
            self._probed[key] = found
        return found

    def _impl(self, *arrays: Any, statics: Any) -> Any:
        types = self._result_types([jax.typeof(a) for a in arrays], statics)
        signature = tuple((t.shape, t.dtype) for t in types)

        def host(*values: Any) -> tuple[np.ndarray, ...]:
            results = self._host_results([_host_array(v) for v in values], statics)
            outputs = [
                shaped(self.name, name, r, t.shape, elementwise=self.batching == "elementwise")
                for (name, _), r, t in zip(self.outputs, results, types, strict=False)
            ]
            residuals = [
                np.asarray(r).reshape(t.shape)
                for r, t in zip(results[len(outputs) :], types[len(outputs) :], strict=True)
            ]
            return tuple(
                np.asarray(r, dtype=t.dtype)
                for r, t in zip([*outputs, *residuals], types, strict=True)
            )

        callback = Callback(host, (self, value_key(statics), signature))
        results = jax.pure_callback(callback, tuple(types), *arrays, vmap_method="sequential")
        return varying_like(results, *arrays)

    def _abstract(self, *avals: Any, statics: Any) -> Any:
        # Traced rather than built: the results' types carry what the
        # arguments' do beyond shape and dtype (varying mesh axes).
        return jax.make_jaxpr(functools.partial(self._impl, statics=statics))(*avals).out_avals

    # ------------------------------------------------------------ derivatives

    def _scope(self, arrays: Sequence[Any], statics: Any, results: Sequence[Any]) -> dict[str, Any]:
        names = [n for n, _ in self.outputs] + list(self.residuals)
        return {
            **dict(zip(self.arrays, arrays, strict=True)),
            **dict(statics),
            **dict(zip(names, results, strict=True)),
        }

    def _jvp_rule(self, primals: Any, tangents: Any, *, statics: Any) -> tuple[Any, list[Any]]:
        results = self.primitive.bind(*primals, statics=statics)
        scope = self._scope(primals, statics, results)
        for name, tangent in zip(self.arrays, tangents, strict=True):
            if name in self.diff_inputs:
                scope[f"{name}_dot"] = ad.instantiate_zeros(tangent)
        if self.jvp is not None:
            found = dict(
                zip(
                    self.diff_outputs,
                    _as_tuple(_call(self.jvp, scope), len(self.diff_outputs)),
                    strict=True,
                )
            )
        else:
            found = self._transposed_vjp(scope)
        out_tangents: list[Any] = []
        for (name, _), value in zip(self.outputs, results, strict=False):
            if name not in found:
                out_tangents.append(ad.Zero(jax.typeof(value).to_tangent_aval()))
            else:
                # An elementwise output reading fewer arrays (`cos(x) * x_dot` for `sin(x)`)
                # has a tangent of fewer dimensions than the output's broadcast shape.
                out_tangents.append(jnp.broadcast_to(found[name], jnp.shape(value)))
        for value in results[len(self.outputs) :]:
            out_tangents.append(ad.Zero(jax.typeof(value).to_tangent_aval()))
        return results, out_tangents

    def _transposed_vjp(self, scope: dict[str, Any]) -> dict[str, Any]:
        """The JVP as the linear transpose of the VJP body."""
        outputs = dict(
            zip([n for n, _ in self.outputs], [scope[n] for n, _ in self.outputs], strict=True)
        )

        def vjp(*cotangents: Any) -> tuple[Any, ...]:
            inner = {
                **scope,
                **{f"{n}_bar": c for n, c in zip(self.diff_outputs, cotangents, strict=True)},
            }
            # Reached only for a rule without a JVP body, which has a VJP body.
            body = cast("Callable[..., Any]", self.vjp)
            found = _as_tuple(_call(body, inner), len(self.diff_inputs))
            # Summed back to each input's shape, which broadcast into the outputs'.
            return tuple(
                unbroadcast(g, scope[n]) for g, n in zip(found, self.diff_inputs, strict=True)
            )

        transpose = jax.linear_transpose(vjp, *[outputs[n] for n in self.diff_outputs])
        found = transpose(tuple(scope[f"{n}_dot"] for n in self.diff_inputs))
        return dict(zip(self.diff_outputs, found, strict=True))

    def _transpose_rule(self, cotangents: Any, *arrays: Any, statics: Any) -> list[Any]:
        # Reached when another rule's JVP applies this rule to a tangent: the
        # rule is then linear in that argument, and its VJP is its transpose.
        if self.vjp is None:
            raise TypeError(f"{self.name} has no VJP body to transpose it with")
        linear = [n for n, a in zip(self.arrays, arrays, strict=True) if ad.is_undefined_primal(a)]
        if any(n not in self.diff_inputs for n in linear):
            raise TypeError(f"{self.name} is not linear in {linear}")
        known = [None if ad.is_undefined_primal(a) else a for a in arrays]
        scope = {
            **{n: a for n, a in zip(self.arrays, known, strict=True) if a is not None},
            **dict(statics),
        }
        for (name, _), cotangent in zip(self.outputs, cotangents, strict=False):
            if name in self.diff_outputs:
                scope[f"{name}_bar"] = ad.instantiate_zeros(cotangent)
        found = dict(
            zip(
                self.diff_inputs,
                _as_tuple(_call(self.vjp, scope), len(self.diff_inputs)),
                strict=True,
            )
        )
        return [
            sum_to_shape(found[n], a.aval.shape) if ad.is_undefined_primal(a) else None
            for n, a in zip(self.arrays, arrays, strict=True)
        ]

    # ------------------------------------------------------------ batching

    def _batch_rule(
        self, arrays: Sequence[Any], dims: Sequence[int | None], *, statics: Any
    ) -> tuple[list[Any], list[int]]:
        moved = [
            a if d is None else jnp.moveaxis(a, d, 0) for a, d in zip(arrays, dims, strict=True)
        ]
        if self.batching == "elementwise":
            # Align ranks so that the batch axis broadcasts against unbatched arrays.
            rank = max(a.ndim - (d is not None) for a, d in zip(arrays, dims, strict=True))
            aligned = []
            for a, d in zip(moved, dims, strict=True):
                if d is not None:
                    a = a.reshape(a.shape[:1] + (1,) * (rank + 1 - a.ndim) + a.shape[1:])
                aligned.append(a)
            results = self.primitive.bind(*aligned, statics=statics)
            return results, [0] * len(results)
        batched = [k for k, d in enumerate(dims) if d is not None]

        def one(sliced: Any) -> tuple[Any, ...]:
            args = list(moved)
            for k, value in zip(batched, sliced, strict=True):
                args[k] = value
            return tuple(self.primitive.bind(*args, statics=statics))

        results = jax.lax.map(one, [moved[k] for k in batched])
        return list(results), [0] * len(results)
