"""The torch module of a symbolic rule: a torch.func-style autograd.Function."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence

import sympy as sp

from rulegen.derive import Derivation, Partials
from rulegen.forms import (
    TORCH_FUSED_FORMS,
    float_anchors,
    float_forms,
    integral_arrays,
    torch_forms,
)
from rulegen.lines import Block
from rulegen.plan.emit import Emitter
from rulegen.plan.header import TENSORS_IMPORT, array_arguments, header_of, params_of, returns_of
from rulegen.plan.model import Reads, Result, TorchPlan
from rulegen.plan.symbolic import (
    block_texts,
    broadcast_outputs,
    compose,
    dtype_casts,
    linear_combination,
    mentioned,
    names_in,
    needs_broadcast,
    with_fused_forms,
    with_outputs,
)
from rulegen.printers import print_torch, print_torch_compiled
from rulegen.saving import saved_form, saved_intermediates


def plan_torch(d: Derivation) -> TorchPlan:
    """What the torch module of a rule computes: a torch.func-style Function.

    Residuals, the rule's own and the intermediates chosen by
    `saved_intermediates`, are extra outputs of `forward`, saved in
    `setup_context` and hidden by the wrapper.  A residual's cotangent is
    non-None only when a backward that read it is itself differentiated;
    with grads left unmaterialised, the first-order backward skips those
    terms, and the second-order one adds each residual's own partials (the
    MyCube trap).
    """
    d = with_fused_forms(d, TORCH_FUSED_FORMS)
    rule = d.rule
    symbols = dict(d.symbols)
    saved_map = saved_intermediates(d, set(symbols))
    intermediates = [(str(sym), expr) for expr, sym in saved_map.items() if str(sym) not in symbols]
    for name, _ in intermediates:
        symbols[name] = sp.Symbol(name, real=True)

    def rewritten(partials: Partials) -> dict[tuple[str, str], sp.Expr]:
        return {k: saved_form(v, saved_map) for k, v in partials.items()}

    vjp_partials, jvp_partials = rewritten(d.vjp_partials), rewritten(d.jvp_partials)
    residual_partials = dict(d.residual_partials)
    for name, expr in intermediates:
        for i in d.diff_inputs:
            partial = sp.diff(expr, symbols[i.name])
            if partial != 0:
                residual_partials[(name, i.name)] = saved_form(partial, saved_map)
    residuals = [*d.residuals, *intermediates]
    residual_names = tuple(n for n, _ in residuals)
    for n in residual_names:
        symbols[f"{n}_bar"] = sp.Symbol(f"{n}_bar", real=True)
        symbols[f"{n}_dot"] = sp.Symbol(f"{n}_dot", real=True)
    statics = tuple(i.name for i in rule.inputs if i.static)
    integral = [i.name for i in rule.inputs if not i.static and i.dtype in ("int", "bool")]
    booleans = frozenset(i.name for i in rule.inputs if not i.static and i.dtype == "bool")
    printer = functools.partial(print_torch, booleans=booleans)
    in_float = float_forms(
        float_anchors(rule, symbols), integral_arrays(rule, symbols), tensor_only=True, scalars=frozenset(statics)
    )
    native = torch_forms(statics, integral)
    emit = Emitter(printer, symbols, lambda e: native(in_float(e)), statics)
    inputs = tuple(i.name for i in rule.inputs)
    outputs = tuple(o.name for o in rule.outputs)
    diff_inputs = [i.name for i in d.diff_inputs]
    diff_outputs = [o.name for o in rule.outputs if o.differentiable]
    broadcastable = len([i for i in rule.inputs if not i.static]) > 1

    values = [*d.forward, *((n, with_outputs(d, e)) for n, e in residuals)]
    arrays = tuple(i.name for i in rule.inputs if not i.static)
    if len(arrays) > 1:
        shape = f"torch.broadcast_shapes({', '.join(f'{a}.shape' for a in arrays)})"
        zeros = f"torch.zeros({shape}, dtype={arrays[0]}.dtype, device={arrays[0]}.device)"
    else:
        zeros = f"torch.zeros_like({arrays[0]})" if arrays else ""
    wraps = broadcast_outputs(d, f"({{}}) + {zeros}") if arrays else {}
    # An input returned as it is must be a view: torch refuses to save it otherwise.
    aliases = {n for n, e in values if isinstance(e, sp.Symbol) and e.name in arrays and n not in wraps}
    wraps |= {n: f"{{}}.view_as({e})" for n, e in values if n in aliases}
    for n, cast in dtype_casts(rule, {"int": "{}.long()", "bool": "{}.bool()"}).items():
        wraps[n] = compose(cast, wraps.get(n, "{}"))
    forward_results = [Result(n, e, wrap=wraps.get(n, "{}")) for n, e in values]
    forward = emit.block([], forward_results)

    def backward_results(with_residuals: bool) -> list[Result]:
        found = []
        for i in rule.inputs:
            expr = linear_combination(d, vjp_partials, i.name, outputs, "_bar", transpose=True)
            if with_residuals:
                for r in residual_names:
                    expr += residual_partials.get((r, i.name), sp.S.Zero) * symbols[f"{r}_bar"]
            if i.name not in diff_inputs or expr == 0:
                found.append(Result(f"{i.name}_bar", code="None"))
            elif with_residuals and residual_names:
                # Absent cotangents read as 0.0: bring the sum to the input's shape either way.
                wrap = f"({{}} + torch.zeros_like({i.name})).sum_to_size({i.name}.shape)"
                found.append(Result(f"{i.name}_bar", expr, wrap=wrap))
            elif broadcastable:
                found.append(Result(f"{i.name}_bar", expr, wrap=f"{{}}.sum_to_size({i.name}.shape)"))
            else:
                found.append(Result(f"{i.name}_bar", expr))
        return found

    full_results = backward_results(with_residuals=True)
    # Where a backward reads residuals, an absent cotangent is the Python float 0.0 there.
    cotangent_native = torch_forms((*statics, *(f"{n}_bar" for n in (*outputs, *residual_names))), integral)

    def cotangent_forms(expr: sp.Expr) -> sp.Expr:
        return cotangent_native(in_float(expr))

    backward = emit.block([], full_results, cotangent_forms if residual_names else None)
    first_order_results = backward_results(with_residuals=False) if residual_names else []
    first_order = emit.block([], first_order_results) if residual_names else None
    absent = [f"{r}_bar is None" for r in residual_names]
    # gradcheck (check_undefined_grad) calls backward with every cotangent absent.
    present = [f"{o}_bar is not None" for o in diff_outputs]
    first_order_test = " and ".join(present + absent)

    # Residual tangents too: torch.func.hessian runs forward mode over a
    # backward that reads them.
    jvp_results = []
    for o in rule.outputs:
        expr = linear_combination(d, jvp_partials, o.name, diff_inputs, "_dot")
        if not o.differentiable:
            # Marked non-differentiable: torch wants no tangent for it.
            jvp_results.append(Result(f"{o.name}_dot", code="None"))
        elif expr == 0:
            jvp_results.append(Result(f"{o.name}_dot", code=f"torch.zeros_like({o.name})"))
        elif needs_broadcast(d, expr):
            jvp_results.append(Result(f"{o.name}_dot", expr, wrap=f"torch.broadcast_to({{}}, {o.name}.shape)"))
        elif o.name in aliases:
            # The output is a view of an input, so its tangent is a view of that input's.
            jvp_results.append(Result(f"{o.name}_dot", expr, wrap=f"{{}}.view_as({expr})"))
        else:
            jvp_results.append(Result(f"{o.name}_dot", expr))
    for r in residual_names:
        expr = sp.Add(*(residual_partials.get((r, n), 0) * symbols[f"{n}_dot"] for n in diff_inputs))
        if expr == 0:
            jvp_results.append(Result(f"{r}_dot", code=f"torch.zeros_like({r})"))
        else:
            jvp_results.append(Result(f"{r}_dot", expr))
    jvp = emit.block([], jvp_results)
    # Unmaterialised, an input without a tangent gets None; with one array
    # input, jvp only runs when it has one.
    absent_tangents = tuple(diff_inputs) if residual_names and len(diff_inputs) > 1 else ()

    computed = [r.expr for r in (*full_results, *first_order_results, *jvp_results) if r.expr is not None]
    used = names_in(computed) | set(absent_tangents)
    # Fixed code (a zeros_like, a broadcast to an output's shape) reads names too.
    used |= set(mentioned((*inputs, *outputs, *residual_names), block_texts(jvp, backward, first_order)))
    emit.imports.add("import torch")
    statics_used = tuple(s for s in statics if s in used)
    saved = tuple(n for n in (*inputs, *outputs, *residual_names) if n in used and n not in statics)
    non_diff = tuple(o.name for o in rule.outputs if not o.differentiable)
    values_out = (*outputs, *residual_names)
    fused_backward_params: tuple[str, ...] = ()
    fused_forward_compiled = fused_backward_compiled = None
    if rule.fuse:
        compiled = Emitter(
            functools.partial(print_torch_compiled, booleans=booleans),
            symbols,
            lambda e: native(in_float(e)),
            statics,
        )
        fused_forward_compiled = _if_differs(compiled.block([], forward_results), forward)
        eager_backward = first_order or backward
        hot = first_order_results if residual_names else full_results
        fused_backward_compiled = _if_differs(compiled.block([], hot), eager_backward)
        emit.imports |= compiled.imports
        helpers = mentioned(["tanh_expm1"], block_texts(fused_forward_compiled, fused_backward_compiled))
        emit.imports.add(f"from ._fuse import {', '.join(['fused', *helpers])}")
        bars = [f"{o}_bar" for o in outputs] if residual_names else [f"{n}_bar" for n in values_out]
        fused_backward_params = (*saved, *statics_used, *bars)
    # Fused rules compile these bodies instead.
    forward_in_place = backward_in_place = None
    forward_plain = backward_plain = ""
    if not rule.fuse:
        tensors = {*arrays, *values_out, *(f"{n}_bar" for n in values_out)}
        forward_in_place = _in_place(emit, forward_results, tensors)
        forward_plain = _read_names(forward_in_place, arrays)
        hot = first_order_results if residual_names else full_results
        backward_in_place = _in_place(emit, hot, tensors)
        backward_plain = _read_names(backward_in_place, (*saved, *(f"{n}_bar" for n in values_out)))
        if forward_in_place or backward_in_place:
            emit.imports.add("from ._inplace import plain")
    backward_texts = [*block_texts(backward, first_order, backward_in_place), ", ".join(fused_backward_params)]
    jvp_texts = block_texts(jvp) + [f"torch.zeros_like({x})" for x in absent_tangents]
    arguments = array_arguments(rule, "as_tensors")
    if arguments:
        emit.imports.add(TENSORS_IMPORT)
    return TorchPlan(
        header=header_of(d),
        name=rule.name,
        class_name=rule.torch_class,
        params=params_of(rule.inputs, "torch"),
        returns=returns_of(rule, "torch"),
        inputs=inputs,
        statics=statics_used,
        forward=forward,
        outputs=outputs,
        residuals=residual_names,
        non_differentiable=non_diff,
        saved=saved,
        cotangents=tuple(f"{n}_bar" for n in values_out),
        backward=backward,
        first_order=first_order,
        first_order_test=first_order_test,
        fused_backward_params=fused_backward_params,
        fused_forward_compiled=fused_forward_compiled,
        fused_backward_compiled=fused_backward_compiled,
        tangents=tuple(f"{i.name}_dot" for i in rule.inputs),
        absent_tangents=absent_tangents,
        jvp=jvp,
        forward_in_place=forward_in_place,
        forward_plain=forward_plain,
        backward_in_place=backward_in_place,
        backward_plain=backward_plain,
        backward_reads=_reads(saved, statics_used, backward_texts),
        jvp_reads=_reads(saved, statics_used, jvp_texts),
        imports=tuple(sorted(emit.imports)),
        setup_inputs=_targets(inputs, {*saved, *statics_used}, tuple_of_one=True),
        setup_outputs=_targets(values_out, {*saved, *non_diff}, tuple_of_one=False),
        wrapper_targets=", ".join(n if n in outputs else f"_{n}" for n in values_out),
        tensor_arguments=arguments,
    )


def _if_differs(block: Block, than: Block) -> Block | None:
    return block if block != than else None


def _in_place(emit: Emitter, results: Sequence[Result], tensors: set[str]) -> Block | None:
    """The in-place form of `results`, or None where it would be the out-of-place code over again."""
    if not any(r.expr is not None for r in results):
        return None
    return emit.in_place_block(results, tensors)


def _read_names(block: Block | None, names: Sequence[str]) -> str:
    """The `names` that `block` reads, as call arguments."""
    return ", ".join(mentioned(names, block_texts(block))) if block is not None else ""


def _reads(saved: Sequence[str], statics: Sequence[str], texts: Iterable[str]) -> Reads:
    read = set(mentioned((*saved, *statics), texts))
    targets = ", ".join(n if n in read else "_" for n in saved)
    if len(saved) == 1 and targets:
        targets += ","
    return Reads(saved=targets if read & set(saved) else "", statics=tuple(s for s in statics if s in read))


def _targets(names: Sequence[str], kept: set[str], *, tuple_of_one: bool) -> str:
    """Unpacking targets naming the kept values, `_` for the rest; "" if none is kept.

    setup_context gets `inputs` as a tuple always, but `output` as a bare
    value when forward returns one.
    """
    if not kept & set(names):
        return ""
    if len(names) == 1:
        return f"({names[0]},)" if tuple_of_one else names[0]
    return ", ".join(n if n in kept else "_" for n in names)
