"""The torch module of a snippet rule: a torch.func-style Function, or the plain body."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, replace

from rulegen.derive.routes import Source
from rulegen.derive.snippet import SnippetDerivation
from rulegen.plan.code import LITERAL, Assign, Def, Import, Return, Statement, Value, fits_a_line, unpacking
from rulegen.plan.header import (
    NAMED_TUPLE_IMPORT,
    array_arguments,
    doc_lines,
    header_of,
    parameters_of,
    public_return,
    result_classes,
    returns_of,
    static_check,
    torch_util_imports,
    unpack_helpers,
    unpacked,
)
from rulegen.plan.model import SnippetPlan
from rulegen.plan.snippet import SnippetPlanner, packed, snippet_definitions, tuple_literal, tuple_text
from rulegen.plan.torch_route import Kept, setup_context_body, static_type, torch_route
from rulegen.spec.names import cotangent, hidden, shape_attribute, tangent


def plan_torch_snippet(d: SnippetDerivation) -> SnippetPlan:
    """The torch module of a snippet rule: a torch.func-style Function, or a plain function."""
    p = SnippetPlanner(d, "torch")
    p.imports.add(Import("torch"))
    util_names = (["as_opmath_tensors", "rounded"] if _float_arrays(p) else ["as_tensors"]) if _arguments(p) else []
    util_names += unpack_helpers(d.rule)
    util_names += ["check_statics"] if static_check(d.rule, d.called) else []
    if d.jvp is None and d.vjp is None:
        # Nothing custom: torch differentiates the body as it is.
        forward = p.given("forward")
        if p.returned:
            lines = [Assign(p.forward_targets(), p.call(forward)), *_returned(p, tuple_text(p.outputs))]
        else:
            lines = _returned(p, p.call(forward), spread=len(p.outputs) > 1)
        return _module(p, lines, util_names)
    kept = _kept(p)
    function_names = ["routed", *(["save_for_derivatives"] if kept.saved else [])]
    # A host body's vmap is its own (`_host_vmap`); torch code's, torch's (the runtime's RuleFunction).
    host = p.given("forward").host
    base = f"{p.own['torch']}.autograd.Function" if host else p.own["RuleFunction"]
    function_names += [] if host else ["RuleFunction"]
    function_names += ["no_forward_mode"] if p.d.routes.torch_jvp == Source.NONE else []
    methods: list[Def | Assign] = [
        _forward(p, kept, util_names),
        _setup_context(p, kept),
        _backward(p, kept),
        _jvp(p, kept),
    ]
    if host:
        methods.append(_host_vmap(p))
    host_op = host_op_functions(p, kept.values) if p.given("forward").host and _host_op_applies(p) else ()
    route = torch_route(p.rule, len(kept.values), _HOST_OP if host_op else "")
    lines = _wrapper(p, kept, route.route)
    return _module(
        p,
        lines,
        util_names,
        methods=methods,
        base=base,
        extra_bodies=host_op,
        routed_line=route.op,
        function_names=function_names,
    )


def _module(
    p: SnippetPlanner,
    lines: Sequence[Statement],
    util_names: Sequence[str],
    *,
    methods: Sequence[Def | Assign] = (),
    base: str = "",
    extra_bodies: Sequence[Def] = (),
    routed_line: Assign | None = None,
    function_names: Sequence[str] = (),
) -> SnippetPlan:
    """The module: the bodies, the Function's `methods` if any, and the public function running `lines`."""
    rule = p.rule
    header = header_of(p.d, "torch")
    arguments: list[Statement] = list(_arguments(p))
    prologue = (*doc_lines(header), *unpacked(rule), *static_check(rule, p.d.called), *arguments)
    params = tuple(map(str, parameters_of(rule, "torch")))
    classes = result_classes(rule, "torch")
    if classes:
        p.imports.add(NAMED_TUPLE_IMPORT)
    plan = SnippetPlan(
        header=header,
        name=rule.name,
        imports=torch_util_imports(p.imports, util_names, function_names, p.own),
        bodies=(*p.bodies, *extra_bodies),
        called=p.called,
        assignments=(),
        public=Def(rule.name, params, (*prologue, *lines), returns=returns_of(rule, "torch")),
        methods=tuple(methods),
        tail=(),
        class_name=rule.torch_class if methods else "",
        base=base,
        requires=p.requires,
        apis=p.apis,
        routed_line=routed_line,
        result_classes=classes,
    )
    return replace(plan, definitions=snippet_definitions(plan))


@dataclass(frozen=True)
class _Kept:
    """What the Function's forward returns and setup_context keeps for the derivative methods."""

    values: tuple[str, ...]  # forward's results: the outputs, then a host body's residuals
    needed: frozenset[str]  # what the derivative methods read
    saved: tuple[str, ...]
    statics: tuple[str, ...]
    summed: tuple[str, ...]  # inputs whose cotangents are summed back to their shapes
    non_diff: tuple[str, ...]
    # A host body's outputs have the broadcast shape of the arrays (elementwise), kept as ctx.<first output>_shape:
    # a tangent of an output that reads fewer arrays (`cos(x) * x_dot` for `sin(x)`) is broadcast to it.
    broadcast: bool = False
    # The outputs the transposed VJP is evaluated at ones of (any point will do: it is linear).
    ones: tuple[str, ...] = ()

    @property
    def shapes(self) -> tuple[str, ...]:
        """The summed inputs and the outputs of `ones` whose shapes setup_context keeps on ctx: a saved one's is
        the saved tensor's, and a host body's broadcast outputs share the first one's (`broadcast`)."""
        outputs = () if self.broadcast else self.ones
        return tuple(n for n in (*self.summed, *outputs) if n not in self.saved)

    def ones_like(self, ctx: str, name: str, like: str, torch: str) -> str:
        """Ones shaped like output `name`, as a derivative method makes them: like the output where backward reads
        it anyway, else of its shape kept on ctx, in the dtype and on the device of the tensor `like`."""
        if name in self.saved:
            return f"{torch}.ones_like({name})"
        shape = shape_attribute(self.ones[0] if self.broadcast else name)
        return f"{like}.new_ones({ctx}.{shape})"

    def shape(self, ctx: str, name: str) -> str:
        """The shape of input `name` in a derivative method (which unpacks a saved one: `saved_shapes`)."""
        return f"{name}.shape" if name in self.saved else f"{ctx}.{shape_attribute(name)}"

    def summed_back(self, ctx: str, name: str, grad: Value) -> str:
        """`grad`, the gradient of input `name`, summed back to its shape where that is kept."""
        if name not in self.summed:
            return grad.within(LITERAL)
        return grad.method(f"sum_to_size({self.shape(ctx, name)})").text

    @property
    def saved_shapes(self) -> set[str]:
        """The saved inputs a method that sums cotangents back reads for their shapes."""
        return set(self.summed) & set(self.saved)


def _kept(p: SnippetPlanner) -> _Kept:
    """What the methods read, and so what setup_context keeps.

    Host residuals are results of the host body, saved; the others are
    recomputed from saved inputs where a derivative reads them, so that
    torch differentiates their dependence on the inputs at second order.
    """
    routes, host = p.d.routes, p.given("forward").host
    values = (*p.outputs, *p.returned) if host else p.outputs
    needed = p.reads("vjp" if routes.torch_backward == Source.GIVEN else "jvp")
    if routes.torch_jvp != Source.NONE:
        needed |= p.reads("jvp" if routes.torch_jvp == Source.GIVEN else "vjp")
    # The transposed VJP takes ones like the outputs, whether or not the VJP body reads them: of their shapes, kept
    # on ctx, where nothing else reads an output (saved, it would live as long as the graph for jvp alone).
    ones = tuple(p.diff_outputs) if routes.torch_jvp == Source.TRANSPOSE else ()
    if routes.torch_backward != Source.GIVEN:
        # The VJP of the JVP takes zeros like the inputs, whether or not the JVP body reads them.
        needed |= set(p.diff_inputs)
    if not host and needed & set(p.returned):
        needed |= set(p.given("forward").params)
    # Cotangents summed back to the inputs' shapes, kept on ctx: by the given
    # VJP in backward, and by the transposed VJP that is the forward mode.
    summed = routes.torch_backward == Source.GIVEN or routes.torch_jvp == Source.TRANSPOSE
    return _Kept(
        values=values,
        needed=frozenset(needed),
        saved=tuple(n for n in (*p.arrays, *values) if n in needed),
        statics=tuple(s for s in p.statics if s in needed),
        summed=tuple(i for i in p.diff_inputs if p.broadcastable and summed),
        non_diff=(*(o.name for o in p.rule.outputs if not o.differentiable), *(p.returned if host else ())),
        broadcast=host and p.rule.batching == "elementwise" and p.broadcastable and bool(p.diff_outputs),
        ones=ones,
    )


def _forward(p: SnippetPlanner, kept: _Kept, util_names: list[str]) -> Def:
    forward = p.given("forward")
    lines: list[Statement]
    if forward.host and _host_op_applies(p):
        lines = [Return(f"{_HOST_OP}({', '.join(p.inputs)})")]
    elif forward.host:
        lines = _host_forward(p, kept.values)
    else:
        # A body may return an input as it is (`return x`): torch refuses to save it for
        # backward, and hands it back as a view of the input, which a Function's output
        # must not be (an in-place update of one would write through to the other).
        read = ", ".join(a for a in p.arrays if a in forward.params)
        result = p.call(forward)
        if result in p.arrays:
            result = f"{result}.clone()"
        elif read:
            result = f"{p.own['fresh_outputs']}({result}, {read})"
            util_names.append("fresh_outputs")
        lines = [Return(result)]
        if p.returned:
            lines = [Assign(p.forward_targets(), result), Return(tuple_text(p.outputs))]
    return Def("forward", p.inputs, tuple(lines), _staticmethod(p))


def _staticmethod(p: SnippetPlanner) -> tuple[str]:
    return (p.own["staticmethod"],)


_HOST_OP = "_host_op"


def _host_op_applies(p: SnippetPlanner) -> bool:
    """Whether the host forward can be a torch custom op: tensors in and out, a float array to follow.

    A static may be any Python value, which an op's schema cannot type
    unless its default says its kind (`torch_route.static_type`).
    """
    typed = all(static_type(i) is not None for i in p.rule.inputs if i.static)
    return typed and any(i.dtype == "float" for i in p.rule.inputs)


def host_op_functions(p: SnippetPlanner, values: Sequence[str]) -> tuple[Def, Def]:
    """The host forward as a torch custom op, and its fake: torch.compile and export see one opaque op.

    Without it, Dynamo breaks the graph at the NumPy call.  The fake gives
    the results' shapes without running the host: the broadcast shape of
    the arrays for an elementwise rule, else the first array's (as JAX's
    HostRule assumes); float results in the float arrays' dtype.  Under
    export it is the rule's one op: the runtime gives it the Function's
    autograd (`host_rule_op`).
    """
    rule = p.rule
    float_arrays = [i.name for i in rule.inputs if not i.static and i.dtype == "float"]
    like = float_arrays[0]
    g = p.own
    statics = {i.name: g[str(static_type(i))] for i in rule.inputs if i.static}
    tensor = f"{g['torch']}.Tensor"
    params = tuple(f"{i.name}: {statics[i.name]}" if i.static else f"{i.name}: {tensor}" for i in rule.inputs)
    returns = tensor if len(values) == 1 else f"{g['tuple']}[{', '.join([tensor] * len(values))}]"
    # Named after the Function, as every rule's exported op is (the runtime's `rule_op`): it is the rule's.
    name = f'__name__.replace(".", "_") + "::{rule.torch_class}"'
    # DTensor shards an elementwise body pointwise and gathers the inputs of any other (_host.sharded).
    p.imports.add(Import("._host", "host_op"))
    elementwise = rule.batching == "elementwise"
    op = Def(
        _HOST_OP,
        params,
        tuple(_host_forward(p, values)),
        (f"{g['host_op']}({name}, elementwise={elementwise})",),
        returns=returns,
    )
    shape = _host_shape(p)
    dtype_of = _host_output_dtypes(p, like)
    lines: list[Statement] = []
    if p.returned:
        # Residuals the body returns have the dtype it gives them (numpy_sort's integer
        # permutations): a call on ones of the arrays' ranks and dtypes tells it, once.
        p.imports.add(Import("._host", "residual_dtypes"))
        arguments = ", ".join(p.given("forward").params)
        dtypes = g["dtypes"]
        lines.append(Assign(dtypes, f"{g['residual_dtypes']}(_forward, {len(p.outputs)}, {arguments})"))
        dtype_of |= {r: f"{dtypes}[{k}]" for k, r in enumerate(p.returned)}
    empties = [f"{g['torch']}.empty({shape}, dtype={dtype_of[v]}, device={like}.device)" for v in values]
    fake = Def(
        "_host_shapes",
        params,
        (*lines, Return(tuple_text(empties))),
        (f"{_HOST_OP}.register_fake",),
        returns=returns,
    )
    return op, fake


def _host_forward(p: SnippetPlanner, values: Sequence[str]) -> list[Statement]:
    """A host body's call: tensors to NumPy arrays and back, float outputs in the inputs' dtype and device."""
    rule, forward = p.rule, p.given("forward")
    float_arrays = [i.name for i in rule.inputs if not i.static and i.dtype == "float"]
    like = float_arrays[0] if float_arrays else (p.arrays[0] if p.arrays else None)
    p.imports.add(Import("._host", "to_host"))
    g = p.own
    args = ", ".join(f"{g['to_host']}({n})" if n in p.arrays else n for n in forward.params)
    elementwise = rule.batching == "elementwise"
    arrays = tuple_literal(p.arrays)
    dtype_of = _host_output_dtypes(p, like) if like is not None else {}
    converted = []
    for n in values:
        if n in dtype_of:
            p.imports.add(Import("._host", "output_from_host"))
            call = f'"{rule.name}", "{n}", {n}, {like}, {arrays}, {dtype_of[n]}, elementwise={elementwise}'
            converted.append(f"{g['output_from_host']}({call})")
        elif like:
            p.imports.add(Import("._host", "from_host"))
            converted.append(f"{g['from_host']}({n}, {like})")
        else:
            converted.append(f"{g['torch']}.as_tensor({n})")
    return [Assign(tuple_text(values), f"_forward({args})"), Return(tuple_text(converted))]


def _host_output_dtypes(p: SnippetPlanner, like: str) -> dict[str, str]:
    """Each output's dtype as the host op and its fake give it: float in `like`'s, integer and boolean in torch's."""
    by_kind = {"float": f"{like}.dtype", "int": f"{p.own['torch']}.int64", "bool": f"{p.own['torch']}.bool"}
    return {o.name: by_kind[o.dtype] for o in p.rule.outputs}


def _host_shape(p: SnippetPlanner) -> str:
    """The shape of a host body's outputs, as the fake and JAX's HostRule know it before the body runs."""
    if p.rule.batching == "elementwise":
        return f"{p.own['torch']}.broadcast_shapes({', '.join(f'{a}.shape' for a in p.arrays)})"
    return f"{p.arrays[0]}.shape"


def _setup_context(p: SnippetPlanner, kept: _Kept) -> Def:
    shape = (shape_attribute(p.diff_outputs[0]), _host_shape(p)) if kept.broadcast else None
    body = setup_context_body(
        Kept(
            inputs=tuple(p.inputs),
            values=kept.values,
            saved=kept.saved,
            statics=kept.statics,
            shapes=kept.shapes,
            non_differentiable=kept.non_diff,
            shape=shape,
            shape_reads=tuple(p.arrays) if kept.broadcast else (),
        ),
        p.own,
    )
    return Def("setup_context", (p.ctx, p.own["inputs"], p.own["output"]), body, _staticmethod(p))


def _unpack(p: SnippetPlanner, kept: _Kept, reads: set[str]) -> list[Statement]:
    """A derivative method's first lines: the saved tensors and statics it `reads`, and the residuals recomputed.

    Both methods share one `ctx.saved_tensors`; what only the other reads is unpacked as `_`.
    """
    if not p.given("forward").host and reads & set(p.returned):
        reads = reads | set(p.given("forward").params)
    lines: list[Statement] = []
    if any(n in reads for n in kept.saved):
        targets = [n if n in reads else "_" for n in kept.saved]
        lines.append(Assign(unpacking(targets), f"{p.ctx}.saved_tensors"))
    if not p.given("forward").host:
        lines += p.residual_lines(reads & set(kept.needed), forward_call=True, in_ctx=True)
    return lines


def _backward(p: SnippetPlanner, kept: _Kept) -> Def:
    """The VJP body, or the JVP body's VJP; cotangents summed back to the inputs' shapes."""
    given = p.d.routes.torch_backward == Source.GIVEN
    # The VJP of the JVP takes zeros like the inputs, whether or not the JVP body reads them.
    reads = p.reads("vjp") if given else p.reads("jvp") | set(p.diff_inputs)
    lines = _unpack(p, kept, reads | kept.saved_shapes)
    grads = [cotangent(i) for i in p.diff_inputs]
    computed = {g: Value(g) for g in grads}
    if given and len(grads) == 1:
        computed = {grads[0]: p.computed(p.given("vjp"), in_ctx=True)}  # a lone gradient, returned where computed
    elif given:
        lines.append(Assign(tuple_text(grads), p.call(p.given("vjp"), in_ctx=True)))
    else:
        dots = [tangent(i) for i in p.diff_inputs]
        torch, transpose = p.own["torch"], p.own["transpose"]
        lines.append(Def(p.own["jvp"], tuple(dots), (Return(_tangents(p, kept, p.call(p.given("jvp"), in_ctx=True))),)))
        zeros = ", ".join(f"{torch}.zeros_like({i})" for i in p.diff_inputs)
        lines.append(Assign(f"_, {transpose}", f"{torch}.func.vjp({p.own['jvp']}, {zeros})"))
        lines.append(Assign(f"{tuple_text(grads)},", f"{transpose}({packed([cotangent(o) for o in p.diff_outputs])})"))
    returns = []
    for i in p.rule.inputs:
        if i.name not in p.diff_inputs:
            returns.append("None")
        else:
            returns.append(kept.summed_back(p.ctx, i.name, computed[cotangent(i.name)]))
    lines.append(Return(tuple_text(returns)))
    bars = [cotangent(n) if n in p.diff_outputs else hidden(cotangent(n)) for n in kept.values]
    return Def("backward", (p.ctx, *bars), tuple(lines), _staticmethod(p))


def _jvp(p: SnippetPlanner, kept: _Kept) -> Def | Assign:
    """The JVP body, the VJP body transposed, or the runtime's `no_forward_mode` saying why there is neither."""
    routes = p.d.routes
    dots_in = [tangent(n) if n in p.diff_inputs else hidden(tangent(n)) for n in p.inputs]
    if routes.torch_jvp == Source.NONE:
        reason = routes.no_forward_mode.get("torch", f"{p.rule.name} has no forward-mode rule")
        pieces = textwrap.wrap(reason, 80, drop_whitespace=False)
        return Assign("jvp", f"{p.own['no_forward_mode']}(\n" + "".join(f"    {piece!r}\n" for piece in pieces) + ")")
    given = routes.torch_jvp == Source.GIVEN
    # The transposed VJP takes ones like the outputs, whether or not the VJP body reads them (`_Kept.ones_like`).
    ones_read = {o for o in kept.ones if o in kept.saved}
    reads = p.reads("jvp") if given else p.reads("vjp") | ones_read | kept.saved_shapes
    lines = _unpack(p, kept, reads)
    out_dots = [tangent(o) for o in p.diff_outputs]
    tangents = [tangent(n) if n in p.diff_outputs else "None" for n in kept.values]
    if given:
        lines.append(Assign(tuple_text(out_dots), _tangents(p, kept, p.call(p.given("jvp"), in_ctx=True))))
    else:
        transposing, transposed = _transposed_vjp(p, kept)
        lines += transposing
        # A lone tangent is returned where the transpose computes it, where that fits a line: no name used once.
        lone = tuple_text([f"{transposed}[0]" if n in p.diff_outputs else "None" for n in kept.values])
        if len(out_dots) == 1 and fits_a_line(lone):
            return Def("jvp", (p.ctx, *dots_in), (*lines, Return(lone)), _staticmethod(p))
        lines.append(Assign(f"{tuple_text(out_dots)},", transposed))
    lines.append(Return(tuple_text(tangents)))
    return Def("jvp", (p.ctx, *dots_in), tuple(lines), _staticmethod(p))


def _tangents(p: SnippetPlanner, kept: _Kept, call: str) -> str:
    """The JVP body's `call`, its tangents broadcast to the outputs' shape where a host body's outputs have one."""
    if not kept.broadcast:
        return call
    p.imports.add(Import("._host", "broadcast_tangents"))
    return f"{p.own['broadcast_tangents']}({call}, {p.ctx}.{shape_attribute(p.diff_outputs[0])})"


def _transposed_vjp(p: SnippetPlanner, kept: _Kept) -> tuple[list[Statement], str]:
    """Forward mode as the VJP body's linear transpose, through torch.func.vjp of it: the statements that make
    the transpose, and the call of it that gives the tuple of output tangents."""
    grads = [cotangent(i) for i in p.diff_inputs]
    torch, vjp, transpose = p.own["torch"], p.own["vjp"], p.own["transpose"]
    value = p.computed(p.given("vjp"), in_ctx=True)
    call = value.within(LITERAL)
    lone = len(grads) == 1  # a lone gradient, returned where it is computed
    computed = [value] if lone else [Value(g) for g in grads]
    shaped = [kept.summed_back(p.ctx, i, g) for g, i in zip(computed, p.diff_inputs, strict=True)]
    body = (Return(shaped[0]),) if lone else (Assign(tuple_text(grads), call), Return(tuple_text(shaped)))
    # Linear, so any point will do; ones keep data-dependent loops running.
    like = tangent(p.diff_inputs[0])
    ones = ", ".join(kept.ones_like(p.ctx, o, like, torch) for o in p.diff_outputs)
    made: list[Statement] = [
        Def(vjp, tuple(cotangent(o) for o in p.diff_outputs), body),
        Assign(f"_, {transpose}", f"{torch}.func.vjp({vjp}, {ones})"),
    ]
    return made, f"{transpose}({packed([tangent(i) for i in p.diff_inputs])})"


def _host_vmap(p: SnippetPlanner) -> Def:
    """vmap of a host body: its `batching` (rulegen/runtime/torch/_host.py), never generate_vmap_rule."""
    p.imports.add(Import("._host", f"vmap_{p.rule.batching}"))
    info, in_dims = p.own["info"], p.own["in_dims"]
    helper = p.own[f"vmap_{p.rule.batching}"]
    call = Return(f"{helper}({p.rule.torch_class}, {info}, {in_dims}, {', '.join(p.inputs)})")
    return Def("vmap", (info, in_dims, *p.inputs), (call,), _staticmethod(p))


def _wrapper(p: SnippetPlanner, kept: _Kept, route: str) -> list[Statement]:
    """The public function's body: apply the Function through `route` (see torch_route), residuals dropped."""
    call = f"{route}({', '.join(p.inputs)})"
    if len(kept.values) > len(p.outputs) == 1:
        # A lone output taken from the Function's values where it is returned: no name used once.
        return _returned(p, f"{call}[0]")
    if len(kept.values) > len(p.outputs):
        dropped = [hidden(r) for r in kept.values[len(p.outputs) :]]
        return [Assign(tuple_text([*p.outputs, *dropped]), call), *_returned(p, tuple_text(p.outputs))]
    return _returned(p, call, spread=len(p.outputs) > 1)


def _float_arrays(p: SnippetPlanner) -> list[str]:
    return [i.name for i in p.rule.inputs if not i.static and i.dtype == "float"]


def _arguments(p: SnippetPlanner) -> tuple[Statement, ...]:
    """The public function's array arguments as tensors, bfloat16 and float16 float ones in float32 (rounded
    back by `_returned`); [] without array arguments."""
    lifted = bool(_float_arrays(p))
    return array_arguments(p.rule, "as_opmath_tensors" if lifted else "as_tensors", lifted=lifted)


def _returned(p: SnippetPlanner, value: str, *, spread: bool = False) -> list[Statement]:
    """The return of `value` (the outputs), rounded to the lifted dtype where `_lift` lifted."""
    return list(public_return(p.rule, value, lifted=bool(_float_arrays(p)), spread=spread))
