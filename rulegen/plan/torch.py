"""The torch module of a symbolic rule: a torch.func-style autograd.Function."""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, replace

import sympy as sp

from rulegen.computation.cost import eager_passes
from rulegen.derive.functions import cotangent_product, cotangent_sum, cotangent_term
from rulegen.derive.partials import Derivation
from rulegen.plan.code import (
    Assign,
    Block,
    Class,
    Comment,
    Def,
    Docstring,
    If,
    Import,
    Return,
    Statement,
    either,
    fits_a_line,
)
from rulegen.plan.emit import Emitter, Printer, joint_calls
from rulegen.plan.forms import (
    NATIVE_KERNELS,
    corrections,
    float_anchors,
    float_forms,
    integral_arrays,
    torch_forms,
)
from rulegen.plan.header import (
    NAMED_TUPLE_IMPORT,
    array_arguments,
    doc_lines,
    header_of,
    parameters_of,
    public_return,
    result_classes,
    returns_of,
    stability_notes,
    static_check,
    torch_util_imports,
    unpack_helpers,
    unpacked,
)
from rulegen.plan.model import Reads, Result, TorchPlan, Wrap
from rulegen.plan.printers import TANGENT_OR_ZERO_IMPORT, one_kernel, print_torch, print_torch_compiled
from rulegen.plan.symbolic import (
    broadcast_outputs,
    dtype_casts,
    linear_combination,
    needs_broadcast,
)
from rulegen.plan.torch_route import Kept, setup_context_method, torch_route, values_saved
from rulegen.spec.names import (
    COTANGENT,
    TANGENT,
    cotangent,
    ctx_attribute,
    hidden,
    partial_name,
    shape_attribute,
    tangent,
)
from rulegen.spec.rules import Rule


@dataclass(frozen=True)
class _Torch:
    """A symbolic rule as torch's planner sees it: the intermediates it keeps for backward are residuals too.

    Residuals, the rule's own and the intermediates chosen by
    `saved_intermediates`, are extra outputs of `forward`, saved in
    `setup_context` and hidden by the wrapper.  A residual's cotangent is
    non-None only when a backward that read it is itself differentiated;
    with grads left unmaterialised, the first-order backward skips those
    terms, and the second-order one adds each residual's own partials (the
    MyCube trap).
    """

    d: Derivation
    symbols: Mapping[str, sp.Symbol]
    vjp_partials: Mapping[tuple[str, str], sp.Expr]
    jvp_partials: Mapping[tuple[str, str], sp.Expr]
    residual_partials: Mapping[tuple[str, str], sp.Expr]
    residuals: tuple[tuple[str, sp.Expr], ...]  # the rule's own, then the saved intermediates
    residual_values: tuple[tuple[str, sp.Expr], ...]  # the same, as the forward computes them

    @property
    def rule(self) -> Rule:
        return self.d.rule

    @functools.cached_property
    def residual_names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.residuals)

    @functools.cached_property
    def tanh_values(self) -> frozenset[str]:
        """The outputs and residuals whose value is a tanh, which torch's tanh_backward takes (not in complex rules)."""
        if self.rule.complex:
            return frozenset()
        return frozenset(n for n, e in (*self.d.forward, *self.residuals) if isinstance(e, sp.tanh))

    @functools.cached_property
    def arrays(self) -> tuple[str, ...]:
        return tuple(i.name for i in self.rule.inputs if not i.static)

    @functools.cached_property
    def statics(self) -> tuple[str, ...]:
        return tuple(i.name for i in self.rule.inputs if i.static)

    @functools.cached_property
    def outputs(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.rule.outputs)

    @functools.cached_property
    def diff_inputs(self) -> tuple[str, ...]:
        return tuple(i.name for i in self.d.diff_inputs)

    @functools.cached_property
    def non_differentiable(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.rule.outputs if not o.differentiable)

    @functools.cached_property
    def cotangents_absent(self) -> bool:
        """Whether backward may get one cotangent as None beside others, and sums the present ones' terms.

        Where the Function has residual outputs (whose cotangents are absent
        but in a differentiated backward) or two differentiable outputs: a
        zero materialised for an output nobody asked about would multiply the
        other output's partial, 0 * inf = nan where that partial overflows.
        """
        return bool(self.residual_names) or sum(o.differentiable for o in self.rule.outputs) > 1

    @functools.cached_property
    def unmaterialised(self) -> bool:
        """Whether absent cotangents and tangents arrive as None (`ctx.set_materialize_grads(False)`).

        Where cotangents may be absent (above), and where two differentiable
        inputs are, one of which may be held constant: a zero materialised
        for its tangent would multiply its partial, nan where that overflows,
        where autodiff, which has no term for a constant, is right (jvp reads
        an absent tangent as torch's efficient zero, `tangent_or_zero`).
        """
        return self.cotangents_absent or len(self.diff_inputs) > 1

    @functools.cached_property
    def as_autodiff(self) -> bool:
        """Whether the rule's policy (`fast`) takes autodiff's arithmetic as it is: its partials may then be
        multiplied as autodiff multiplies them (`linear_combination`'s `distributed`)."""
        return self.rule.policy == "fast"

    @functools.cached_property
    def output_tangents(self) -> dict[str, sp.Expr]:
        """Each output's tangent from the derived partials: sum over inputs of partial * x_dot."""
        return {
            o.name: linear_combination(
                self.d, self.jvp_partials, o.name, self.diff_inputs, TANGENT, distributed=self.as_autodiff
            )
            for o in self.rule.outputs
        }

    @functools.cached_property
    def absent_tangents(self) -> tuple[str, ...]:
        """Inputs whose tangent may arrive as None.

        Unmaterialised, an input without a tangent gets None; with one array
        input, jvp only runs when it has one.
        """
        return self.diff_inputs if self.unmaterialised and len(self.diff_inputs) > 1 else ()

    def conjugated(self, partial: sp.Expr) -> sp.Expr:
        """A partial as torch's backward multiplies a cotangent by it: conjugated where complex.

        PyTorch's convention (conjugate Wirtinger): for a holomorphic f, the
        gradient reaching z is conj(f'(z)) times the cotangent.  JAX's VJP
        is the plain transpose, f'(z) times it, so only torch conjugates.
        """
        return sp.conjugate(partial) if self.rule.complex else partial

    @functools.cached_property
    def tangents_broadcast(self) -> bool:
        """Whether jvp broadcasts the inputs' tangents against each other before any output's tangent.

        Where an output's tangent reads fewer inputs than its output (`x_dot *
        2 * x` beside `y`), and every array input has a tangent: each tangent
        is then a product with one in the outputs' shape, with no output shape
        kept and no zeros added after (`torch.broadcast_tensors` makes views,
        and keeps torch's efficient zero one).
        """
        return len(self.diff_inputs) > 1 and set(self.arrays) == set(self.diff_inputs) and _tangents_broadcast(self)

    @functools.cached_property
    def backward_partials(self) -> dict[tuple[str, str], sp.Expr]:
        return {k: self.conjugated(v) for k, v in self.vjp_partials.items()}

    @functools.cached_property
    def integral(self) -> tuple[str, ...]:
        return tuple(i.name for i in self.rule.inputs if not i.static and i.dtype in ("int", "bool"))

    @functools.cached_property
    def in_float(self) -> Callable[[sp.Expr], sp.Expr]:
        rule, symbols = self.rule, self.symbols
        return float_forms(
            float_anchors(rule, symbols),
            integral_arrays(rule, symbols),
            for_torch=True,
            scalars=frozenset(self.statics),
        )

    def forms(self, *cotangents: str) -> Callable[[sp.Expr], sp.Expr]:
        """What torch computes of an expression: its corrected functions, the float rewrites, the one-kernel forms
        (those of products with the `cotangents` too)."""
        inputs = tuple(i.name for i in self.rule.inputs if not i.static)
        native = torch_forms((*self.statics, *cotangents), self.integral, self.tanh_values, inputs)
        in_float = self.in_float
        corrected = corrections("torch")
        return lambda e: native(in_float(corrected(e)))

    def emitter(self, printer: Printer, *, in_ctx: bool = False) -> Emitter:
        """An emitter of `printer`'s code, after the float rewrites and torch's one-kernel forms.

        `in_ctx`: for a Function's derivative methods, which read a static input from ctx where they use it.
        """
        booleans = frozenset(i.name for i in self.rule.inputs if not i.static and i.dtype == "bool")
        # A lone output's cotangent is present wherever backward runs (its residuals are the wrapper's own): its
        # terms are computed as they stand, the residuals' and those of several outputs only where present.
        present = frozenset({cotangent(self.outputs[0])} if len(self.outputs) == 1 else ())
        return Emitter(
            functools.partial(printer, booleans=booleans, own=self.rule.own_names, present=present),
            self.symbols,
            self.forms(),
            self.statics,
            {s: f"{self.rule.torch_context}.{ctx_attribute(s)}" for s in self.statics} if in_ctx else None,
        )


def _with_saved_intermediates(d: Derivation) -> _Torch:
    """`d` as torch prints it (`Derivation.torch`): reading the intermediates the derivation keeps, each a
    residual with its own partials."""
    f = d.torch
    return _Torch(
        f.derivation,
        dict(f.symbols),
        dict(f.vjp_partials),
        dict(f.jvp_partials),
        dict(f.residual_partials),
        f.residuals,
        f.residual_values,
    )


@dataclass(frozen=True)
class _Backward:
    """The backward bodies: every present cotangent's terms, and the outputs' only, with every one present.

    The eager out-of-place backward is the first alone: each absent term is
    skipped, not added as a zero, so it costs what the outputs' terms do.
    The second is what the in-place body and a fused rule's compiled body
    compute (`first_order_block`, printed for fused rules only).
    """

    full: list[Result]
    first_order: list[Result]  # [] when cotangents are materialised: `full` is then every output's terms
    block: Block
    first_order_block: Block | None

    @property
    def reads(self) -> frozenset[str]:
        return self.block.reads | (self.first_order_block.reads if self.first_order_block else frozenset())

    @property
    def hot(self) -> list[Result]:
        """What a first-order backward computes: the body worth fusing or running in place."""
        return self.first_order or self.full


def plan_torch(d: Derivation) -> TorchPlan:
    """What the torch module of a rule computes: a torch.func-style Function (see `_Torch` for its residuals)."""
    t = _with_saved_intermediates(d)
    rule = t.rule
    emit = t.emitter(print_torch)
    in_ctx = t.emitter(print_torch, in_ctx=True)
    # Fused bodies are functions of the statics too, compiled without ctx to ask.
    method = emit if rule.fuse else in_ctx
    jacobian = _jacobian(t, emit, in_ctx)
    t = jacobian.torch
    forward_results, aliases = _forward_results(t)
    forward = emit.block([], forward_results)
    backward, jvp_results, jvp = _derivative_bodies(t, aliases, emit, in_ctx, method, jacobian)
    used = jvp.reads | backward.reads | set(t.absent_tangents)
    emit.imports.add(Import("torch"))
    if t.absent_tangents:
        emit.imports.add(TANGENT_OR_ZERO_IMPORT)
    statics_used = tuple(s for s in t.statics if s in used)
    values_out = (*t.outputs, *t.residual_names)
    saved = tuple(n for n in (*(i.name for i in rule.inputs), *values_out) if n in used and n not in t.statics)
    fused = _fused(t, forward_results, forward, backward, (*saved, *statics_used)) if rule.fuse else _Fused()
    emit.imports |= fused.imports
    # Fused rules compile these bodies instead.
    in_place = (
        _InPlace() if rule.fuse else _in_place_bodies(t, emit, method, forward_results, backward.hot, saved, jacobian)
    )
    emit.imports |= in_ctx.imports
    float_arrays = tuple(i.name for i in rule.inputs if not i.static and i.dtype == "float")
    lifted = bool(float_arrays) and not _opmath_bodies(t, emit, forward_results, backward.hot, jvp_results)
    helpers: set[str] = set()
    if any(not i.static for i in rule.inputs):
        helpers = {*(("as_opmath_tensors", "rounded") if lifted else ("as_tensors",)), *unpack_helpers(rule)}
    if static_check(rule):
        helpers.add("check_statics")
    backward_reads = backward.reads | in_place.backward_reads | set(fused.backward_params)
    non_diff = t.non_differentiable
    kept_for_jvp = _tangents_broadcast(t) and not t.tangents_broadcast and not _broadcasts_from(t, backward.reads)
    shape_kept = t.outputs[0] if kept_for_jvp else ""
    route = torch_route(rule, len(values_out))
    wrapped = [*forward_results, *backward.full, *backward.first_order, *jvp_results]
    function_helpers = {"RuleFunction", "routed", *set().union(*(r.wrap.helpers for r in wrapped))}
    kept = Kept(
        tuple(i.name for i in rule.inputs),
        values_out,
        saved,
        statics_used,
        (shape_kept,) if shape_kept else (),
        non_diff,
        t.unmaterialised,
    )
    if values_saved(kept) is not None:
        function_helpers.add("saves_inputs")
    elif saved:
        function_helpers.add("save_for_derivatives")
    function_helpers |= {"plain"} if in_place.forward or in_place.backward else set()
    classes = result_classes(rule, "torch")
    if classes:
        emit.imports.add(NAMED_TUPLE_IMPORT)
    plan = TorchPlan(
        # The docstring shows silu's derivative as sympy derived it, not by an internal function's name.
        header=header_of(d.fused, "torch"),
        name=rule.name,
        class_name=rule.torch_class,
        own=rule.own_names,
        params=parameters_of(rule, "torch"),
        unpack=unpacked(rule),
        returning=_returning(t, lifted),
        returns=returns_of(rule, "torch"),
        inputs=tuple(i.name for i in rule.inputs),
        statics=statics_used,
        forward=forward,
        outputs=t.outputs,
        residuals=t.residual_names,
        non_differentiable=non_diff,
        saved=saved,
        cotangents=tuple(cotangent(n) for n in values_out),
        backward=backward.block,
        first_order=backward.first_order_block,
        unmaterialised=t.unmaterialised,
        cotangents_absent=t.cotangents_absent,
        fused_backward_params=fused.backward_params,
        fused_forward_compiled=fused.forward,
        fused_backward_compiled=fused.backward,
        tangents=tuple(tangent(i.name) for i in rule.inputs),
        absent_tangents=tuple((x, tangent(x)) for x in t.absent_tangents),
        tangents_broadcast=t.tangents_broadcast,
        jvp=jvp,
        forward_in_place=in_place.forward,
        forward_plain=in_place.forward_plain,
        backward_in_place=in_place.backward,
        backward_plain=in_place.backward_plain,
        gradients_wanted=_gradients_wanted(t),
        backward_reads=_reads(saved, statics_used if rule.fuse else (), backward_reads),
        jvp_reads=_reads(saved, (), jvp.reads | set(t.absent_tangents)),
        jvp_is_backward=_jvp_is_backward(t, aliases),
        imports=torch_util_imports(emit.imports, sorted(helpers), sorted(function_helpers), rule.own_names),
        shape_kept=shape_kept,
        partials=jacobian.helper,
        partials_call=jacobian.call,
        static_check=static_check(rule),
        tensor_arguments=array_arguments(rule, "as_opmath_tensors" if lifted else "as_tensors", lifted=lifted),
        forward_notes=stability_notes(t.d),
        float_arrays=float_arrays,
        lifted=lifted,
        route=route.route,
        routed_line=route.op,
        result_classes=classes,
    )
    return replace(plan, definitions=torch_definitions(plan))


def _returning(t: _Torch, lifted: bool) -> tuple[Statement, ...]:
    """The wrapper's last lines: the Function's outputs (its residuals dropped), rounded where lifted."""
    call = f"{torch_route(t.rule, 0).route}({', '.join(i.name for i in t.rule.inputs)})"
    if t.residual_names and len(t.outputs) > 1:
        return public_return(t.rule, ", ".join(t.outputs), lifted=lifted, spread=False)
    if t.residual_names:
        # A lone output taken from the Function's values where it is returned: no name used once.
        return public_return(t.rule, f"{call}[0]", lifted=lifted, spread=False)
    return public_return(t.rule, call, lifted=lifted, spread=len(t.outputs) > 1)


def _opmath_bodies(t: _Torch, emit: Emitter, forward: list[Result], hot: list[Result], jvp: list[Result]) -> bool:
    """Whether every body is one torch kernel of the rule's float arrays and their cotangents or tangents.

    torch's elementwise kernels compute bfloat16 and float16 in float32 and
    round once (their "opmath"), so such a body computes those dtypes as the
    float32 lift would, and the lift would add only its own passes over
    memory: two casts in, one out, each way (softplus in eager, bfloat16:
    1.3-1.5x the time of its kernels alone).  A body reading anything else
    lifts: an output or a residual would have been saved rounded, and a
    second kernel would round the first one's result.
    """
    if t.residual_names or t.integral:
        return False
    arrays = frozenset(t.symbols[a] for a in t.arrays)
    scalars = frozenset(t.symbols[s] for s in t.statics)

    def one_kernel_each(results: list[Result], operands: frozenset[sp.Symbol]) -> bool:
        return all(
            r.wrap == Wrap() and (r.expr is None or one_kernel(emit.forms(r.expr), operands, scalars)) for r in results
        )

    cotangents = frozenset(t.symbols[cotangent(o)] for o in t.outputs)
    tangents = frozenset(t.symbols[tangent(i)] for i in t.diff_inputs)
    return (
        one_kernel_each(forward, arrays)
        and one_kernel_each(hot, arrays | cotangents)
        and one_kernel_each(jvp, arrays | tangents)
    )


def _broadcast(t: _Torch) -> Wrap:
    """A value in the shape of all the rule's arrays (the runtime's `broadcast`)."""
    arrays = t.arrays
    return Wrap(
        f"{t.rule.own_names['broadcast']}({{}}, {', '.join(arrays)})", frozenset(arrays), frozenset({"broadcast"})
    )


def _broadcasts_from(t: _Torch, kept: frozenset[str]) -> bool:
    """Whether `kept` holds every array an output is broadcast over (see `_broadcast`)."""
    return bool(t.arrays) and set(t.arrays) <= kept


def _forward_results(t: _Torch) -> tuple[list[Result], set[str]]:
    """The forward's outputs and residuals, and the outputs that are an input as it is (returned as views)."""
    d, arrays = t.d, t.arrays
    values = [*d.forward, *t.residual_values]
    wraps = broadcast_outputs(d, _broadcast(t)) if arrays else {}
    # An input returned as it is must be a view: torch refuses to save it otherwise.  A view's
    # tangent must be a view of the input's tangent, so where the rule's derivative is not 1
    # (a clipped gradient) the output is a copy instead.
    returned = {n: e for n, e in values if isinstance(e, sp.Symbol) and e.name in arrays and n not in wraps}
    aliases = {n for n, e in returned.items() if _tangent_is_the_inputs(t, n, e)}
    wraps |= {n: Wrap.method(f"view_as({e})", frozenset({e.name})) for n, e in returned.items() if n in aliases}
    wraps |= {n: Wrap.method("clone()") for n in returned if n not in aliases}
    for n, cast in dtype_casts(t.rule, {"int": "long()", "bool": "bool()"}).items():
        wraps[n] = cast.around(wraps.get(n, Wrap()))
    return [Result(n, e, wrap=wraps.get(n, Wrap())) for n, e in values], aliases


def _tangent_is_the_inputs(t: _Torch, output: str, value: sp.Symbol) -> bool:
    """Whether forward mode gives the output (or residual) `value`'s own tangent: an identity, or no forward mode."""
    if output in t.residual_names:
        return True
    return t.output_tangents[output] in (0, t.symbols[tangent(value.name)])


def _backward_results(t: _Torch, *, with_residuals: bool, guarded: bool = True) -> list[Result]:
    """One cotangent per input: the transposed partials, with the residuals' terms or without.

    With the residuals' terms (the backward for any cotangent absent, or for
    one being differentiated), the gradient is a `cotangent_sum` of
    `cotangent_term`s: nothing where a term's cotangent is None.
    """
    found = []
    broadcastable = len(t.arrays) > 1
    for k, i in enumerate(t.rule.inputs):
        # With several inputs, one may need no gradient (data, or a frozen parameter): it is not computed.
        guard = f"{t.rule.torch_context}.needs_input_grad[{k}]" if guarded and len(t.diff_inputs) > 1 else ""
        if with_residuals and t.cotangents_absent:
            expr = _terms_of_present_cotangents(t, i.name)
        else:
            expr = linear_combination(
                t.d, t.backward_partials, i.name, t.outputs, COTANGENT, transpose=True, distributed=t.as_autodiff
            )
        reads = frozenset({i.name})
        if i.name not in t.diff_inputs or expr == 0:
            found.append(Result(cotangent(i.name), code="None"))
        elif with_residuals and t.cotangents_absent:
            found.append(Result(cotangent(i.name), expr, guard=guard))
        elif broadcastable:
            wrap = Wrap.method(f"sum_to_size({i.name}.shape)", reads)
            found.append(Result(cotangent(i.name), expr, wrap=wrap, guard=guard))
        else:
            found.append(Result(cotangent(i.name), expr, guard=guard))
    return found


def _terms_of_present_cotangents(t: _Torch, name: str) -> sp.Expr:
    """The gradient of input `name`: each output's and residual's partial times its cotangent, where present.

    Where one of torch's native kernels computes an output's partial times its cotangent (`-out_bar *
    sigmoid(u)`, softplus's backward, negated), the term is that product (`cotangent_product`), not a pair for
    the runtime to multiply: for a rule of one differentiable input, whose other gradients cse could share it
    with (computing it before its cotangent is known present) there are none.
    """
    partials = [(o, t.backward_partials.get((o, name), sp.S.Zero)) for o in t.outputs]
    partials += [(r, t.conjugated(t.residual_partials.get((r, name), sp.S.Zero))) for r in t.residual_names]

    def term(n: str, p: sp.Expr) -> sp.Expr:
        c = t.symbols[cotangent(n)]
        if n in t.outputs and len(t.diff_inputs) == 1:
            native = t.forms(*(cotangent(m) for m in (*t.outputs, *t.residual_names) if m != n))
            if _native_kernels(product := native(c * p)) > _native_kernels(native(p)):
                return cotangent_product(c, product)
        return cotangent_term(c, p)

    terms = [term(n, p) for n, p in partials if p != 0]
    return cotangent_sum(t.symbols[name], *terms) if terms else sp.S.Zero


def _native_kernels(expr: sp.Expr) -> int:
    """How many of torch's one-kernel forms (`plan.forms.torch_forms`) `expr` computes."""
    return sum(1 for node in sp.preorder_traversal(expr) if isinstance(node, NATIVE_KERNELS))


def _backward(t: _Torch, emit: Emitter) -> _Backward:
    # Fused bodies are compiled functions of tensors alone, without ctx to ask.
    guarded = not t.rule.fuse
    full = _backward_results(t, with_residuals=True, guarded=guarded)
    if not t.cotangents_absent:
        return _Backward(full, [], emit.block([], full), None)
    block = emit.block([], full, t.forms(*(cotangent(n) for n in (*t.outputs, *t.residual_names))))
    first_order = _backward_results(t, with_residuals=False, guarded=guarded)
    return _Backward(full, first_order, block, emit.block([], first_order) if t.rule.fuse else None)


def _gradients_wanted(t: _Torch) -> tuple[int, ...]:
    """The inputs, by position, whose gradients the in-place backward computes all of, where it checks they are
    wanted: where two inputs or more may each want one or not."""
    if t.rule.fuse or len(t.diff_inputs) < 2:
        return ()
    return tuple(k for k, i in enumerate(t.rule.inputs) if i.differentiable)


def _jvp_is_backward(t: _Torch, aliases: Set[str]) -> bool:
    """Whether jvp is backward over again: a real rule of one input and one output, computed anew.

    Its derivative is then a number per element, which scales a tangent
    as it scales a cotangent (torch's `auto_element_wise` forward
    derivatives): one method, the in-place body included, serves both.
    """
    rule = t.rule
    if rule.complex or rule.fuse or len(rule.inputs) != 1 or len(rule.outputs) != 1 or t.residual_names:
        return False
    (x,), (out,) = rule.inputs, rule.outputs
    if x.name not in t.diff_inputs or not out.differentiable or out.dtype != "float" or out.name in aliases:
        return False
    partial = t.jvp_partials.get((out.name, x.name), sp.S.Zero)
    return partial != 0 and t.backward_partials.get((out.name, x.name)) == partial


def _tangents_broadcast(t: _Torch) -> bool:
    """Whether an output's tangent lacks the outputs' shape (see `_jvp_parts`), which jvp then broadcasts to."""
    tangents = (t.output_tangents[o.name] for o in t.rule.outputs if o.differentiable)
    return any(needs_broadcast(t.d, tangent) for tangent in tangents if tangent != 0)


def _jvp_parts(
    t: _Torch, aliases: set[str], forms: Callable[[sp.Expr], sp.Expr], kept: frozenset[str]
) -> tuple[list[tuple[str, sp.Expr]], list[Result]]:
    """One tangent per output, then per residual; and the residual tangents computed first, as lets.

    A tangent of fewer inputs than its output is broadcast as forward
    broadcasts the output where backward keeps (`kept`) all of them.

    Residual tangents too: torch.func.hessian runs forward mode over a
    backward that reads them.  Since jvp computes them anyway, an output
    whose forward reads residuals takes its tangent from theirs where that
    runs fewer operations (`_chained_tangents`); those residual tangents are
    the lets.
    """
    torch = t.rule.own_names["torch"]
    residual_tangents = {r: _residual_tangent(t, r) for r in t.residual_names}
    direct = t.output_tangents
    chained = {
        o: e for o, e in _chained_tangents(t).items() if o not in aliases and not needs_broadcast(t.d, direct[o])
    }
    if chained and _eager_cost(t, forms, [*chained.values(), *residual_tangents.values()]) >= _eager_cost(
        t, forms, [*(direct[o] for o in chained), *residual_tangents.values()]
    ):
        chained = {}
    read = {s.name for e in chained.values() for s in e.free_symbols}
    lets = [(tangent(r), e) for r, e in residual_tangents.items() if tangent(r) in read]
    results = []
    for o in t.rule.outputs:
        expr = chained.get(o.name, direct[o.name])
        reads = frozenset({o.name})
        if not o.differentiable:
            # Marked non-differentiable: torch wants no tangent for it.
            results.append(Result(tangent(o.name), code="None"))
        elif expr == 0:
            results.append(Result(tangent(o.name), code=f"{torch}.zeros_like({o.name})", reads=reads))
        elif t.tangents_broadcast:
            results.append(Result(tangent(o.name), expr))
        elif needs_broadcast(t.d, direct[o.name]) and _broadcasts_from(t, kept):
            # As forward broadcasts the output, from the inputs backward keeps anyway.
            results.append(Result(tangent(o.name), expr, wrap=_broadcast(t)))
        elif needs_broadcast(t.d, direct[o.name]):
            # To the shape setup_context keeps (`shape_kept`): a saved output would stay in memory for it.
            shape = f"{t.rule.torch_context}.{shape_attribute(t.outputs[0])}"
            results.append(Result(tangent(o.name), expr, wrap=Wrap(f"{torch}.broadcast_to({{}}, {shape})")))
        elif o.name in aliases:
            # The output is a view of an input, so its tangent is a view of that input's.
            wrap = Wrap.method(f"view_as({expr})", frozenset(s.name for s in expr.free_symbols))
            results.append(Result(tangent(o.name), expr, wrap=wrap))
        else:
            results.append(Result(tangent(o.name), expr))
    for r, expr in residual_tangents.items():
        if tangent(r) in read:
            results.append(Result(tangent(r), t.symbols[tangent(r)]))
        elif expr == 0:
            results.append(Result(tangent(r), code=f"{torch}.zeros_like({r})", reads=frozenset({r})))
        else:
            results.append(Result(tangent(r), expr))
    return lets, results


def _residual_tangent(t: _Torch, residual: str) -> sp.Expr:
    return sp.Add(*(t.residual_partials.get((residual, n), 0) * t.symbols[tangent(n)] for n in t.diff_inputs))


def _chained_tangents(t: _Torch) -> dict[str, sp.Expr]:
    """Output tangents from the residuals' tangents, as autodiff chains them (`Derivation.chained_tangents`), a
    factor several terms share multiplied once."""
    arrays = frozenset(t.symbols[a] for a in t.arrays)
    return {
        o: _shared_factors_once([(sp.Mul.make_args(p), dot) for p, dot in terms], arrays)
        for o, terms in t.d.chained_tangents
    }


def _shared_factors_once(
    terms: Sequence[tuple[tuple[sp.Expr, ...], sp.Expr]], inputs: Set[sp.Expr] = frozenset()
) -> sp.Expr:
    """The sum of each term's factors times its tangent, a factor several terms share multiplied once.

    `y * (s_sin * s_exp_dot + s_exp * s_sin_dot)`, not `s_sin * y * s_exp_dot
    + s_exp * y * s_sin_dot`: a pass over memory fewer in eager torch.  Of
    factors shared as often, an input goes first, as autodiff of `f(x) * y`
    multiplies the sum of f's terms by y: at y = inf that is inf or -inf,
    where multiplying each term by y first could add inf to -inf.
    """
    counts = Counter(f for factors, _ in terms for f in set(factors) if not f.is_number)
    shared = max(sorted(counts, key=sp.default_sort_key), key=lambda f: (counts[f], f in inputs), default=None)
    if shared is None or counts[shared] < 2:
        products = [(sp.Mul(*factors), dot) for factors, dot in terms]
        return sp.Add(*((sp.UnevaluatedExpr(p) if p.is_Mul else p) * dot for p, dot in products))
    having = [(_without(factors, shared), dot) for factors, dot in terms if shared in factors]
    rest = [term for term in terms if shared not in term[0]]
    return shared * _shared_factors_once(having, inputs) + (_shared_factors_once(rest, inputs) if rest else 0)


def _without(factors: tuple[sp.Expr, ...], factor: sp.Expr) -> tuple[sp.Expr, ...]:
    k = factors.index(factor)
    return factors[:k] + factors[k + 1 :]


def _eager_cost(t: _Torch, forms: Callable[[sp.Expr], sp.Expr], exprs: Sequence[sp.Expr]) -> int:
    """Passes over memory eager torch makes computing `exprs` together (shared parts once; see `eager_passes`)."""
    scalars = {t.symbols[s] for s in t.statics}
    return eager_passes([forms(e) for e in exprs], scalars)


def _derivative_bodies(
    t: _Torch, aliases: set[str], emit: Emitter, in_ctx: Emitter, method: Emitter, jacobian: _Jacobian
) -> tuple[_Backward, list[Result], Block]:
    """The backward, and the jvp's results and block, each reading what the `jacobian`'s call reads."""
    backward = _backward(t, method)
    backward = replace(backward, block=jacobian.read_by(backward.block))
    jvp_lets, jvp_results = _jvp_parts(t, aliases, emit.forms, backward.reads)
    return backward, jvp_results, jacobian.read_by(in_ctx.block(jvp_lets, jvp_results))


@dataclass(frozen=True)
class _Jacobian:
    """The partials backward and jvp both multiply, computed once by a module-level function both call.

    A person writing polar by hand computes its scaled quotients once, in a
    function of x, y and r that returns the four partials, and multiplies
    cotangents and tangents by them; `torch` is the rule as the methods then
    read it, each compound partial a name.
    """

    torch: _Torch
    helper: Def | None = None  # None: each method computes the partials it multiplies
    call: Assign | None = None  # `dr_dx, ... = _partials(x, y, r)`, as a method reads it (statics from ctx)
    names: tuple[str, ...] = ()

    def read_by(self, block: Block) -> Block:
        """`block`, which reads the partials by name, reading what the call does instead where it reads any."""
        if self.helper is None or not block.reads & set(self.names):
            return block
        return replace(block, reads=(block.reads - set(self.names)) | set(self.helper.params))


#: The module-level function computing the partials backward and jvp share (`_Jacobian`).
PARTIALS_FUNCTION = "_partials"


def _jacobian(t: _Torch, emit: Emitter, method: Emitter) -> _Jacobian:
    """The partials as one function that backward and jvp call, where they share a subexpression.

    Only where the two multiply the same partials (a real rule of two inputs
    or more, no residual, nothing broadcast), where the partials share
    a temporary that each method would compute anew, and where neither
    method then runs more passes over memory than it does computing its own
    (torch's one-kernel forms of a product with a cotangent stay whole);
    always where they call hypot's or atan2's partials, which one runtime
    call of their point computes on one scaling (`emit.joint_calls`).
    """
    rule = t.rule
    if rule.complex or rule.fuse or t.residual_names or len(t.diff_inputs) < 2 or _tangents_broadcast(t):
        return _Jacobian(t)
    if dict(t.vjp_partials) != dict(t.jvp_partials):
        return _Jacobian(t)
    compound = {k: v for k, v in t.jvp_partials.items() if not v.is_Atom and v.free_symbols}
    if len(compound) < 2:
        return _Jacobian(t)
    taken = set(t.symbols) | set(rule.own_names.values())
    names = {k: _unclaimed(partial_name(*k), taken) for k in compound}
    # hypot's and atan2's partials of one point from one runtime call, on one scaling (`joint_calls`).
    joint, computed, joint_reads = joint_calls(compound, taken | set(names.values()), emit, rule.own_names)
    block = emit.block([], [Result(names[k], e) for k, e in computed.items()])
    if not joint and not any(isinstance(line, Assign) and line.target not in names.values() for line in block.lines):
        return _Jacobian(t)  # nothing shared: each method computes only the partials it multiplies
    symbols = {name: t.d.value_symbol(name) for name in names.values()}
    named = {k: symbols[names[k]] if k in compound else v for k, v in t.jvp_partials.items()}
    shared = replace(t, symbols={**t.symbols, **symbols}, vjp_partials=named, jvp_partials=named)
    bars = [cotangent(o) for o in t.outputs]
    partials_cost = _eager_cost(t, t.forms(), list(compound.values()))
    for before, after, forms in (
        (_hot_exprs(t), _hot_exprs(shared), t.forms(*bars)),
        (list(t.output_tangents.values()), list(shared.output_tangents.values()), t.forms()),
    ):
        if not joint and partials_cost + _eager_cost(t, forms, after) > _eager_cost(t, forms, before):
            return _Jacobian(t)
    order = [*(i.name for i in rule.inputs), *t.outputs]
    params = tuple(n for n in order if n in block.reads | joint_reads)
    listed = ", ".join(f"d{o}/d{i}" for o, i in compound)
    doc = Docstring(f"The partials {listed}, which backward and jvp multiply.")
    body: tuple[Statement, ...] = (*joint, *block.statements)
    helper = Def(PARTIALS_FUNCTION, params, (doc, *body))
    arguments = ", ".join(method.code(t.symbols[p]) for p in params)
    call = Assign(", ".join(names.values()), f"{PARTIALS_FUNCTION}({arguments})")
    return _Jacobian(shared, helper, call, tuple(names.values()))


def _unclaimed(name: str, taken: Set[str]) -> str:
    """`name` (`dr_dx`), `_` before it until no name of the rule's is it."""
    while name in taken:
        name = "_" + name
    return name


def _hot_exprs(t: _Torch) -> list[sp.Expr]:
    """What the first-order backward computes (its results' expressions)."""
    return [r.expr for r in _backward_results(t, with_residuals=False) if r.expr is not None]


@dataclass(frozen=True)
class _Fused:
    """With `fuse`, the bodies torch.compile runs where they differ from the eager ones, and what they need."""

    forward: Block | None = None
    backward: Block | None = None
    backward_params: tuple[str, ...] = ()
    imports: frozenset[Import] = frozenset()


def _fused(
    t: _Torch, forward_results: list[Result], forward: Block, backward: _Backward, known: Sequence[str]
) -> _Fused:
    compiled = t.emitter(print_torch_compiled)
    forward_compiled = _if_differs(compiled.block([], forward_results), forward)
    eager_backward = backward.first_order_block or backward.block
    backward_compiled = _if_differs(compiled.block([], backward.hot), eager_backward)
    imports = compiled.imports | {Import("._fuse", "fused")}
    values_out = (*t.outputs, *t.residual_names)
    bars = [cotangent(o) for o in t.outputs] if t.residual_names else [cotangent(n) for n in values_out]
    return _Fused(forward_compiled, backward_compiled, (*known, *bars), frozenset(imports))


@dataclass(frozen=True)
class _InPlace:
    """Bodies that update their own buffers in place (rulegen.plan.inplace), and the tensors `plain(...)` checks."""

    forward: Block | None = None
    forward_plain: tuple[str, ...] = ()
    backward: Block | None = None
    backward_plain: tuple[str, ...] = ()

    @property
    def backward_reads(self) -> frozenset[str]:
        return self.backward.reads if self.backward is not None else frozenset()


def _in_place_bodies(
    t: _Torch,
    emit: Emitter,
    method: Emitter,
    forward_results: list[Result],
    hot: list[Result],
    saved: Sequence[str],
    jacobian: _Jacobian,
) -> _InPlace:
    """The forward's in-place form by `emit`, the backward's by `method` (its statics read from ctx).

    Where the `jacobian` names partials, the backward reads them so, tensors it does not own, and `plain(...)`
    checks what they are computed from: plain tensors of one shape give plain partials of that shape.
    """
    values_out = (*t.outputs, *t.residual_names)
    tensors = {*t.arrays, *values_out, *(cotangent(n) for n in values_out)}
    forward = _in_place(emit, forward_results, tensors)
    backward = _in_place(method, hot, tensors | set(jacobian.names))
    checked = jacobian.read_by(backward) if backward else backward
    return _InPlace(
        forward,
        _read_names(forward, t.arrays),
        backward,
        _read_names(checked, (*saved, *(cotangent(n) for n in values_out))),
    )


def _if_differs(block: Block, than: Block) -> Block | None:
    return block if block != than else None


def _in_place(emit: Emitter, results: Sequence[Result], tensors: set[str]) -> Block | None:
    """The in-place form of `results`, or None where it would be the out-of-place code over again."""
    if not any(r.expr is not None for r in results):
        return None
    return emit.in_place_block(results, tensors)


def _read_names(block: Block | None, names: Sequence[str]) -> tuple[str, ...]:
    """The `names` that `block` reads."""
    return tuple(n for n in names if n in block.reads) if block is not None else ()


def _reads(saved: Sequence[str], statics: Sequence[str], read: Set[str]) -> Reads:
    """What a method unpacks of `saved` and `statics`: those it `read`s."""
    targets = ", ".join(n if n in read else "_" for n in saved)
    if len(saved) == 1 and targets:
        targets += ","
    return Reads(saved=targets if read & set(saved) else "", statics=tuple(s for s in statics if s in read))


_JVP_IS_BACKWARD = Assign("jvp", "backward")


def torch_definitions(plan: TorchPlan) -> tuple[Statement, ...]:
    """What the module defines after its imports: the fused bodies, the Function, its route, the public function."""
    own = plan.own
    static = own["staticmethod"]
    fused = _fused_definitions(plan)
    backward = Def("backward", (own["ctx"], *plan.cotangents), _backward_body(plan), (static,))
    jvp: tuple[Statement, ...] = (
        (_JVP_IS_BACKWARD,)
        if plan.jvp_is_backward
        else (Def("jvp", (own["ctx"], *plan.tangents), _jvp_body(plan), (static,)),)
    )
    methods = (
        Def("forward", plan.inputs, _forward_body(plan), (static,)),
        setup_context_method(_kept(plan), own, (static,)),
        backward,
        *jvp,
    )
    doc = (Docstring(plan.header.class_help),) if plan.header.class_help else ()
    function = Class(plan.class_name, (own["RuleFunction"],), (*doc, *methods))
    partials = (plan.partials,) if plan.partials else ()
    return (*fused, *partials, function, plan.routed_line, *plan.result_classes, _public(plan))


def _fused_definitions(plan: TorchPlan) -> tuple[Statement, ...]:
    """With `fuse`, the bodies torch.compile fuses: `_forward`, `_backward`, each with its compiled variant."""
    if not plan.fused_backward_params:
        return ()
    found: list[Statement] = []
    decorator = plan.own["fused"]
    for name, params, eager, compiled, notes in (
        ("_forward", plan.inputs, plan.forward, plan.fused_forward_compiled, plan.forward_notes),
        ("_backward", plan.fused_backward_params, plan.first_order or plan.backward, plan.fused_backward_compiled, ()),
    ):
        if compiled is not None:
            found.append(Def(f"{name}_compiled", params, compiled.statements))
        called = f"{decorator}(compiled={name}_compiled)" if compiled is not None else decorator
        found.append(Def(name, params, (*map(Comment, notes), *eager.statements), (called,)))
    return tuple(found)


def _forward_body(plan: TorchPlan) -> tuple[Statement, ...]:
    if plan.fused_backward_params:
        return (Return(f"_forward({', '.join(plan.inputs)})"),)
    notes = tuple(Comment(note) for note in plan.forward_notes)
    if not plan.forward_in_place:
        return (*notes, *plan.forward.statements)
    test = _plain(plan, plan.forward_plain)
    return (*notes, *either(test, plan.forward_in_place.statements, plan.forward.statements))


def _kept(plan: TorchPlan) -> Kept:
    """What the Function's setup_context keeps."""
    return Kept(
        inputs=plan.inputs,
        values=(*plan.outputs, *plan.residuals),
        saved=plan.saved,
        statics=plan.statics,
        shapes=(plan.shape_kept,) if plan.shape_kept else (),
        non_differentiable=plan.non_differentiable,
        unmaterialised=plan.unmaterialised,
    )


def _unpacked(reads: Reads, ctx: str) -> list[Statement]:
    """A method's first statements: what it takes back from ctx."""
    found: list[Statement] = [Assign(reads.saved, f"{ctx}.saved_tensors")] if reads.saved else []
    return found + [Assign(s, f"{ctx}.{ctx_attribute(s)}") for s in reads.statics]


def _backward_body(plan: TorchPlan) -> tuple[Statement, ...]:
    body = _unpacked(plan.backward_reads, plan.own["ctx"])
    if plan.unmaterialised and not plan.cotangents_absent:
        # Unmaterialised for the tangents' sake: the one cotangent is absent only where no gradient flows.
        (bar,) = (cotangent(o) for o in plan.outputs if o not in plan.non_differentiable)
        body.append(If(f"{bar} is None", (Return(", ".join("None" for _ in plan.inputs)),)))
    if plan.partials_call:
        body.append(plan.partials_call)
    fused_call = Return(f"_backward({', '.join(plan.fused_backward_params)})")
    if plan.fused_backward_params and plan.first_order:
        body.append(If(_first_order_test(plan), (fused_call,)))
        body.append(Comment("A cotangent is absent, or this backward is differentiated: the present ones' terms."))
    elif plan.fused_backward_params:
        body.append(fused_call)
    # (Fused rules have no in-place body: inductor writes its buffers itself.)
    if plan.backward_in_place:
        body += either(_in_place_test(plan), plan.backward_in_place.statements, plan.backward.statements)
    elif plan.first_order or not plan.fused_backward_params:
        body += plan.backward.statements
    return tuple(body)


def _plain(plan: TorchPlan, tensors: Sequence[str]) -> str:
    """The runtime's check that `tensors` are plain: what an in-place body runs on."""
    return f"{plan.own['plain']}({', '.join(tensors)})"


def _residuals_absent(plan: TorchPlan) -> list[str]:
    """The conditions that no residual's cotangent is present: a backward nobody differentiates."""
    return [f"{cotangent(r)} is None" for r in plan.residuals]


def _first_order_test(plan: TorchPlan) -> str:
    """The condition under which backward needs no residual's terms."""
    # gradcheck (check_undefined_grad) calls backward with every cotangent absent.
    present = [f"{cotangent(o)} is not None" for o in plan.outputs if o not in plan.non_differentiable]
    return " and ".join(present + _residuals_absent(plan))


def _in_place_test(plan: TorchPlan) -> str:
    """When the in-place backward runs: no residual's cotangent, `plain` tensors (an absent cotangent is not),
    and every gradient it computes wanted."""
    ctx = plan.own["ctx"]
    wanted = plan.gradients_wanted
    if len(wanted) == len(plan.inputs):
        needed = [f"{plan.own['all']}({ctx}.needs_input_grad)"]
    else:
        needed = [f"{ctx}.needs_input_grad[{k}]" for k in wanted]
    return " and ".join([*_residuals_absent(plan), _plain(plan, plan.backward_plain), *needed])


def _jvp_body(plan: TorchPlan) -> tuple[Statement, ...]:
    body = _unpacked(plan.jvp_reads, plan.own["ctx"])
    if plan.partials_call:
        body.append(plan.partials_call)
    zero = plan.own["tangent_or_zero"]
    each = [Assign(dot, f"{zero}({dot}, {x})") for x, dot in plan.absent_tangents]
    together = Assign(", ".join(a.target for a in each), ", ".join(a.code for a in each))
    if plan.tangents_broadcast:
        # Every output's tangent then has the outputs' shape, as forward mode wants it.
        broadcast = f"{plan.own['torch']}.broadcast_tensors"
        at_once = Assign(together.target, f"{broadcast}({together.code})")
        if fits_a_line(at_once.line):
            return (*body, at_once, *plan.jvp.statements)
        body += [together] if fits_a_line(together.line) else each
        return (*body, Assign(together.target, f"{broadcast}({together.target})"), *plan.jvp.statements)
    body += [together] if len(each) > 1 and fits_a_line(together.line) else each
    return (*body, *plan.jvp.statements)


_OPMATH_NOTE = "bfloat16 and float16 go in as they are: each body is one torch kernel, computing in float32."


def _public(plan: TorchPlan) -> Def:
    """The function users call: arguments as tensors, the Function applied, residuals dropped."""
    body: list[Statement] = list(doc_lines(plan.header))
    body += plan.unpack
    body += plan.static_check
    if not plan.lifted and plan.float_arrays:
        body.append(Comment(_OPMATH_NOTE))
    body += plan.tensor_arguments
    if plan.residuals and len(plan.outputs) > 1:
        targets = ", ".join(n if n in plan.outputs else hidden(n) for n in (*plan.outputs, *plan.residuals))
        body.append(Assign(targets, f"{plan.route}({', '.join(plan.inputs)})"))
    body += plan.returning
    return Def(plan.name, tuple(map(str, plan.params)), tuple(body), returns=plan.returns)
