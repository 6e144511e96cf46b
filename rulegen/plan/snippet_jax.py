"""The JAX module of a snippet rule, by its route (rulegen.routes)."""

from __future__ import annotations

from rulegen.plan.header import array_arguments, doc_lines, header_of, jax_util_imports, params_of, returns_of
from rulegen.plan.model import Function, SnippetPlan
from rulegen.plan.snippet import SnippetPlanner, body_call, packed, str_tuple_literal, tuple_literal, tuple_text
from rulegen.routes import JaxRoute
from rulegen.snippet import SnippetDerivation


def plan_jax_snippet(d: SnippetDerivation) -> SnippetPlan:
    """The JAX module of a snippet rule, by the route the derivation chose."""
    p = SnippetPlanner(d, "jax")
    rule = d.rule
    imports = p.imports
    imports.add("import jax")  # every route annotates with jax.Array
    header = header_of(d)
    params = params_of(rule.inputs, "jax")
    result_type = returns_of(rule, "jax")
    all_args = ", ".join(p.inputs)
    nondiff = tuple(k for k, i in enumerate(rule.inputs) if i.static)
    assignments: list[str] = []
    methods: list[Function] = []
    tail: list[str] = []
    decorator = ""
    route = d.routes.jax
    refusal = array_arguments(rule, "as_arrays")
    prologue = (*doc_lines(header), *([refusal] if refusal else []))

    if route == JaxRoute.BRIDGE:
        imports.add("from ._bridge import TorchBridge")
        arrays = [i.name for i in rule.inputs if not i.static]
        closure = f"lambda {', '.join(arrays)}: _torch_{rule.name}({all_args})"
        assignments.append(f"_bridge = TorchBridge({rule.name!r}, depth={rule.depth})")
        lines = [
            # Here, not at the top: importing the JAX package must not import torch.
            f"from ..torch.{rule.name} import {rule.name} as _torch_{rule.name}",
            "",
            f"return _bridge({closure}, {', '.join(arrays)})",
        ]
        return SnippetPlan(
            header=header,
            name=rule.name,
            imports=jax_util_imports(imports, rule),
            bodies=(),
            assignments=tuple(assignments),
            public=Function(rule.name, tuple(map(str, params)), (*prologue, *lines), returns=result_type),
            methods=(),
            tail=(),
        )

    if route == JaxRoute.PRIMITIVE:
        imports.add("from ._host import HostRule")
        outputs = ", ".join(f"({o.name!r}, {o.dtype!r})" for o in rule.outputs)
        fields = [
            f"{rule.name!r}",
            "_forward",
            f"arrays={str_tuple_literal(p.arrays)}",
            f"statics={str_tuple_literal(p.statics)}",
            f"outputs=({outputs},)",
        ]
        if p.returned:
            fields.append(f"residuals={str_tuple_literal(p.returned)}")
        fields += [
            f"diff_inputs={str_tuple_literal(p.diff_inputs)}",
            f"diff_outputs={str_tuple_literal(p.diff_outputs)}",
        ]
        if d.jvp is not None:
            fields.append("jvp=_jvp")
        if d.vjp is not None:
            fields.append("vjp=_vjp")
        fields.append(f"batching={rule.batching!r}")
        assignments.append(f"_{rule.name}_rule = HostRule(\n    " + ",\n    ".join(fields) + ",\n)")
        statics = ", ".join(f"{s}={s}" for s in p.statics)
        call = f"_{rule.name}_rule({', '.join([*p.arrays, *([statics] if statics else [])])})"
        results = [*p.outputs, *(f"_{r}" for r in p.returned)]
        lines = [f"{tuple_text(results)}{',' if len(results) == 1 else ''} = {call}", f"return {tuple_text(p.outputs)}"]
        return SnippetPlan(
            header=header,
            name=rule.name,
            imports=jax_util_imports(imports, rule),
            bodies=p.bodies,
            called=p.called,
            assignments=tuple(assignments),
            public=Function(rule.name, tuple(map(str, params)), (*prologue, *lines), returns=result_type),
            methods=(),
            tail=(),
        )

    forward = p.code("forward")
    assert forward is not None
    if p.returned:
        primal_lines = [f"{p.forward_targets()} = {body_call(forward)}", f"return {tuple_text(p.outputs)}"]
    else:
        primal_lines = [f"return {body_call(forward)}"]
    if route in (JaxRoute.CUSTOM_JVP, JaxRoute.CUSTOM_VJP, JaxRoute.TRANSPOSE, JaxRoute.LINEAR_MAP):
        kind = "custom_vjp" if route == JaxRoute.CUSTOM_VJP else "custom_jvp"
        decorator = f"@functools.partial(jax.{kind}, nondiff_argnums={nondiff})" if nondiff else f"@jax.{kind}"
        if nondiff:
            imports.add("import functools")

    if route in (JaxRoute.CUSTOM_JVP, JaxRoute.TRANSPOSE, JaxRoute.LINEAR_MAP):
        lines = [f"{tuple_text(p.arrays)}{',' if len(p.arrays) == 1 else ''} = primals"]
        tangent_names = [f"{a}_dot" if a in p.diff_inputs else "_" for a in p.arrays]
        lines.append(f"{tuple_text(tangent_names)}{',' if len(p.arrays) == 1 else ''} = tangents")
        lines.append(f"{tuple_text(p.outputs)} = {rule.name}({all_args})")
        bodies = {JaxRoute.CUSTOM_JVP: ["jvp"], JaxRoute.TRANSPOSE: ["vjp"], JaxRoute.LINEAR_MAP: ["jvp", "vjp"]}
        needed = p.reads(*bodies[route])
        lines += p.residual_lines(needed, forward_call=True)
        dots = [f"{o}_dot" for o in p.diff_outputs]
        if route == JaxRoute.CUSTOM_JVP:
            lines.append(f"{tuple_text(dots)} = {body_call(p.code('jvp'))}")  # type: ignore[arg-type]
        else:
            maps, call = _linear_maps(p)
            methods += maps
            lines.append(f"{tuple_text(dots)}, = {call}")
        out_tangents = []
        for o in rule.outputs:
            if o.differentiable:
                out_tangents.append(f"{o.name}_dot")
            elif o.dtype == "float":
                imports.add("import jax.numpy as jnp")
                out_tangents.append(f"jnp.zeros_like({o.name})")
            else:
                imports.add("import numpy as np")
                imports.add("import jax.numpy as jnp")
                out_tangents.append(f"np.zeros(jnp.shape({o.name}), dtype=jax.dtypes.float0)")
        lines.append(f"return {packed(p.outputs)}, {packed(out_tangents)}")
        methods.append(
            Function(
                f"_{rule.name}_jvp", (*p.statics, "primals", "tangents"), tuple(lines), decorator=f"@{rule.name}.defjvp"
            )
        )
    elif route == JaxRoute.CUSTOM_VJP:
        vjp = p.code("vjp")
        assert vjp is not None
        needed = p.reads("vjp")
        # The primal function, not the body, so that the rule holds when
        # this fwd is itself differentiated (higher order).
        fwd = [f"{tuple_text(p.outputs)} = {rule.name}({all_args})"]
        fwd += p.residual_lines(needed, forward_call=True)
        saved = [n for n in (*p.arrays, *p.outputs, *p.returned, *(n for n, _ in d.residuals)) if n in needed]
        if p.broadcastable:
            saved += [i for i in p.diff_inputs if i not in saved]
        fwd.append(f"return {packed(p.outputs)}, ({tuple_text(saved)}{',' if len(saved) == 1 else ''})")
        bars = [f"{o}_bar" if o in p.diff_outputs else "_" for o in p.outputs]
        bwd = []
        if saved:
            bwd.append(f"{tuple_text(saved)}{',' if len(saved) == 1 else ''} = saved")
        cotangent_param = bars[0] if len(bars) == 1 else "cotangents"
        if len(bars) > 1:
            bwd.append(f"{tuple_text(bars)} = cotangents")
        results = [f"{i}_bar" for i in p.diff_inputs]
        bwd.append(f"{tuple_text(results)} = {body_call(vjp)}")
        returns = []
        for i in rule.inputs:
            if i.static:
                continue
            if i.name not in p.diff_inputs:
                returns.append("None")
            elif p.broadcastable:
                imports.add("from ._util import unbroadcast")
                returns.append(f"unbroadcast({i.name}_bar, {i.name})")
            else:
                returns.append(f"{i.name}_bar")
        bwd.append(f"return ({tuple_text(returns)}{',' if len(returns) == 1 else ''})")
        methods.append(Function(f"_{rule.name}_fwd", p.inputs, tuple(fwd)))
        methods.append(Function(f"_{rule.name}_bwd", (*p.statics, "saved", cotangent_param), tuple(bwd)))
        tail.append(f"{rule.name}.defvjp(_{rule.name}_fwd, _{rule.name}_bwd)")

    return SnippetPlan(
        header=header,
        name=rule.name,
        imports=jax_util_imports(imports, rule),
        bodies=p.bodies,
        called=p.called,
        assignments=tuple(assignments),
        public=Function(
            rule.name, tuple(map(str, params)), (*prologue, *primal_lines), decorator=decorator, returns=result_type
        ),
        methods=tuple(methods),
        tail=tuple(tail),
    )


def _linear_maps(p: SnippetPlanner) -> tuple[list[Function], str]:
    """The JVP and VJP bodies as the two halves of a `linear_map`, and the call that applies it.

    Both take the statics and the known values (inputs, outputs, residuals)
    they read first, then the tangents, or the cotangents.
    """
    jvp, vjp = p.code("jvp"), p.code("vjp")
    assert vjp is not None
    p.imports.add("from ._linear import linear_map")
    # Without a JVP body, forward mode is the VJP body's linear transpose,
    # which takes the differentiable outputs for the cotangents' shapes.
    read = set(jvp.params) if jvp is not None else set(p.diff_outputs)
    read |= set(vjp.params)
    statics = [s for s in p.statics if s in read]
    known = [n for n in (*p.arrays, *p.outputs, *p.returned, *(n for n, _ in p.d.residuals)) if n in read]
    if p.broadcastable:
        known += [i for i in p.diff_inputs if i not in known]
    dots = [f"{i}_dot" for i in p.diff_inputs]
    bars = [f"{o}_bar" for o in p.diff_outputs]
    results = [f"{i}_bar" for i in p.diff_inputs]
    if p.broadcastable:
        p.imports.add("from ._util import unbroadcast")
        returned = [f"unbroadcast({r}, {i})" for r, i in zip(results, p.diff_inputs, strict=True)]
    else:
        returned = results
    name = p.rule.name
    transpose = Function(
        f"_{name}_vjp_map",
        (*statics, *known, *bars),
        (f"{tuple_text(results)} = {body_call(vjp)}", f"return ({tuple_text(returned)},)"),
    )
    if jvp is not None:
        apply_lines: tuple[str, ...] = (f"return ({body_call(jvp)},)",)
    else:
        p.imports.add("import functools")
        apply_lines = (
            f"vjp = functools.partial({transpose.name}, {', '.join((*statics, *known))})",
            f"return jax.linear_transpose(vjp, {', '.join(p.diff_outputs)})(({tuple_text(dots)},))",
        )
    apply = Function(f"_{name}_jvp_map", (*statics, *known, *dots), apply_lines)
    args = [apply.name, transpose.name, tuple_literal(known), tuple_literal(dots)]
    if statics:
        args.append(tuple_literal(statics))
    return [apply, transpose], f"linear_map({', '.join(args)})"
