"""The JAX module of a symbolic rule: a custom_jvp (with a linear_map for a given VJP), or a custom_vjp."""

from __future__ import annotations

import functools
from collections.abc import Mapping

import sympy as sp

from rulegen.derive import Derivation
from rulegen.forms import float_anchors, float_forms, integral_arrays, jax_forms
from rulegen.lines import Assign, Block
from rulegen.plan.emit import Emitter
from rulegen.plan.header import SUM_TO_SHAPE, array_arguments, header_of, params_of, returns_of
from rulegen.plan.model import Function, JaxPlan, Result
from rulegen.plan.snippet import tuple_literal
from rulegen.plan.symbolic import (
    broadcast_outputs,
    compose,
    dtype_casts,
    linear_combination,
    mentioned,
    names_in,
    needs_broadcast,
    with_fused_forms,
)
from rulegen.printers import print_jax
from rulegen.routes import JaxRoute

_JNP = frozenset({"import jax.numpy as jnp"})


def plan_jax(d: Derivation) -> JaxPlan:
    """What the JAX module of a rule computes: a custom_jvp, or a custom_vjp."""
    d = with_fused_forms(d)
    rule = d.rule
    every = [e for _, e in (*d.forward, *d.residuals)]
    every += [*d.jvp_partials.values(), *d.vjp_partials.values(), *d.residual_partials.values()]
    booleans = frozenset(i.name for i in rule.inputs if not i.static and i.dtype == "bool")
    statics = frozenset(i.name for i in rule.inputs if i.static)
    printer = functools.partial(print_jax, booleans=booleans)
    in_float = float_forms(
        float_anchors(rule, d.symbols), integral_arrays(rule, d.symbols), tensor_only=False, scalars=statics
    )
    shared_exp = jax_forms(every, (i.name for i in rule.inputs if i.static))
    emit = Emitter(printer, d.symbols, lambda e: shared_exp(in_float(e)), statics)
    arrays = tuple(i.name for i in rule.inputs if not i.static)
    outputs = tuple(o.name for o in rule.outputs)
    diff_inputs = [i.name for i in d.diff_inputs]
    residuals = dict(d.residuals)
    shapes = ", ".join(f"jnp.shape({a})" for a in arrays)
    full_shape = f"jnp.broadcast_shapes({shapes})" if len(arrays) > 1 else shapes
    wraps = broadcast_outputs(d, f"jnp.broadcast_to({{}}, {full_shape})")
    for n, cast in dtype_casts(rule, {"int": "{}.astype(int)", "bool": "{}.astype(bool)"}).items():
        wraps[n] = compose(cast, wraps.get(n, "{}"))
    forward = emit.block(
        [], [Result(n, e, wrap=wraps[n], imports=_JNP) if n in wraps else Result(n, e) for n, e in d.forward]
    )
    broadcastable = len(arrays) > 1

    jvp = bwd = None
    summed = False
    maps: tuple[Function, ...] = ()
    tangents: tuple[str, ...] = ()
    cotangents: tuple[str, ...] = ()
    saved: tuple[str, ...] = ()
    if d.routes.jax != JaxRoute.CUSTOM_VJP:
        tangents = tuple(f"{n}_dot" if n in diff_inputs else "_" for n in arrays)
        results = []
        for o in rule.outputs:
            name = f"{o.name}_dot"
            expr = linear_combination(d, d.jvp_partials, o.name, diff_inputs, "_dot")
            if not o.differentiable and o.dtype != "float":
                results.append(
                    Result(
                        name,
                        code=f"np.zeros(jnp.shape({o.name}), dtype=jax.dtypes.float0)",
                        imports=_JNP | {"import numpy as np"},
                    )
                )
            elif not o.differentiable or expr == 0:
                results.append(Result(name, code=f"jnp.zeros_like({o.name})", imports=_JNP))
            elif needs_broadcast(d, expr):
                wrap = f"jnp.broadcast_to({{}}, jnp.shape({o.name}))"
                results.append(Result(name, expr, wrap=wrap, imports=_JNP))
            else:
                results.append(Result(name, expr))
        applying: tuple[Assign, ...] = ()
        if rule.jvp is not None and rule.vjp is not None:
            maps, application, results = _given_linear_maps(d, emit, residuals, results, summed_wrap=broadcastable)
            applying, summed = (application,), broadcastable
        used = names_in(r.expr for r in results if r.expr is not None)
        jvp = emit.block([(n, e) for n, e in residuals.items() if n in used], results)
        jvp = Block((*applying, *jvp.lines), jvp.results)
    else:
        cotangents = tuple(f"{n}_bar" for n in outputs)
        results = []
        for i in rule.inputs:
            if i.static:
                continue
            expr = linear_combination(d, d.vjp_partials, i.name, outputs, "_bar", transpose=True)
            if not i.differentiable or expr == 0:
                code = f"jnp.zeros_like({i.name})" if i.dtype == "float" else "None"
                results.append(Result(f"{i.name}_bar", code=code, imports=_JNP if i.dtype == "float" else frozenset()))
            elif broadcastable:
                wrap = f"_sum_to_shape({{}}, jnp.shape({i.name}))"
                results.append(Result(f"{i.name}_bar", expr, wrap=wrap, imports=_JNP))
                summed = True
            else:
                results.append(Result(f"{i.name}_bar", expr))
        used = names_in(r.expr for r in results if r.expr is not None)
        lets = [(n, e) for n, e in residuals.items() if n in used]
        used |= names_in(e for _, e in lets)
        bwd = emit.block(lets, results)
        used |= set(mentioned(arrays, [bwd.result]))
        saved = tuple(n for n in (*arrays, *outputs) if n in used)

    imports = {"import jax", *emit.imports}
    if any(i.static for i in rule.inputs):
        imports.add("import functools")
    return JaxPlan(
        header=header_of(d),
        name=rule.name,
        params=params_of(rule.inputs, "jax"),
        returns=returns_of(rule, "jax"),
        nondiff_argnums=tuple(k for k, i in enumerate(rule.inputs) if i.static),
        statics=tuple(i.name for i in rule.inputs if i.static),
        arrays=arrays,
        custom="custom_vjp" if d.routes.jax == JaxRoute.CUSTOM_VJP else "custom_jvp",
        forward=forward,
        tangents=tangents,
        primal_call=f"{rule.name}({', '.join(i.name for i in rule.inputs)})",
        outputs=outputs,
        jvp=jvp,
        saved=saved,
        cotangents=cotangents,
        bwd=bwd,
        imports=tuple(sorted(imports)),
        util_names=tuple(n for n, used in (("as_arrays", bool(arrays)), (SUM_TO_SHAPE, summed)) if used),
        array_arguments=array_arguments(rule, "as_arrays"),
        maps=maps,
    )


def _given_linear_maps(
    d: Derivation,
    emit: Emitter,
    residuals: Mapping[str, sp.Expr],
    results: list[Result],
    *,
    summed_wrap: bool,
) -> tuple[tuple[Function, ...], Assign, list[Result]]:
    """A rule's own JVP and VJP as the two halves of one `linear_map`, the line applying it, and the JVP's results.

    A `custom_jvp` alone would get reverse mode by transposing the JVP, and
    a VJP the rule gives, which may differ (at a kink, say), would go
    unused; torch uses both, so JAX must too.  `results` are the JVP's
    results as a plain `custom_jvp` would compute them: the differentiable
    outputs' are replaced by the map's.
    """
    rule = d.rule
    name = rule.name
    statics = [i.name for i in rule.inputs if i.static]
    known = [*(i.name for i in rule.inputs if not i.static), *(o.name for o in rule.outputs)]
    diff_inputs = [i.name for i in d.diff_inputs]
    diff_outputs = [o.name for o in rule.outputs if o.differentiable]
    dots, bars = [f"{i}_dot" for i in diff_inputs], [f"{o}_bar" for o in diff_outputs]

    def half(kind: str, computed: list[Result], linear: list[str]) -> Function:
        used = names_in(r.expr for r in computed if r.expr is not None)
        block = emit.block([(n, e) for n, e in residuals.items() if n in used], computed)
        lines = [a.line for a in block.lines] + [f"return ({block.result},)"]
        return Function(f"_{name}_{kind}_map", (*statics, *known, *linear), tuple(lines))

    applied = [r for r in results if r.name.removesuffix("_dot") in diff_outputs]
    transposed = []
    for i in diff_inputs:
        expr = linear_combination(d, d.vjp_partials, i, diff_outputs, "_bar", transpose=True)
        if expr == 0:
            transposed.append(Result(f"{i}_bar", code=f"jnp.zeros_like({i})", imports=_JNP))
        elif summed_wrap:
            transposed.append(Result(f"{i}_bar", expr, wrap=f"_sum_to_shape({{}}, jnp.shape({i}))", imports=_JNP))
        else:
            transposed.append(Result(f"{i}_bar", expr))
    maps = (half("jvp", applied, dots), half("vjp", transposed, bars))
    emit.imports.add("from ._linear import linear_map")
    targets = ", ".join(f"{o}_dot" for o in diff_outputs) + ","
    packed = [tuple_literal(known), tuple_literal(dots), *([f"statics={tuple_literal(statics)}"] if statics else [])]
    call = f"linear_map({maps[0].name}, {maps[1].name}, {', '.join(packed)})"
    kept = [Result(r.name, code=r.name) if r in applied else r for r in results]
    return maps, Assign(targets, call), kept
