"""What the derivation settles for the planners beyond the partials: the forms the backends fuse, whether the
partials a rule gives are the ones sympy derives of its forward, and which intermediates of a symbolic rule's
forward torch keeps for backward (and their partials), which it recomputes.

Computed once, on the derivation the stabilising search chose, and handed to the planners in the `Derivation`:
the planners read it and differentiate nothing themselves.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType
from typing import TYPE_CHECKING

import sympy as sp

from rulegen.computation.cost import recompute_cost
from rulegen.computation.sharing import shared_subexpressions
from rulegen.derive.derivation import TorchForms
from rulegen.derive.forms import CANONICAL_FORMS, CanonicalForm, canonical, silu_derivatives
from rulegen.derive.functions import divided, hypot, sigmoid
from rulegen.spec.names import cotangent, tangent

if TYPE_CHECKING:
    from rulegen.derive.derivation import Chained, Derivation, Partials


def with_outputs(d: Derivation, expr: sp.Expr) -> sp.Expr:
    """`expr` with outputs replaced by their forward expressions."""
    return expr.subs({d.symbols[n]: e for n, e in d.forward})


def with_fused_forms(
    d: Derivation, forms: Sequence[CanonicalForm] = CANONICAL_FORMS, *, policy_chose: bool = True
) -> Derivation:
    """`d` with every expression in the one-kernel forms `forms` name (the backends' fused functions).

    With `policy_chose`, a form an accuracy policy other than `best` chose stays as it is: the canonical forms
    were its candidates (rulegen.derive.stabilise.policy), and `log(1 + x)` kept for its cost is not `log1p`
    again.  Without, those are rewritten too: for a kernel of torch's that computes the form as its own
    autodiff does (silu's derivative as `silu_backward`), which no policy weighed."""
    chosen = {c.chosen for c in d.choices if c.policy != "best"} if policy_chose else set()

    def rewrite(expr: sp.Expr) -> sp.Expr:
        return expr if expr in chosen else canonical(expr, forms, complex_rule=d.rule.complex)

    def partials(table: Partials) -> Partials:
        return MappingProxyType({k: rewrite(v) for k, v in table.items()})

    return replace(
        d,
        forward=tuple((n, rewrite(e)) for n, e in d.forward),
        residuals=tuple((n, rewrite(e)) for n, e in d.residuals),
        jvp_partials=partials(d.jvp_partials),
        vjp_partials=partials(d.vjp_partials),
        residual_partials=partials(d.residual_partials),
    )


def given_are_derived(d: Derivation) -> bool:
    """Whether each partial `d` gives is, residuals and outputs written out, sympy's own of the forward.

    A rule writes its derivative out mostly to compute it differently
    (stably, or not as the derivative at all); one that is what sympy
    derives, term for term, is what autodiff computes too.  Judged on the
    forms the backends compute: those the stabilising search chose, fused.
    """
    known = {d.symbols[n]: e for n, e in d.residuals}
    forward = dict(d.forward)
    for o in (o.name for o in d.rule.outputs):
        for i in d.diff_inputs:
            given = with_outputs(d, sp.sympify(d.jvp_partials.get((o, i.name), 0)).subs(known))
            if sp.expand(sp.diff(forward[o], d.symbols[i.name]) - given) != 0:
                return False
    return True


# Functions whose backward autodiff computes from their output (so it saves that): torch's derivatives.yaml
# reads `result` for exp, tanh, sigmoid and hypot (`grad * self / result`).
_SAVES_OUTPUT = (sp.exp, sp.tanh, sigmoid, hypot)


def _autodiff_saved(exprs: Sequence[sp.Expr], arrays: set[sp.Symbol]) -> set[sp.Expr]:
    """What torch's autodiff of these expressions keeps for backward, inputs aside.

    An estimate by the rules of its derivative formulas: a product keeps its
    factors, a power its base, a function its argument (or its value, for
    those whose derivative reads the value).  It bounds how many
    intermediates a generated Function may keep (saved bytes <= autodiff's).
    """
    kept: set[sp.Expr] = set()
    for expr in exprs:
        for node in sp.preorder_traversal(expr):
            if node.is_Mul:
                kept |= {a for a in node.args if not a.is_Number}
            elif node.is_Pow:
                kept.add(node.base)
                if not node.exp.is_Number:
                    kept |= {node.exp, node}
            elif isinstance(node, sp.Function):
                kept |= {node} if isinstance(node, _SAVES_OUTPUT) else {a for a in node.args if not a.is_Number}
    return {k for k in kept if not k.is_Symbol and k.free_symbols & arrays}


# Selections and roundings: a compare or two in a compiled loop, as cheap as arithmetic.
_SELECTIONS = (sp.Piecewise, sp.Abs, sp.sign, sp.Heaviside, sp.floor, sp.ceiling)
# What eager torch computes in one pass, as arithmetic: the selections and a quotient kept whole.
_CHEAP = (*_SELECTIONS, divided)


def _functions_of(exprs: Iterable[sp.Expr], arrays: set[sp.Symbol]) -> set[sp.Expr]:
    """The distinct functions of arrays (`tanh(u)`, `exp(u)`, ...) that computing `exprs` evaluates."""
    return {
        node
        for expr in exprs
        for node in sp.preorder_traversal(expr)
        if isinstance(node, sp.Function) and not isinstance(node, _SELECTIONS) and node.free_symbols & arrays
    }


def _fused_recompute_cost(expr: sp.Expr, arrays: set[sp.Symbol]) -> int:
    """What recomputing `expr` inside a compiled kernel costs: its functions of arrays."""
    return len(_functions_of([expr], arrays))


def as_factor(expr: sp.Expr, value: sp.Expr, symbol: sp.Symbol) -> sp.Expr:
    """`expr` with `symbol` for `value` wherever `value` is a factor of it: the whole of a subexpression, or some of
    a product's factors (`2*x*exp(u)*sin(x)` reads `exp(u)*sin(x)`).

    Never more: sympy's `subs` also rewrites `x**(y - 1)` as `x**y / x` to read `x**y`, and a derivative divided
    out of the output is 0, inf or a few bits wherever the output under- or overflows and the derivative does not
    (`out * y / x` at x = 1e-300, y = 1.5 in float64 is 0 for 1.5e-150), and nan at x = 0.
    """
    wanted = sp.Mul.make_args(value) if value.is_Mul else None
    # A node whose arguments read nothing saved is kept as it is: rebuilding it re-runs sympy's evaluation
    # (a Piecewise's collapse, Max/Min's search for comparable arguments) for the same node, seconds per
    # partial of a large rule, and shared subtrees are visited once.
    seen: dict[sp.Basic, sp.Basic] = {}

    def visit(node: sp.Basic) -> sp.Basic:
        if node in seen:
            return seen[node]
        seen[node] = rewritten = rewrite(node)
        return rewritten

    def rewrite(node: sp.Basic) -> sp.Basic:
        if node == value:
            return symbol
        if node.is_Atom:
            return node
        if wanted is not None and node.is_Mul:
            factors = list(node.args)
            if all(factors.count(f) >= wanted.count(f) for f in wanted):
                for f in wanted:
                    factors.remove(f)
                return sp.Mul(symbol, *(visit(f) for f in factors))
        args = [visit(a) for a in node.args]
        if all(new is old for new, old in zip(args, node.args, strict=True)):
            return node
        return node.func(*args)

    return visit(expr)


def saved_form(expr: sp.Expr, saved: Mapping[sp.Expr, sp.Symbol]) -> sp.Expr:
    """`expr` reading the saved intermediates, larger ones first, each where it is a factor (`as_factor`)."""
    for value, symbol in saved.items():
        expr = as_factor(expr, value, symbol)
    return expr


def saved_intermediates(d: Derivation, taken: set[str]) -> dict[sp.Expr, sp.Symbol]:
    """Subexpressions of the forward that torch's backward reads, worth saving instead of recomputing.

    Eager torch runs one kernel per operation, so an intermediate the forward
    computes anyway costs nothing to keep and at least one pass over memory
    to recompute; compiled (`fuse`), only its functions cost anything to
    recompute.  The number kept is bounded by what autodiff would keep.
    Outputs are free to keep and are used where the backward reads them.
    """
    forward = [e for _, e in d.forward]
    partials = [*d.vjp_partials.values(), *d.jvp_partials.values()]
    if not forward or not partials or d.residuals:
        return {}
    arrays = {d.symbols[i.name] for i in d.rule.inputs if not i.static}
    outputs = {e: d.symbols[n] for n, e in d.forward}
    cost = _cost_model(fused=d.rule.fuse, arrays=arrays)
    autodiff_kept = _autodiff_saved(forward, arrays)
    # Compiled, arithmetic is free; complex, the backward reads a saved value through a conjugation, a pass
    # of its own, where recomputing conjugates the inputs instead.
    once = d.rule.fuse or d.rule.complex
    unfolded = (
        set()
        if once
        else {
            e
            for e in autodiff_kept
            # A where's (value, condition) pairs are no values to keep.
            if isinstance(e, sp.Expr) and _one_pass_that_does_not_fold(e, arrays) and _stands_in(e, partials, arrays)
        }
    )
    candidates = sorted(
        (
            e
            for e in _shared_with_forward(forward, partials)
            if e.free_symbols & arrays and (e in outputs or cost(e) > 1 or e in unfolded)
        ),
        key=lambda e: (e not in outputs, -cost(e), sp.default_sort_key(e)),
    )
    prefix = "saved"
    while any(n.startswith(prefix) for n in taken):
        prefix = "_" + prefix
    budget = len(autodiff_kept)

    def choose(candidates: Sequence[sp.Expr], partials: Sequence[sp.Expr]) -> dict[sp.Expr, sp.Symbol]:
        chosen: dict[sp.Expr, sp.Symbol] = {}
        for expr in candidates:
            if len(chosen) == budget:
                break
            if expr not in outputs and any(sp.diff(expr, a).has(sp.Derivative, sp.Subs) for a in arrays):
                continue  # double backward needs its partials, and sympy has none
            name = f"{prefix}_{_description(expr)}"
            symbol = outputs.get(expr) or d.value_symbol(_fresh(name, chosen.values()))
            rewritten = [as_factor(p, expr, symbol) for p in partials]
            if rewritten == partials:
                continue
            if d.rule.fuse and len(_functions_of(partials, arrays) - _functions_of(rewritten, arrays)) < 2:
                continue  # the backward still computes most of it (sin(x) * exp(-x**2) next to cos(x) * exp(-x**2))
            partials = rewritten
            chosen[expr] = symbol
        return chosen

    chosen = choose(candidates, partials)
    # What one cheap operation computes from the rest (a product beside its factors, x / s beside s, |y|
    # beside y) costs a tensor until backward to spare one pass: recomputed, and the choice made again.  But
    # for one operation autodiff keeps too, whose pass no constant of the backward absorbs and which the
    # backward reads in place of its inputs (`1 - z` of softplus(1 - z)): recomputing it is a kernel more than
    # autodiff runs, keeping it no more than autodiff keeps.
    recomputed: set[sp.Expr] = set()
    while derived := _one_step_from_the_rest(chosen, outputs, arrays, unfolded):
        recomputed |= derived
        chosen = choose([e for e in candidates if e not in recomputed], partials)
    return chosen


def _one_step_from_the_rest(
    chosen: Mapping[sp.Expr, sp.Symbol],
    outputs: Mapping[sp.Expr, sp.Symbol],
    arrays: set[sp.Symbol],
    unfolded: Iterable[sp.Expr] = (),
) -> set[sp.Expr]:
    """The chosen intermediates that one cheap operation computes from the inputs, outputs and other ones kept,
    but those `unfolded` (`_one_pass_that_does_not_fold`, which autodiff keeps too).

    Taken from the cheapest up, each against those kept before it: of b, 1 / b and x / b, b stays and the
    others are a division from it.
    """
    kept = {e: s for e, s in chosen.items() if e in outputs or e in unfolded}
    found: set[sp.Expr] = set()
    for expr in sorted(
        (e for e in chosen if e not in kept), key=lambda e: (recompute_cost(e, arrays), sp.default_sort_key(e))
    ):
        # One pass: one operation, a selection or a quotient (not a function, which costs two).
        if recompute_cost(saved_form(expr, kept), arrays | set(kept.values()), _CHEAP) <= 1:
            found.add(expr)
        else:
            kept[expr] = chosen[expr]
    return found


def _one_pass_that_does_not_fold(expr: sp.Expr, arrays: set[sp.Symbol]) -> bool:
    """Whether recomputing `expr` is one pass of eager torch that the backward cannot absorb: not a scale
    (`x / sqrt(2)`, `beta * x`), which folds into a constant of a product or into softplus_backward's beta, but a
    shift or a difference (`1 - z`, `x - y`), a product of arrays or a power."""
    if recompute_cost(expr, arrays) != 1:
        return False
    return not (expr.is_Mul and sum(1 for a in expr.args if a.free_symbols & arrays) == 1)


def _stands_in(expr: sp.Expr, partials: Sequence[sp.Expr], arrays: set[sp.Symbol]) -> bool:
    """Whether the partials, reading `expr`, read none of the arrays it is computed from: kept, it takes their
    place in the backward (`1 - z` of softplus(1 - z)'s `-sigmoid(1 - z)`), where beside them it would spare one
    pass of the backward for one more tangent to compute in forward mode (`x**2` beside the `2*x` of log1p(x**2)'s
    partial)."""
    symbol = sp.Dummy("kept")
    rewritten = [as_factor(p, expr, symbol) for p in partials]
    read = set().union(*(r.free_symbols for r in rewritten))
    return symbol in read and not read & expr.free_symbols & arrays


def _description(expr: sp.Expr) -> str:
    """What an intermediate is, for its name: its functions (`exp_sin` for exp(-x**2) * sin(x)), else `value`."""
    _, rest = expr.as_coeff_Mul()
    found: list[str] = []
    for factor in sp.Mul.make_args(rest):
        base = factor.base if factor.is_Pow else factor
        if isinstance(base, sp.Function) and type(base).__name__.isidentifier():
            name = type(base).__name__.lower()
            if name not in found:
                found.append(name)
    return "_".join(found[:2]) or "value"


def _fresh(name: str, chosen: Iterable[sp.Symbol]) -> str:
    """`name`, numbered from 2 where an intermediate chosen before has it."""
    taken = {str(s) for s in chosen}
    count = 1
    candidate = name
    while candidate in taken:
        count += 1
        candidate = f"{name}{count}"
    return candidate


def _shared_with_forward(forward: Sequence[sp.Expr], partials: Sequence[sp.Expr]) -> set[sp.Expr]:
    """The subexpressions the partials read that the forward computes anyway (outermost ones, as cse shares them)."""
    replacements, reduced = shared_subexpressions([*forward, *partials], sp.numbered_symbols("_cse"))
    value = dict(replacements)
    full: dict[sp.Symbol, sp.Expr] = {}
    for sym, expr in replacements:
        full[sym] = expr.xreplace(full)
    in_forward: set[sp.Symbol] = set()

    def mark(expr: sp.Expr) -> None:
        for sym in expr.free_symbols & value.keys() - in_forward:
            in_forward.add(sym)
            mark(value[sym])

    for expr in reduced[: len(forward)]:
        mark(expr)
    wanted: set[sp.Symbol] = set()

    def visit(expr: sp.Expr) -> None:
        for sym in expr.free_symbols & value.keys():
            if sym in in_forward:
                wanted.add(sym)
            else:
                visit(value[sym])

    for expr in reduced[len(forward) :]:
        visit(expr)
    # cse shares -exp(r) between exp(r) - r*y and its partial -y + exp(r) (sympy's -(-y) is y), which reads
    # exp(r), not -exp(r): a number times a value, the value too (the partials say which they read).
    return {e for s in wanted for e in (full[s], full[s].as_coeff_Mul()[1] if full[s].is_Mul else full[s])}


def _cost_model(*, fused: bool, arrays: set[sp.Symbol]) -> Callable[[sp.Expr], int]:
    """What recomputing an intermediate in backward costs, eager or compiled."""
    if fused:
        # A compiled kernel does its arithmetic for free while it streams memory,
        # and saving costs two passes (a write, a read); the functions do not
        # come free: on the CPU each costs several passes' time (2^22 float32,
        # compiled: softplus 3.7 ms, tanh 1.5 ms, x * y, three passes, 1.1 ms).
        # Keeping what spares one function measured slower (fused gelu 0.28x
        # autodiff against 0.18x), hence two.
        return functools.partial(_fused_recompute_cost, arrays=arrays)
    # Recomputing one operation reads as much memory as reading it back
    # would, and often folds into the backward's own (a scale into a
    # product's constant, or into softplus_backward's beta): keep only dearer ones.
    return functools.partial(recompute_cost, arrays=arrays)


def _saved_partials(d: Derivation, saved: Mapping[sp.Expr, sp.Symbol]) -> Partials:
    """The partials of each intermediate `saved` keeps beside the rule's own names, reading the saved ones."""
    table = {}
    for expr, symbol in saved.items():
        if str(symbol) in d.symbols:
            continue
        for i in d.diff_inputs:
            partial = sp.diff(expr, d.symbols[i.name])
            if partial != 0:
                table[(str(symbol), i.name)] = saved_form(partial, saved)
    return MappingProxyType(table)


def _chained_tangents(d: Derivation, saved: Mapping[sp.Expr, sp.Symbol], saved_partials: Partials) -> Chained:
    """Output tangents from the saved intermediates' tangents, as autodiff chains them: out = F(x, s),
    dF/dx x_dot + dF/ds s_dot, each output's as its terms (partial, tangent), zero ones left out.

    Only where that is the rule's derivative as derived: the rule's own
    partials are sympy's of its forward (the chain is checked equal to
    them), neither the forward nor a partial was rewritten into a form
    measured more accurate (the chain computes the derived form, as
    autodiff does), the rule is real and has no residuals of its own.  The
    saved intermediates are exact at every order (their own partials), so
    the chain is too.  Whether the chain is cheaper is the planner's to say.
    """
    kept = {e: s for e, s in saved.items() if str(s) not in d.symbols}
    if d.rule.complex or d.residuals or not kept:
        return ()
    inputs = {s: e for e, s in kept.items()}
    names = [str(s) for s in kept.values()]
    diff_inputs = [i.name for i in d.diff_inputs]

    def dot(name: str) -> sp.Symbol:
        return d.symbols[tangent(name)] if name in d.symbols else d.value_symbol(tangent(name))

    residual_tangents = {dot(r): sp.Add(*(saved_partials.get((r, i), 0) * dot(i) for i in diff_inputs)) for r in names}

    def written_out(expr: sp.Expr) -> sp.Expr:
        return with_outputs(d, expr.xreplace(residual_tangents).xreplace(inputs))

    rewritten = {n for n, _, _ in d.rewritten}
    stabilised = {c.quantity for c in d.choices if c.more_accurate}
    chained = []
    for o in d.rule.outputs:
        if not o.differentiable or o.dtype != "float" or o.name in rewritten:
            continue
        if any(f"d{o.name}/d{i}" in stabilised for i in diff_inputs):
            continue
        forward = saved_form(dict(d.forward)[o.name], kept)
        read = [r for r in names if d.value_symbol(r) in forward.free_symbols]
        if not read:
            continue
        terms = [(sp.diff(forward, d.symbols[i]), dot(i)) for i in diff_inputs]
        terms += [(sp.diff(forward, d.value_symbol(r)), dot(r)) for r in read]
        terms = [(p, t) for p, t in terms if p != 0]
        direct = sp.Add(
            *(
                saved_form(d.jvp_partials[(o.name, i)], saved) * dot(i)
                for i in diff_inputs
                if (o.name, i) in d.jvp_partials
            )
        )
        if sp.expand(written_out(sp.Add(*(p * t for p, t in terms))) - written_out(direct)) == 0:
            chained.append((o.name, tuple(terms)))
    return tuple(chained)


def completed(d: Derivation) -> Derivation:
    """`d`, as the stabilising search left it, with what the planners read of it derived too.

    The intermediates torch saves are chosen in torch's forms: the fused ones, and silu's derivative written
    as one (x * sigmoid(x) inside it is then no reason to save `out`).  The fused forms and torch's are kept
    in the derivation (`Derivation.fused`, `Derivation.torch`): the planners print them as they are.
    """
    fused = with_fused_forms(d)
    statics = tuple(i.name for i in d.rule.inputs if i.static)
    integral = tuple(i.name for i in d.rule.inputs if not i.static and i.dtype in ("int", "bool"))
    torch = with_fused_forms(fused, (silu_derivatives(statics, integral),), policy_chose=False)
    saved = saved_intermediates(torch, set(torch.symbols))
    saved_partials = _saved_partials(torch, saved)
    settled = functools.partial(
        replace,
        given_are_derived=given_are_derived(fused),
        saved=tuple(saved.items()),
        saved_partials=saved_partials,
        chained_tangents=_chained_tangents(torch, saved, saved_partials),
    )
    return settled(d, fused_forms=settled(fused), torch_forms=_torch_forms(settled(torch)))


def _torch_forms(d: Derivation) -> TorchForms:
    """`d` (in torch's forms) reading the intermediates it keeps (`Derivation.saved`), each a residual with its
    own partials."""
    symbols = dict(d.symbols)
    saved = dict(d.saved)
    intermediates = [(str(sym), expr) for expr, sym in saved.items() if str(sym) not in symbols]
    for name, _ in intermediates:
        symbols[name] = d.value_symbol(name)
    residuals = (*d.residuals, *intermediates)
    for n, _ in residuals:
        symbols[cotangent(n)] = d.value_symbol(cotangent(n))
        symbols[tangent(n)] = d.value_symbol(tangent(n))

    def partials(table: Partials) -> Partials:
        return MappingProxyType({k: saved_form(v, saved) for k, v in table.items()})

    return TorchForms(
        derivation=d,
        symbols=MappingProxyType(symbols),
        vjp_partials=partials(d.vjp_partials),
        jvp_partials=partials(d.jvp_partials),
        residual_partials=MappingProxyType({**d.residual_partials, **d.saved_partials}),
        residuals=residuals,
        residual_values=tuple((n, with_outputs(d, e)) for n, e in residuals),
    )
