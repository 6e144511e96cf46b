"""The JAX module of a symbolic rule: a custom_jvp (with a linear_map for a given VJP), or a custom_vjp."""

from __future__ import annotations

import functools
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import replace

import sympy as sp
from sympy.codegen.cfunctions import expm1, log1p

from rulegen.derive import functions as fn
from rulegen.derive.partials import Derivation
from rulegen.derive.routes import JaxRoute
from rulegen.plan.code import (
    Assign,
    Block,
    Comment,
    Def,
    Expr,
    Import,
    Return,
    Statement,
    Value,
    unpacked_pairs,
    unpacking,
)
from rulegen.plan.emit import Emitter, joint_calls
from rulegen.plan.forms import corrections, float_anchors, float_forms, integral_arrays, jax_forms
from rulegen.plan.header import (
    LIFT_IMPORT,
    NAMED_TUPLE_IMPORT,
    SUM_TO_SHAPE_IMPORT,
    doc_lines,
    header_of,
    jax_array_arguments,
    jax_util_imports,
    parameters_of,
    public_return,
    result_classes,
    returns_of,
    stability_notes,
    static_check,
    unpacked,
)
from rulegen.plan.model import JaxPlan, Result, Wrap
from rulegen.plan.printers import print_jax
from rulegen.plan.snippet import tuple_literal
from rulegen.plan.symbolic import (
    broadcast_outputs,
    dtype_casts,
    linear_combination,
    names_in,
    needs_broadcast,
)
from rulegen.spec.names import (
    COTANGENT,
    TANGENT,
    cotangent,
    hidden,
    jvp_rule,
    linear_map_half,
    tangent,
    vjp_halves,
)
from rulegen.spec.rules import Output

_JNP = frozenset({Import("jax.numpy", alias="jnp")})


def plan_jax(d: Derivation) -> JaxPlan:
    """What the JAX module of a rule computes: a custom_jvp, or a custom_vjp."""
    d = d.fused
    rule = d.rule
    g = rule.own_names
    emit = _emitter(d)
    arrays = tuple(i.name for i in rule.inputs if not i.static)
    float_arrays = tuple(i.name for i in rule.inputs if not i.static and i.dtype == "float")
    forward = emit.block([], _forward_results(d, arrays, g))
    primal_call = f"{hidden(rule.name)}({', '.join(i.name for i in rule.inputs)})"
    jvp = bwd = None
    maps: tuple[Def, ...] = ()
    saved: tuple[str, ...] = ()
    jvp_primal: tuple[Assign, ...] = ()
    jvp_notes: tuple[str, ...] = ()
    held = _held_inputs(d)
    if d.routes.jax == JaxRoute.CUSTOM_VJP:
        bwd = emit.block(*_bwd_parts(d))
        saved = tuple(n for n in (*arrays, *(o.name for o in rule.outputs)) if n in bwd.reads)
    else:
        reason = _primal_needed(d)
        jvp, maps = _jvp(d, emit, inline=reason is None, held=held)
        if reason is not None:
            jvp_primal = (Assign(", ".join(o.name for o in rule.outputs), primal_call),)
            jvp_notes = _wrapped(
                f"The primal function, whose own rule differentiates the output at higher order: {reason}."
            )
    symbolic_zeros = jvp is not None and held
    imports = {Import("jax"), *emit.imports}
    if float_arrays:
        imports |= LIFT_IMPORT
    if any(i.static for i in rule.inputs) or symbolic_zeros:
        imports.add(Import("functools"))
    if symbolic_zeros:
        imports.add(Import("._util", "present"))
    classes = result_classes(rule, "jax")
    if classes:
        imports.add(NAMED_TUPLE_IMPORT)
    plan = JaxPlan(
        header=header_of(d, "jax"),
        name=rule.name,
        own=g,
        params=parameters_of(rule, "jax"),
        unpack=unpacked(rule),
        inputs=tuple(i.name for i in rule.inputs),
        returns=returns_of(rule, "jax"),
        nondiff_argnums=tuple(k for k, i in enumerate(rule.inputs) if i.static),
        statics=tuple(i.name for i in rule.inputs if i.static),
        arrays=arrays,
        custom="custom_vjp" if d.routes.jax == JaxRoute.CUSTOM_VJP else "custom_jvp",
        forward=forward,
        tangents=() if jvp is None else tuple(tangent(n) if n in _diff_inputs(d) else "_" for n in arrays),
        jvp_primal=jvp_primal,
        jvp_notes=jvp_notes,
        symbolic_zeros=symbolic_zeros,
        returning=public_return(rule, primal_call, lifted=bool(float_arrays), spread=len(rule.outputs) > 1),
        outputs=tuple(o.name for o in rule.outputs),
        jvp=jvp,
        saved=saved,
        cotangents=() if bwd is None else tuple(cotangent(o.name) for o in rule.outputs),
        bwd=bwd,
        imports=jax_util_imports(imports, rule),
        float_arrays=float_arrays,
        array_arguments=(*static_check(rule), *jax_array_arguments(rule)),
        maps=maps,
        forward_notes=stability_notes(d),
        result_classes=classes,
    )
    return replace(plan, definitions=jax_definitions(plan))


def _diff_inputs(d: Derivation) -> list[str]:
    return [i.name for i in d.diff_inputs]


def _emitter(d: Derivation) -> Emitter:
    """The JAX printer, after the float and shared-exp rewrites, told which inputs are static and boolean."""
    rule = d.rule
    every = [e for _, e in (*d.forward, *d.residuals)]
    every += [*d.jvp_partials.values(), *d.vjp_partials.values(), *d.residual_partials.values()]
    booleans = frozenset(i.name for i in rule.inputs if not i.static and i.dtype == "bool")
    statics = frozenset(i.name for i in rule.inputs if i.static)
    in_float = float_forms(
        float_anchors(rule, d.symbols), integral_arrays(rule, d.symbols), for_torch=False, scalars=statics
    )
    shared_exp = jax_forms(every, statics)
    corrected = corrections("jax")
    return Emitter(
        functools.partial(print_jax, booleans=booleans, own=rule.own_names),
        d.symbols,
        lambda e: shared_exp(in_float(corrected(_tanh_derivative_factored(e)))),
        statics,
    )


_U = sp.Wild("u")


def _tanh_derivative_factored(expr: sp.Expr) -> sp.Expr:
    """`1 - tanh(u)**2` as `(1 - tanh(u)) * (1 + tanh(u))`, as JAX's own tanh rule writes it.

    The square of an output is what a sum-of-squares loss computes too:
    XLA shared the two and wrote the square out to memory for both, a pass
    autodiff does not make (grad of tanh 1.3x).  An expression without tanh is returned as it is: the pattern's
    match at each of its subexpressions was a third of a build's time.
    """
    if not expr.has(sp.tanh):
        return expr
    return expr.replace(1 - sp.tanh(_U) ** 2, (1 - sp.tanh(_U)) * (1 + sp.tanh(_U)))


def _forward_results(d: Derivation, arrays: Sequence[str], g: Mapping[str, str]) -> list[Result]:
    """The outputs, each broadcast to the inputs' shape where its expression may lack it, and cast to its dtype."""
    jnp = g["jnp"]
    shapes = ", ".join(f"{jnp}.shape({a})" for a in arrays)
    full_shape = f"{jnp}.broadcast_shapes({shapes})" if len(arrays) > 1 else shapes
    wraps = broadcast_outputs(d, Wrap(f"{jnp}.broadcast_to({{}}, {full_shape})", frozenset(arrays)))
    casts = {"int": f"astype({g['int']})", "bool": f"astype({g['bool']})"}
    for n, cast in dtype_casts(d.rule, casts).items():
        wraps[n] = cast.around(wraps.get(n, Wrap()))
    return [Result(n, e, wrap=wraps[n], imports=_JNP) if n in wraps else Result(n, e) for n, e in d.forward]


def _held_inputs(d: Derivation) -> bool:
    """Whether one differentiable input may be held constant while another is not: two or more of them.

    Its tangent is then JAX's symbolic zero (`symbolic_zeros=True`), and the
    output tangents add only the present inputs' terms: a zero tangent times
    a partial that overflows is nan, where autodiff, which has no term for a
    constant, is right (split3's dc/dx at exp(x) = inf).  A rule that gives
    both its JVP and its VJP applies them as written.
    """
    return len(_diff_inputs(d)) > 1 and not (d.rule.jvp is not None and d.rule.vjp is not None)


def _jvp(d: Derivation, emit: Emitter, *, inline: bool, held: bool) -> tuple[Block, tuple[Def, ...]]:
    """The custom_jvp rule's body, and with both a given JVP and VJP, the `linear_map` halves it applies.

    `inline`: the body computes the outputs too, from the subexpressions
    their tangents share (the template calls the primal function otherwise).
    XLA does not share a called primal's work with the tangent: sin_exp_mul's
    grad computed `sin(x)` three times, autodiff's twice.
    """
    results = [_tangent(d, o, held=held) for o in d.rule.outputs]
    if not inline:
        # The outputs come from the primal function, whose own rule differentiates them at higher order: a
        # tangent that computed one again (gamma's, `gamma(x) * digamma(x)`) would be differentiated by JAX's
        # rule of it instead.
        named = {e: d.symbols[n] for n, e in d.forward if not e.is_Atom}
        results = [replace(r, expr=r.expr.xreplace(named)) if r.expr is not None else r for r in results]
    applying: tuple[Assign, ...] = ()
    maps: tuple[Def, ...] = ()
    if d.rule.jvp is not None and d.rule.vjp is not None:
        maps, application, results = _given_linear_maps(d, emit, results)
        applying = (application,)
    # hypot's and atan2's partials of one point from one runtime call: one scaling eagerly, as XLA shares it
    # under jit (four calls of their own computed four, eagerly: polar's gradient at 1.95 times the time).
    taken = {*d.symbols, *d.rule.own_names.values()}
    computed = {k: r.expr for k, r in enumerate(results) if r.expr is not None}
    joint, computed, _ = joint_calls(computed, taken, emit, d.rule.own_names)
    results = [replace(r, expr=computed[k]) if k in computed else r for k, r in enumerate(results)]
    residuals = dict(d.residuals)
    outputs = list(d.forward) if inline else []
    used = names_in([*(r.expr for r in results if r.expr is not None), *(e for _, e in outputs)])
    # A temporary an output merely copies (`t0 = jnp.tanh(x)`, `out = t0`) is named by the output.
    lets = [*outputs, *((n, e) for n, e in residuals.items() if n in used)]
    names = [o.name for o in d.rule.outputs]
    # The block returns the outputs, then their tangents: an output nothing else reads as computed.
    block = emit.block(lets, results, named_by_lets=True, returned_lets=names if inline else ())
    returned = block.results if inline else (*map(Value, names), *block.results)
    return Block((*applying, *joint, *block.lines), returned, block.reads), maps


# Functions whose JAX derivative, at every order, is the one sympy derives
# wherever they are defined (a rewrite into jax_forms included): no kink, jump
# or convention at a point.  A forward rewritten into a stable form is judged
# as computed: softplus's `where(x >= 0, x, 0) + log1p(exp(-|x|))` is exact
# under autodiff at every order (tests/plan/test_jax_forms.py).  Not Gamma
# and log Gamma: JAX differentiates them by its own digamma and polygamma,
# which the registry replaces (nan at tiny negative x, 0 past 1e20).
_SMOOTH = frozenset(
    {
        sp.exp,
        sp.log,
        sp.sin,
        sp.cos,
        sp.tan,
        sp.sinh,
        sp.cosh,
        sp.tanh,
        sp.asinh,
        sp.atan,
        sp.erf,
        sp.erfc,
        sp.asin,
        sp.acos,
        sp.atanh,
        sp.acosh,
        sp.erfinv,
        expm1,
        log1p,
        fn.sigmoid,
        fn.softplus,
        fn.silu,
        fn.one_plus_erf,
        fn.logaddexp,
        fn.ndtr,
        fn.ndtri,
        fn.log_ndtr,
        fn.logit,
        fn.erfcx,
        fn.divided,
    }
)


def _primal_needed(d: Derivation) -> str | None:
    """Why the JVP rule must take its outputs from the primal function; None where it may compute them itself.

    When the rule is itself differentiated (hessian, jvp of grad), its
    outputs are differentiated by whatever computes them: the primal
    function by its own rule, an expression by autodiff, which must then
    be exact for it as computed.
    """
    rule = d.rule
    if rule.jvp is not None and rule.vjp is not None:
        return "the rule's own JVP and VJP are its derivatives, whatever autodiff of its forward says"
    given = rule.derivatives is not None or rule.jvp is not None or rule.vjp is not None
    if given and not d.given_are_derived:
        return "the rule's own derivatives are not sympy's of its forward, which autodiff's would be"
    if any(not o.differentiable or o.dtype != "float" for o in rule.outputs):
        return "autodiff would differentiate an output the rule holds constant"
    if any(not i.static and not i.differentiable for i in rule.inputs):
        return "autodiff would differentiate in an input the rule holds constant"
    if d.rule.complex:
        return "JAX differentiates complex functions by its own convention"
    if any(needs_broadcast(d, e) for _, e in d.forward):
        return "an output's expression lacks the inputs' shape, which the primal function gives it"
    # What only static inputs feed is a constant to autodiff: `hypot(1, log_scale)` is never differentiated.
    statics = {d.symbols[i.name] for i in rule.inputs if i.static}
    applied = {
        node.func
        for _, e in d.forward
        for node in sp.preorder_traversal(e)
        if not node.is_Atom and not node.free_symbols <= statics
    }
    rough = applied - _SMOOTH - {sp.Add, sp.Mul, sp.Pow}
    if rough:
        # Named by the functions, not by the conditions and pairs inside a Piecewise.
        named = sorted(f.__name__ for f in rough if issubclass(f, sp.core.function.Application)) or ["an expression"]
        return f"JAX's derivative of {', '.join(named)} need not be the derived one (at a kink, a jump, a convention)"
    return None


def _wrapped(text: str) -> tuple[str, ...]:
    return tuple(textwrap.wrap(text, 90, break_long_words=False, break_on_hyphens=False))


def _tangent(d: Derivation, o: Output, *, held: bool) -> Result:
    """The tangent of the output `o`: the partials times the inputs' tangents, or zeros of the right kind.

    `held`: an input's tangent may be absent (see `_held_inputs`), its term then none.
    """
    g = d.rule.own_names
    jnp = g["jnp"]
    name = tangent(o.name)
    expr = linear_combination(d, d.jvp_partials, o.name, _diff_inputs(d), TANGENT)
    reads = frozenset({o.name})
    if not o.differentiable and o.dtype != "float":
        code = f"{g['no_tangent']}({o.name})"
        return Result(name, code=code, imports=frozenset({Import("._util", "no_tangent")}), reads=reads)
    if not o.differentiable or expr == 0:
        return Result(name, code=f"{jnp}.zeros_like({o.name})", imports=_JNP, reads=reads)
    if held:
        partials = [(v, p) for v in _diff_inputs(d) if (p := d.jvp_partials.get((o.name, v), 0)) != 0]
        shared = _shared_factor([p for _, p in partials]) if _as_autodiff(d) else None
        if shared is not None:
            # t0 * (x_dot - y_dot), as autodiff writes (x - y)**2 / 2's: transposed, x's cotangent is ct * t0 and
            # y's its negation, where x_dot * t0 + y_dot * (-t0) computes t0 and a product for each.
            terms = [fn.cotangent_term(d.symbols[tangent(v)], sp.cancel(p / shared)) for v, p in partials]
            return Result(name, shared * fn.cotangent_sum(d.symbols[o.name], *terms))
        terms = [fn.cotangent_term(d.symbols[tangent(v)], p) for v, p in partials]
        return Result(name, fn.cotangent_sum(d.symbols[o.name], *terms))
    if needs_broadcast(d, expr):
        wrap = Wrap(f"{jnp}.broadcast_to({{}}, {jnp}.shape({o.name}))", reads)
        return Result(name, expr, wrap=wrap, imports=_JNP)
    return Result(name, expr)


def _as_autodiff(d: Derivation) -> bool:
    """Whether the rule's accuracy policy weighs forms against autodiff's (`fast`, `balanced`): its tangent may then
    be summed as autodiff sums it, whose rounding and range the policy accepts."""
    return d.rule.policy != "best"


def _shared_factor(partials: Sequence[sp.Expr]) -> sp.Expr | None:
    """The one factor of arrays two or more partials all are, each times a number (`x - y` of `x - y` and
    `-x + y`); None where they are not."""
    if len(partials) < 2:
        return None
    factor = partials[0].as_coeff_Mul()[1]
    if factor.is_number or not all(sp.cancel(p / factor).is_number for p in partials[1:]):
        return None
    return factor


def _cotangent(d: Derivation, i: str, outputs: Sequence[str]) -> Result:
    """The cotangent of the array input `i`: the transposed partials, summed back to `i`'s shape where it broadcasts."""
    jnp = d.rule.own_names["jnp"]
    expr = linear_combination(d, d.vjp_partials, i, outputs, COTANGENT, transpose=True)
    if expr == 0:
        return Result(cotangent(i), code=f"{jnp}.zeros_like({i})", imports=_JNP, reads=frozenset({i}))
    if sum(not x.static for x in d.rule.inputs) > 1:
        wrap = Wrap(f"_sum_to_shape({{}}, {jnp}.shape({i}))", frozenset({i}))
        return Result(cotangent(i), expr, wrap=wrap, imports=_JNP | SUM_TO_SHAPE_IMPORT)
    return Result(cotangent(i), expr)


def _bwd_parts(d: Derivation) -> tuple[list[tuple[str, sp.Expr]], list[Result]]:
    """The custom_vjp bwd's residual assignments and results, one per array input."""
    outputs = [o.name for o in d.rule.outputs]
    results = []
    for i in d.rule.inputs:
        if i.static:
            continue
        if i.differentiable:
            results.append(_cotangent(d, i.name, outputs))
        elif i.dtype == "float":
            code = f"{d.rule.own_names['jnp']}.zeros_like({i.name})"
            results.append(Result(cotangent(i.name), code=code, imports=_JNP, reads=frozenset({i.name})))
        else:
            results.append(Result(cotangent(i.name), code="None"))
    used = names_in(r.expr for r in results if r.expr is not None)
    return [(n, e) for n, e in d.residuals if n in used], results


def _given_linear_maps(
    d: Derivation,
    emit: Emitter,
    results: list[Result],
) -> tuple[tuple[Def, ...], Assign, list[Result]]:
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
    dots, bars = [tangent(i) for i in diff_inputs], [cotangent(o) for o in diff_outputs]

    residuals = dict(d.residuals)

    def half(kind: str, computed: list[Result], linear: list[str]) -> Def:
        used = names_in(r.expr for r in computed if r.expr is not None)
        block = emit.block([(n, e) for n, e in residuals.items() if n in used], computed)
        body: tuple[Statement, ...] = (*block.lines, Return(f"({block.result},)"))
        return Def(linear_map_half(name, kind), (*statics, *known, *linear), body)

    applied = [r for r in results if r.name.removesuffix(TANGENT) in diff_outputs]
    transposed = [_cotangent(d, i, diff_outputs) for i in diff_inputs]
    maps = (half("jvp", applied, dots), half("vjp", transposed, bars))
    emit.imports.add(Import("._linear", "linear_map"))
    targets = ", ".join(tangent(o) for o in diff_outputs) + ","
    packed = [tuple_literal(known), tuple_literal(dots), *([f"statics={tuple_literal(statics)}"] if statics else [])]
    call = f"{rule.own_names['linear_map']}({maps[0].name}, {maps[1].name}, {', '.join(packed)})"
    kept = [Result(r.name, code=r.name) if r in applied else r for r in results]
    return maps, Assign(targets, call), kept


def jax_definitions(plan: JaxPlan) -> tuple[Statement, ...]:
    """What the module defines after its imports: the public function, the custom function and its rule."""
    own, name = plan.own, plan.name
    public: list[Statement] = [*doc_lines(plan.header), *plan.unpack, *plan.array_arguments, *plan.returning]
    if plan.nondiff_argnums:
        custom = f"{own['functools']}.partial({own['jax']}.{plan.custom}, nondiff_argnums={plan.nondiff_argnums})"
    else:
        custom = f"{own['jax']}.{plan.custom}"
    forward = (*map(Comment, plan.forward_notes), *plan.forward.statements)
    found: list[Statement] = [
        *plan.result_classes,
        Def(name, tuple(map(str, plan.params)), tuple(public), returns=plan.returns),
        Def(hidden(name), plan.inputs, forward, (custom,)),
    ]
    if plan.custom == "custom_jvp":
        assert plan.jvp is not None
        # The jvp block returns the outputs, then their tangents.
        n = len(plan.outputs)
        texts = [r.text for r in plan.jvp.results]
        outputs, tangents = ", ".join(texts[:n]), ", ".join(texts[n:])
        result = f"{outputs}, {tangents}" if n == 1 else f"({outputs}), ({tangents})"
        rule: tuple[Statement, ...] = (
            *unpacked_pairs(
                (plan.arrays, own["primals"]),
                (plan.tangents, f"{own['present']}({own['tangents']})" if plan.symbolic_zeros else own["tangents"]),
            ),
            *map(Comment, plan.jvp_notes),
            *plan.jvp_primal,
            *plan.jvp.lines,
            Return(result),
        )
        params = (*plan.statics, own["primals"], own["tangents"])
        defjvp = f"{hidden(name)}.defjvp"
        if plan.symbolic_zeros:
            defjvp = f"{own['functools']}.partial({defjvp}, symbolic_zeros=True)"
        return (*found, *plan.maps, Def(jvp_rule(name), params, rule, (defjvp,)))
    assert plan.bwd is not None
    returned = plan.outputs[0] if len(plan.outputs) == 1 else f"({', '.join(plan.outputs)})"
    primal_call = f"{hidden(plan.name)}({', '.join(plan.inputs)})"
    fwd = (Assign(", ".join(plan.outputs), primal_call), Return(f"{returned}, ({unpacking(plan.saved)})"))
    single = len(plan.cotangents) == 1
    bwd: list[Statement] = [Assign(unpacking(plan.saved), own["saved"])] if plan.saved else []
    if not single:
        bwd.append(Assign(", ".join(plan.cotangents), own["cotangents"]))
    bwd += [*plan.bwd.lines, Return(tuple_literal([r.text for r in plan.bwd.results]))]
    cotangents = plan.cotangents[0] if single else own["cotangents"]
    fwd_name, bwd_name = vjp_halves(name)
    return (
        *found,
        Def(fwd_name, plan.inputs, fwd),
        Def(bwd_name, (*plan.statics, own["saved"], cotangents), tuple(bwd)),
        Expr(f"{hidden(name)}.defvjp({fwd_name}, {bwd_name})"),
    )
