"""The JAX module of a snippet rule: one planner per route (rulegen.derive.routes)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from rulegen.derive.routes import JaxRoute
from rulegen.derive.snippet import SnippetDerivation
from rulegen.plan.code import (
    Assign,
    Def,
    Expr,
    Import,
    Imported,
    Return,
    Statement,
    fits_a_line,
    unpacked_pairs,
    unpacking,
)
from rulegen.plan.header import (
    LIFT_IMPORT,
    NAMED_TUPLE_IMPORT,
    array_arguments,
    doc_lines,
    header_of,
    jax_array_arguments,
    jax_util_imports,
    parameters_of,
    public_return,
    result_classes,
    returns_of,
    static_check,
    unpacked,
)
from rulegen.plan.model import SnippetPlan
from rulegen.plan.snippet import (
    SnippetPlanner,
    packed,
    snippet_definitions,
    str_tuple_literal,
    tuple_literal,
    tuple_text,
)
from rulegen.spec.names import (
    bridged,
    cotangent,
    hidden,
    host_rule,
    jvp_rule,
    linear_map_half,
    tangent,
    vjp_halves,
)


def plan_jax_snippet(d: SnippetDerivation) -> SnippetPlan:
    """The JAX module of a snippet rule, by the route the derivation chose."""
    p = SnippetPlanner(d, "jax")
    p.imports.add(Import("jax"))  # every route annotates with jax.Array
    return _PLANNERS[d.routes.jax](p)


def _module(
    p: SnippetPlanner,
    lines: Sequence[Statement],
    *,
    bodies: bool = True,
    decorator: str = "",
    assignments: Sequence[Statement] = (),
    methods: Sequence[Def] = (),
    tail: Sequence[Statement] = (),
    requires: Sequence[str] = (),
) -> SnippetPlan:
    """The module: the bodies, then the public function running `lines` after its docstring and argument check.

    Where the bodies compute (all routes but the bridge, whose torch function
    lifts for itself), `lines` become the private `_name` and the public
    function lifts bfloat16 and float16 to float32 around it (`_lifted`).
    """
    rule = p.rule
    header = header_of(p.d, "jax")
    prologue: tuple[Statement, ...] = (
        *doc_lines(header),
        *unpacked(rule),
        *static_check(rule),
        *(jax_array_arguments(rule) if bodies else array_arguments(rule, "as_arrays")),
    )
    params = tuple(map(str, parameters_of(rule, "jax")))
    if bodies:
        private = Def(hidden(rule.name), p.inputs, tuple(lines), (decorator,) if decorator else ())
        methods, lines, decorator = (private, *methods), _lifted(p), ""
    classes = result_classes(rule, "jax")
    if classes:
        p.imports.add(NAMED_TUPLE_IMPORT)
    plan = SnippetPlan(
        header=header,
        name=rule.name,
        imports=jax_util_imports(p.imports, rule, lift=bodies),
        bodies=p.bodies if bodies else (),
        called=p.called if bodies else (),
        assignments=tuple(assignments),
        public=Def(
            rule.name,
            params,
            (*prologue, *lines),
            (decorator,) if decorator else (),
            returns=returns_of(rule, "jax"),
        ),
        methods=tuple(methods),
        tail=tuple(tail),
        requires=tuple(sorted({*(p.requires if bodies else ()), *requires})),
        apis=p.apis if bodies else (),
        result_classes=classes,
    )
    return replace(plan, definitions=snippet_definitions(plan))


def _lifted(p: SnippetPlanner) -> list[Statement]:
    """The public function's body around the private one: bfloat16 and float16 computed in float32, rounded once."""
    floats = [i.name for i in p.rule.inputs if not i.static and i.dtype == "float"]
    call = f"{hidden(p.rule.name)}({', '.join(p.inputs)})"
    returning = public_return(p.rule, call, lifted=bool(floats), spread=len(p.outputs) > 1)
    if not floats:
        return list(returning)
    p.imports |= LIFT_IMPORT
    return list(returning)


def _bridge(p: SnippetPlanner) -> SnippetPlan:
    """A torch-only rule: the torch function run through callbacks (rulegen/runtime/jax/_bridge.py)."""
    rule = p.rule
    p.imports.add(Import("._bridge", "TorchBridge"))
    closure = f"lambda {', '.join(p.arrays)}: {bridged(rule.name)}({', '.join(p.inputs)})"
    lines: list[Statement] = [
        # Here, not at the top: importing the JAX package must not import torch.
        Imported((Import(f"..torch.{rule.name}", rule.name, bridged(rule.name)),)),
        Return(f"_bridge({closure}, {', '.join(p.arrays)})"),
    ]
    assignments = [Assign("_bridge", f"{p.own['TorchBridge']}({rule.name!r}, depth={rule.depth})")]
    return _module(p, lines, bodies=False, assignments=assignments, requires=["torch"])


def _primitive(p: SnippetPlanner) -> SnippetPlan:
    """A host (`numpy:`) rule: a JAX primitive whose rules call the bodies (rulegen/runtime/jax/_host.py)."""
    rule = p.rule
    p.imports.add(Import("._host", "HostRule"))
    outputs = ", ".join(f"({o.name!r}, {o.dtype!r})" for o in rule.outputs)
    fields = [
        f"{rule.name!r}",
        p.reference(p.given("forward")),
        f"arrays={str_tuple_literal(p.arrays)}",
        f"statics={str_tuple_literal(p.statics)}",
        f"outputs=({outputs},)",
    ]
    if p.returned:
        fields.append(f"residuals={str_tuple_literal(p.returned)}")
    fields += [f"diff_inputs={str_tuple_literal(p.diff_inputs)}", f"diff_outputs={str_tuple_literal(p.diff_outputs)}"]
    fields += [f"{role}={p.reference(p.given(role))}" for role in ("jvp", "vjp") if p.code(role) is not None]
    fields.append(f"batching={rule.batching!r}")
    assignment = Assign(host_rule(rule.name), f"{p.own['HostRule']}(" + ", ".join(fields) + ",)")
    statics = ", ".join(f"{s}={s}" for s in p.statics)
    call = f"{host_rule(rule.name)}({', '.join([*p.arrays, *([statics] if statics else [])])})"
    results = [*p.outputs, *map(hidden, p.returned)]
    lines: list[Statement] = [Assign(unpacking(results), call), Return(tuple_text(p.outputs))]
    if len(p.outputs) == 1 and p.returned:
        # A lone output taken from the rule's values where it is returned: no name used once.
        lines = [Return(f"{call}[0]")]
    return _module(p, lines, assignments=[assignment])


def _primal_lines(p: SnippetPlanner) -> list[Statement]:
    """The public function's body: the forward body's call, its returned residuals dropped."""
    forward = p.code("forward")
    assert forward is not None
    if p.returned:
        return [Assign(p.forward_targets(), p.call(forward)), Return(tuple_text(p.outputs))]
    return [Return(p.call(forward))]


def _decorator(p: SnippetPlanner, kind: str) -> str:
    nondiff = tuple(k for k, i in enumerate(p.rule.inputs) if i.static)
    jax = p.own["jax"]
    if not nondiff:
        return f"{jax}.{kind}"
    p.imports.add(Import("functools"))
    return f"{p.own['functools']}.partial({jax}.{kind}, nondiff_argnums={nondiff})"


def _plain(p: SnippetPlanner) -> SnippetPlan:
    """Bodies without derivatives: JAX differentiates the forward as it is."""
    return _module(p, _primal_lines(p))


def _custom_jvp(p: SnippetPlanner) -> SnippetPlan:
    """A custom_jvp whose rule is the JVP body, the VJP body transposed, or a `linear_map` of the two."""
    rule, route = p.rule, p.d.routes.jax
    decorator = _decorator(p, "custom_jvp")
    primals, tangents = p.own["primals"], p.own["tangents"]
    tangent_names = [tangent(a) if a in p.diff_inputs else "_" for a in p.arrays]
    lines: list[Statement] = [*unpacked_pairs((p.arrays, primals), (tangent_names, tangents))]
    lines.append(Assign(tuple_text(p.outputs), f"{hidden(rule.name)}({', '.join(p.inputs)})"))
    needed = p.reads(*{JaxRoute.CUSTOM_JVP: ["jvp"], JaxRoute.TRANSPOSE: ["vjp"]}.get(route, ["jvp", "vjp"]))
    lines += p.residual_lines(needed, forward_call=True)
    dots = [tangent(o) for o in p.diff_outputs]
    methods: list[Def] = []
    if route == JaxRoute.CUSTOM_JVP:
        lines.append(Assign(tuple_text(dots), p.call(p.given("jvp"))))
    else:
        maps, call = _linear_maps(p)
        methods += maps
        lines.append(Assign(f"{tuple_text(dots)},", call))
    lines.append(Return(f"{packed(p.outputs)}, {packed(_output_tangents(p))}"))
    params = (*p.statics, primals, tangents)
    methods.append(Def(jvp_rule(rule.name), params, tuple(lines), (f"{hidden(rule.name)}.defjvp",)))
    return _module(p, _primal_lines(p), decorator=decorator, methods=methods)


def _output_tangents(p: SnippetPlanner) -> list[str]:
    """Per output: its tangent, or zeros of the kind JAX wants for an output not differentiated."""
    tangents = []
    for o in p.rule.outputs:
        if o.differentiable:
            tangents.append(tangent(o.name))
        elif o.dtype == "float":
            p.imports.add(Import("jax.numpy", alias="jnp"))
            tangents.append(f"{p.own['jnp']}.zeros_like({o.name})")
        else:
            p.imports.add(Import("._util", "no_tangent"))
            tangents.append(f"{p.own['no_tangent']}({o.name})")
    return tangents


def _custom_vjp(p: SnippetPlanner) -> SnippetPlan:
    """A custom_vjp: fwd saves what the VJP body reads, bwd runs it and sums cotangents back to the inputs' shapes."""
    rule = p.rule
    decorator = _decorator(p, "custom_vjp")
    needed = p.reads("vjp")
    # The primal function, not the body, so that the rule holds when
    # this fwd is itself differentiated (higher order).
    fwd: list[Statement] = [Assign(tuple_text(p.outputs), f"{hidden(rule.name)}({', '.join(p.inputs)})")]
    fwd += p.residual_lines(needed, forward_call=True)
    saved = [n for n in (*p.arrays, *p.outputs, *p.returned, *(n for n, _ in p.d.residuals)) if n in needed]
    if p.broadcastable:
        saved += [i for i in p.diff_inputs if i not in saved]
    fwd.append(Return(f"{packed(p.outputs)}, {tuple_literal(saved)}"))
    bars = [cotangent(o) if o in p.diff_outputs else "_" for o in p.outputs]
    saved_param, cotangents = p.own["saved"], p.own["cotangents"]
    bwd: list[Statement] = []
    if saved:
        bwd.append(Assign(unpacking(saved), saved_param))
    if len(bars) > 1:
        bwd.append(Assign(tuple_text(bars), cotangents))
    call = p.call(p.given("vjp"))
    returns = [_input_cotangent(p, i.name) for i in rule.inputs if not i.static]
    # A lone cotangent is returned where it is computed, where that fits a line: no name used once.
    lone = tuple_literal([_input_cotangent(p, i.name, call) for i in rule.inputs if not i.static])
    if len(p.diff_inputs) == 1 and fits_a_line(lone):
        bwd.append(Return(lone))
    else:
        bwd.append(Assign(tuple_text([cotangent(i) for i in p.diff_inputs]), call))
        bwd.append(Return(tuple_literal(returns)))
    fwd_name, bwd_name = vjp_halves(rule.name)
    methods = [
        Def(fwd_name, p.inputs, tuple(fwd)),
        Def(bwd_name, (*p.statics, saved_param, bars[0] if len(bars) == 1 else cotangents), tuple(bwd)),
    ]
    tail = [Expr(f"{hidden(rule.name)}.defvjp({fwd_name}, {bwd_name})")]
    return _module(p, _primal_lines(p), decorator=decorator, methods=methods, tail=tail)


def _input_cotangent(p: SnippetPlanner, name: str, value: str = "") -> str:
    """What bwd returns for input `name`: its cotangent (`value`, else its name), summed to its shape if broadcast."""
    if name not in p.diff_inputs:
        return "None"
    value = value or cotangent(name)
    if p.broadcastable:
        p.imports.add(Import("._util", "unbroadcast"))
        return f"{p.own['unbroadcast']}({value}, {name})"
    return value


def _linear_maps(p: SnippetPlanner) -> tuple[list[Def], str]:
    """The JVP and VJP bodies as the two halves of a `linear_map`, and the call that applies it.

    Both take the statics and the known values (inputs, outputs, residuals)
    they read first, then the tangents, or the cotangents.
    """
    jvp, vjp = p.code("jvp"), p.given("vjp")
    p.imports.add(Import("._linear", "linear_map"))
    # Without a JVP body, forward mode is the VJP body's linear transpose,
    # which takes the differentiable outputs for the cotangents' shapes.
    read = set(jvp.params) if jvp is not None else set(p.diff_outputs)
    read |= set(vjp.params)
    statics = [s for s in p.statics if s in read]
    known = [n for n in (*p.arrays, *p.outputs, *p.returned, *(n for n, _ in p.d.residuals)) if n in read]
    if p.broadcastable:
        known += [i for i in p.diff_inputs if i not in known]
    dots = [tangent(i) for i in p.diff_inputs]
    results = [cotangent(i) for i in p.diff_inputs]
    returned = [_input_cotangent(p, i) for i in p.diff_inputs]
    name = p.rule.name
    transpose = Def(
        linear_map_half(name, "vjp"),
        (*statics, *known, *(cotangent(o) for o in p.diff_outputs)),
        (Assign(tuple_text(results), p.call(vjp)), Return(f"({tuple_text(returned)},)")),
    )
    if jvp is not None:
        apply_lines: tuple[Statement, ...] = (Return(f"({p.call(jvp)},)"),)
    else:
        p.imports.add(Import("functools"))
        local = p.own["vjp"]
        apply_lines = (
            Assign(local, f"{p.own['functools']}.partial({transpose.name}, {', '.join((*statics, *known))})"),
            Return(f"{p.own['jax']}.linear_transpose({local}, {', '.join(p.diff_outputs)})(({tuple_text(dots)},))"),
        )
    apply = Def(linear_map_half(name, "jvp"), (*statics, *known, *dots), apply_lines)
    args = [apply.name, transpose.name, tuple_literal(known), tuple_literal(dots)]
    if statics:
        args.append(tuple_literal(statics))
    return [apply, transpose], f"{p.own['linear_map']}({', '.join(args)})"


_PLANNERS: dict[JaxRoute, Callable[[SnippetPlanner], SnippetPlan]] = {
    JaxRoute.BRIDGE: _bridge,
    JaxRoute.PRIMITIVE: _primitive,
    JaxRoute.PLAIN: _plain,
    JaxRoute.CUSTOM_JVP: _custom_jvp,
    JaxRoute.TRANSPOSE: _custom_jvp,
    JaxRoute.LINEAR_MAP: _custom_jvp,
    JaxRoute.CUSTOM_VJP: _custom_vjp,
}
