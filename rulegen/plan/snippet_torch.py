"""The torch module of a snippet rule: a torch.func-style Function, or the plain body."""

from __future__ import annotations

import textwrap

from rulegen.plan.header import array_arguments, doc_lines, header_of, params_of, returns_of, torch_util_imports
from rulegen.plan.model import Function, SnippetPlan
from rulegen.plan.snippet import SnippetPlanner, body_call, packed, tuple_text
from rulegen.routes import Source
from rulegen.snippet import SnippetDerivation


def plan_torch_snippet(d: SnippetDerivation) -> SnippetPlan:
    """The torch module of a snippet rule: a torch.func-style Function, or a plain function."""
    p = SnippetPlanner(d, "torch")
    rule = d.rule
    imports = p.imports
    imports.add("import torch")
    header = header_of(d)
    params = tuple(map(str, params_of(rule.inputs, "torch")))
    result_type = returns_of(rule, "torch")
    all_args = ", ".join(p.inputs)
    forward = p.code("forward")
    assert forward is not None
    host = forward.host
    cls = rule.torch_class

    arguments = array_arguments(rule, "as_tensors")
    util_names = ["as_tensors"] if arguments else []
    prologue = (*doc_lines(header), *([arguments] if arguments else []))

    if d.jvp is None and d.vjp is None:
        # Nothing custom: torch differentiates the body as it is.
        if p.returned:
            lines = [f"{p.forward_targets()} = {body_call(forward)}", f"return {tuple_text(p.outputs)}"]
        else:
            lines = [f"return {body_call(forward)}"]
        return SnippetPlan(
            header=header,
            name=rule.name,
            imports=torch_util_imports(imports, util_names),
            bodies=p.bodies,
            called=p.called,
            assignments=(),
            public=Function(rule.name, params, (*prologue, *lines), returns=result_type),
            methods=(),
            tail=(),
        )

    # Host residuals are results of the host body, saved; the others are
    # recomputed from saved inputs where a derivative reads them, so that
    # torch differentiates their dependence on the inputs at second order.
    values = (*p.outputs, *p.returned) if host else p.outputs
    routes = d.routes
    needed = p.reads("vjp" if routes.torch_backward == Source.GIVEN else "jvp")
    if routes.torch_jvp != Source.NONE:
        needed |= p.reads("jvp" if routes.torch_jvp == Source.GIVEN else "vjp")
    if routes.torch_jvp == Source.TRANSPOSE:
        # The transposed VJP takes ones like the outputs, whether or not the VJP body reads them.
        needed |= set(p.diff_outputs)
    if routes.torch_backward != Source.GIVEN:
        # The VJP of the JVP takes zeros like the inputs, whether or not the JVP body reads them.
        needed |= set(p.diff_inputs)
    if not host and needed & set(p.returned):
        needed |= set(forward.params)
    float_arrays = [i.name for i in rule.inputs if not i.static and i.dtype == "float"]
    like = float_arrays[0] if float_arrays else (p.arrays[0] if p.arrays else None)

    methods: list[Function] = []
    if host:
        imports.add("from ._host import from_host, to_host")
        args = ", ".join(f"to_host({n})" if n in p.arrays else n for n in forward.params)
        results = list(values)
        lines = [f"{tuple_text(results)} = _forward({args})"]
        converted = []
        for n in results:
            spec = next((o for o in rule.outputs if o.name == n), None)
            if spec is not None and spec.dtype == "float" and like is not None:
                converted.append(f"from_host({n}, {like}, {like}.dtype)")
            else:
                converted.append(f"from_host({n}, {like})" if like else f"torch.as_tensor({n})")
        lines.append(f"return {tuple_text(converted)}")
    else:
        # A body may return an input as it is (`return x`), which torch refuses to save for backward.
        read = ", ".join(a for a in p.arrays if a in forward.params)
        copies = read and needed & set(values)
        result = f"fresh_outputs({body_call(forward)}, {read})" if copies else body_call(forward)
        if copies:
            util_names.append("fresh_outputs")
        if p.returned:
            lines = [f"{p.forward_targets()} = {result}", f"return {tuple_text(p.outputs)}"]
        else:
            lines = [f"return {result}"]
    methods.append(Function("forward", p.inputs, tuple(lines), decorator="@staticmethod"))

    saved = [n for n in (*p.arrays, *values) if n in needed]
    statics = [s for s in p.statics if s in needed]
    # Cotangents summed back to the inputs' shapes, kept on ctx: by the given
    # VJP in backward, and by the transposed VJP that is the forward mode.
    transposed_vjp = routes.torch_jvp == Source.TRANSPOSE
    shapes = [i for i in p.diff_inputs if p.broadcastable and (routes.torch_backward == Source.GIVEN or transposed_vjp)]
    non_diff = [o.name for o in rule.outputs if not o.differentiable] + (list(p.returned) if host else [])
    setup = []
    kept = set(saved) | set(statics) | set(shapes)
    in_targets = [n if n in kept else "_" for n in p.inputs]
    if kept & set(p.inputs):
        setup.append(f"{tuple_text(in_targets)}{',' if len(in_targets) == 1 else ''} = inputs")
    out_kept = set(saved) | set(non_diff)
    if out_kept & set(values):
        setup.append(f"{tuple_text([n if n in out_kept else '_' for n in values])} = output")
    if non_diff:
        setup.append(f"ctx.mark_non_differentiable({', '.join(non_diff)})")
    if saved:
        setup.append(f"ctx.save_for_backward({', '.join(saved)})")
        setup.append(f"ctx.save_for_forward({', '.join(saved)})")
    setup += [f"ctx.{s} = {s}" for s in statics]
    setup += [f"ctx.{i}_shape = {i}.shape" for i in shapes]
    methods.append(Function("setup_context", ("ctx", "inputs", "output"), tuple(setup or ["pass"]), "@staticmethod"))

    def unpack() -> list[str]:
        lines = []
        if saved:
            lines.append(f"{tuple_text(saved)}{',' if len(saved) == 1 else ''} = ctx.saved_tensors")
        lines += [f"{s} = ctx.{s}" for s in statics]
        if not host:
            lines += p.residual_lines(needed, forward_call=True)
        return lines

    # backward
    bars = [f"{n}_bar" if n in p.diff_outputs else f"_{n}_bar" for n in values]
    lines = unpack()
    grads = [f"{i}_bar" for i in p.diff_inputs]
    if routes.torch_backward == Source.GIVEN:
        lines.append(f"{tuple_text(grads)} = {body_call(p.code('vjp'))}")  # type: ignore[arg-type]
    else:
        dots = [f"{i}_dot" for i in p.diff_inputs]
        lines.append(f"def jvp({', '.join(dots)}):")
        lines.append(f"    return {body_call(p.code('jvp'))}")  # type: ignore[arg-type]
        zeros = ", ".join(f"torch.zeros_like({i})" for i in p.diff_inputs)
        lines.append(f"_, transpose = torch.func.vjp(jvp, {zeros})")
        out_bars = packed([f"{o}_bar" for o in p.diff_outputs])
        lines.append(f"{tuple_text(grads)}, = transpose({out_bars})")
    returns = []
    for i in rule.inputs:
        if i.name not in p.diff_inputs:
            returns.append("None")
        elif i.name in shapes:
            returns.append(f"{i.name}_bar.sum_to_size(ctx.{i.name}_shape)")
        else:
            returns.append(f"{i.name}_bar")
    lines.append(f"return {tuple_text(returns)}")
    methods.append(Function("backward", ("ctx", *bars), tuple(lines), "@staticmethod"))

    # jvp
    dots_in = [f"{n}_dot" if n in p.diff_inputs else f"_{n}_dot" for n in p.inputs]
    out_dots = [f"{o}_dot" for o in p.diff_outputs]
    if routes.torch_jvp == Source.NONE:
        reason = routes.no_forward_mode.get("torch", f"{rule.name} has no forward-mode rule")
        pieces = textwrap.wrap(reason, 80, drop_whitespace=False)
        lines = ["raise NotImplementedError(", *(f"    {piece!r}" for piece in pieces), ")"]
    else:
        lines = unpack()
        if routes.torch_jvp == Source.GIVEN:
            lines.append(f"{tuple_text(out_dots)} = {body_call(p.code('jvp'))}")  # type: ignore[arg-type]
        else:
            out_bars = [f"{o}_bar" for o in p.diff_outputs]
            lines.append(f"def vjp({', '.join(out_bars)}):")
            lines.append(f"    {tuple_text(grads)} = {body_call(p.code('vjp'))}")  # type: ignore[arg-type]
            if p.broadcastable:
                shaped = [f"{g}.sum_to_size(ctx.{i}_shape)" for g, i in zip(grads, p.diff_inputs, strict=True)]
                lines.append(f"    return {tuple_text(shaped)}")
            else:
                lines.append(f"    return {tuple_text(grads)}")
            # Linear, so any point will do; ones keep data-dependent loops running.
            ones = ", ".join(f"torch.ones_like({o})" for o in p.diff_outputs)
            lines.append(f"_, transpose = torch.func.vjp(vjp, {ones})")
            lines.append(f"{tuple_text(out_dots)}, = transpose({packed([f'{i}_dot' for i in p.diff_inputs])})")
        tangents = [f"{n}_dot" if n in p.diff_outputs else "None" for n in values]
        lines.append(f"return {tuple_text(tangents)}")
    methods.append(Function("jvp", ("ctx", *dots_in), tuple(lines), "@staticmethod"))

    class_attrs: tuple[str, ...] = ("generate_vmap_rule = True",)
    if host:
        imports.add(f"from ._host import vmap_{rule.batching}")
        class_attrs = ()
        methods.append(
            Function(
                "vmap",
                ("info", "in_dims", *p.inputs),
                (f"return vmap_{rule.batching}({cls}, info, in_dims, {all_args})",),
                "@staticmethod",
            )
        )

    wrapper = [f"function = _{cls}Compiled if torch.compiler.is_compiling() else {cls}"]
    if len(values) > len(p.outputs):
        wrapper.append(
            f"{tuple_text([*p.outputs, *(f'_{r}' for r in values[len(p.outputs) :])])} = function.apply({all_args})"
        )
        wrapper.append(f"return {tuple_text(p.outputs)}")
    else:
        wrapper.append(f"return function.apply({all_args})")
    return SnippetPlan(
        header=header,
        name=rule.name,
        imports=torch_util_imports(imports, util_names),
        bodies=p.bodies,
        called=p.called,
        assignments=(),
        public=Function(rule.name, params, (*prologue, *wrapper), returns=result_type),
        methods=tuple(methods),
        tail=(),
        class_name=cls,
        class_attrs=class_attrs,
        compiled_subclass=True,
    )
