"""Stage 3: decide what each backend computes where, and print it.

A plan is everything a template needs, already printed: the signature, which
values the forward pass saves, and each method's body as straight-line
assignments sharing subexpressions through `sympy.cse`.  Templates then only
lay the pieces out.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import sympy as sp

from rulegen.derive import Derivation
from rulegen.printers import print_jax, print_torch
from rulegen.spec import Input

DOC_WIDTH = 100

Printer = Callable[[sp.Expr], tuple[str, frozenset[str]]]


@dataclass(frozen=True)
class Assign:
    target: str
    code: str


@dataclass(frozen=True)
class Block:
    """Straight-line code: assignments, then the values it returns."""

    lines: tuple[Assign, ...]
    results: tuple[str, ...]

    @property
    def result(self) -> str:
        return ", ".join(self.results)


@dataclass(frozen=True)
class Param:
    name: str
    default: str | None = None

    def __str__(self) -> str:
        return self.name if self.default is None else f"{self.name}={self.default}"


@dataclass(frozen=True)
class Header:
    """What every generated module says about where it came from."""

    rule: str
    source: str
    source_hash: str
    module_doc: str  # docstring literals, ready to place
    doc: str  # for the function and class, indented one level; "" if the rule has no doc


@dataclass(frozen=True)
class JaxPlan:
    header: Header
    name: str
    params: tuple[Param, ...]
    nondiff_argnums: tuple[int, ...]
    statics: tuple[str, ...]
    arrays: tuple[str, ...]
    custom: str  # "custom_jvp" or "custom_vjp"
    forward: Block
    # custom_jvp
    tangents: tuple[str, ...]
    primal_call: str
    outputs: tuple[str, ...]
    jvp: Block | None
    # custom_vjp
    saved: tuple[str, ...]
    cotangents: tuple[str, ...]
    bwd: Block | None
    imports: tuple[str, ...]
    uses_sum_to_shape: bool


@dataclass(frozen=True)
class TorchPlan:
    header: Header
    name: str
    class_name: str
    params: tuple[Param, ...]
    inputs: tuple[str, ...]
    statics: tuple[str, ...]
    forward: Block
    outputs: tuple[str, ...]
    residuals: tuple[str, ...]
    non_differentiable: tuple[str, ...]
    saved: tuple[str, ...]
    cotangents: tuple[str, ...]
    backward: Block
    tangents: tuple[str, ...]
    jvp: Block
    imports: tuple[str, ...]
    setup_inputs: str  # unpacking targets of `inputs` in setup_context, "" if none is kept
    setup_outputs: str  # likewise for `output`
    wrapper_targets: str  # what the wrapper unpacks from apply() when residuals are hidden


@dataclass(frozen=True)
class Result:
    """One returned value: an expression printed into `wrap`, or fixed code."""

    name: str
    expr: sp.Expr | None = None
    wrap: str = "{}"
    code: str = ""
    imports: frozenset[str] = frozenset()


class _Emitter:
    """Prints expressions for one backend, sharing subexpressions."""

    def __init__(self, printer: Printer, taken: Iterable[str]) -> None:
        self.printer = printer
        self.imports: set[str] = set()
        self.taken = set(taken)

    def code(self, expr: sp.Expr) -> str:
        text, imports = self.printer(expr)
        self.imports |= imports
        return text

    def block(self, lets: Sequence[tuple[str, sp.Expr]], results: Sequence[Result]) -> Block:
        """Assign each `let` and compute each result, shared parts once.

        A short result is returned inline; a long one is named first, as a
        person would write it.
        """
        computed = [r for r in results if r.expr is not None]
        exprs = [e for _, e in lets] + [r.expr for r in computed]
        replacements, reduced = sp.cse(exprs, symbols=_temp_symbols(self.taken), order="none")
        lines = [Assign(str(sym), self.code(value)) for sym, value in replacements]
        lines += [Assign(name, self.code(e)) for (name, _), e in zip(lets, reduced, strict=False)]
        texts = dict(zip((r.name for r in computed), (self.code(e) for e in reduced[len(lets) :]), strict=True))
        returned: list[str] = []
        for r in results:
            self.imports |= r.imports
            if r.expr is None:
                returned.append(r.code)
                continue
            text = texts[r.name]
            if not _is_simple(text):
                lines.append(Assign(r.name, text))
                text = r.name
            returned.append(r.wrap.format(_atom(text) if r.wrap.startswith("{}.") else text))
        return Block(tuple(lines), tuple(returned))


def _is_simple(text: str) -> bool:
    """Short enough to return inline rather than name first."""
    return len(text) <= 60


def _temp_symbols(taken: set[str]) -> Iterable[sp.Symbol]:
    prefix = "t"
    while any(n.startswith(prefix) and n[len(prefix) :].isdigit() for n in taken):
        prefix = "_" + prefix
    return sp.numbered_symbols(prefix)


def _params(inputs: Sequence[Input]) -> tuple[Param, ...]:
    return tuple(Param(i.name, repr(i.default) if i.has_default else None) for i in inputs)


def _docstring(text: str, indent: int) -> str:
    """A docstring literal for `text` at `indent`, wrapped, that no rule text can break out of."""
    text = text.strip().replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    if not text:
        return ""
    if text.endswith('"'):
        text = text[:-1] + '\\"'
    pad = " " * indent
    lines = textwrap.wrap(text, width=DOC_WIDTH - indent - 3, break_long_words=False, break_on_hyphens=False)
    if len(lines) == 1:
        return f'"""{lines[0]}"""'
    body = "\n".join(pad + line for line in lines[1:])
    return f'"""{lines[0]}\n{body}\n{pad}"""'


def _header(d: Derivation) -> Header:
    rule = d.rule
    # The source path lands in a comment: no line break may end it early.
    source = rule.source.encode("unicode_escape").decode("ascii")
    summary = f"{rule.name}: {rule.doc.strip()}" if rule.doc.strip() else f"{rule.name}: a rulegen rule."
    return Header(
        rule=rule.name,
        source=source,
        source_hash=rule.source_hash,
        module_doc=_docstring(summary, 0),
        doc=_docstring(rule.doc, 4),
    )


def _linear(
    d: Derivation,
    partials: Mapping[tuple[str, str], sp.Expr],
    result: str,
    variables: Iterable[str],
    suffix: str,
    transpose: bool = False,
) -> sp.Expr:
    """`sum_v partial(result, v) * v<suffix>`, or its transpose."""
    total = sp.S.Zero
    for v in variables:
        key = (v, result) if transpose else (result, v)
        if key in partials:
            total += partials[key] * d.symbols[f"{v}{suffix}"]
    return total


def _shape_inputs(d: Derivation, expr: sp.Expr) -> set[str] | None:
    """The array inputs an expression's shape comes from; None: an output's full shape."""
    names = {s.name for s in expr.free_symbols}
    outputs = {o.name for o in d.rule.outputs}
    if names & outputs or any(n.endswith("_bar") for n in names):
        return None
    found: set[str] = set()
    residuals = dict(d.residuals)
    for name in names:
        base = name[: -len("_dot")] if name.endswith("_dot") else name
        if base in residuals:
            inner = _shape_inputs(d, residuals[base])
            if inner is None:
                return None
            found |= inner
        elif any(i.name == base and not i.static for i in d.rule.inputs):
            found.add(base)
    return found


def _needs_broadcast(d: Derivation, output: str, expr: sp.Expr) -> bool:
    forward = dict(d.forward)[output]
    full = _shape_inputs(d, forward) or set()
    have = _shape_inputs(d, expr)
    return have is not None and not full <= have


def _atom(text: str) -> str:
    """`text`, parenthesised unless it already binds tighter than `.attr`."""
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        return f"({text})"
    return text if isinstance(node, ast.Name | ast.Call | ast.Attribute | ast.Subscript) else f"({text})"


def _used(exprs: Iterable[sp.Expr]) -> set[str]:
    names: set[str] = set()
    for expr in exprs:
        names |= {s.name for s in expr.free_symbols}
    return names


def _with_outputs(d: Derivation, expr: sp.Expr) -> sp.Expr:
    """`expr` with outputs replaced by their forward expressions."""
    return expr.subs({d.symbols[n]: e for n, e in d.forward})


_JNP = frozenset({"import jax.numpy as jnp"})


def plan_jax(d: Derivation) -> JaxPlan:
    """What the JAX module of a rule computes: a custom_jvp, or a custom_vjp."""
    rule = d.rule
    emit = _Emitter(print_jax, d.symbols)
    arrays = tuple(i.name for i in rule.inputs if not i.static)
    outputs = tuple(o.name for o in rule.outputs)
    diff_inputs = [i.name for i in d.diff_inputs]
    residuals = dict(d.residuals)
    forward = emit.block([], [Result(n, e) for n, e in d.forward])
    broadcastable = len(arrays) > 1

    jvp = bwd = None
    tangents: tuple[str, ...] = ()
    cotangents: tuple[str, ...] = ()
    saved: tuple[str, ...] = ()
    if d.mode == "jvp":
        tangents = tuple(f"{n}_dot" if n in diff_inputs else "_" for n in arrays)
        results = []
        for o in rule.outputs:
            name = f"{o.name}_dot"
            expr = _linear(d, d.jvp_partials, o.name, diff_inputs, "_dot")
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
            elif _needs_broadcast(d, o.name, expr):
                wrap = f"jnp.broadcast_to({{}}, jnp.shape({o.name}))"
                results.append(Result(name, expr, wrap=wrap, imports=_JNP))
            else:
                results.append(Result(name, expr))
        used = _used(r.expr for r in results if r.expr is not None)
        jvp = emit.block([(n, e) for n, e in residuals.items() if n in used], results)
    else:
        cotangents = tuple(f"{n}_bar" for n in outputs)
        results = []
        for i in rule.inputs:
            if i.static:
                continue
            expr = _linear(d, d.vjp_partials, i.name, outputs, "_bar", transpose=True)
            if not i.differentiable or expr == 0:
                code = f"jnp.zeros_like({i.name})" if i.dtype == "float" else "None"
                results.append(Result(f"{i.name}_bar", code=code, imports=_JNP if i.dtype == "float" else frozenset()))
            elif broadcastable:
                wrap = f"_sum_to_shape({{}}, jnp.shape({i.name}))"
                results.append(Result(f"{i.name}_bar", expr, wrap=wrap, imports=_JNP))
            else:
                results.append(Result(f"{i.name}_bar", expr))
        used = _used(r.expr for r in results if r.expr is not None)
        lets = [(n, e) for n, e in residuals.items() if n in used]
        used |= _used(e for _, e in lets)
        bwd = emit.block(lets, results)
        used |= {i for i in arrays if f"({i})" in bwd.result}
        saved = tuple(n for n in (*arrays, *outputs) if n in used)

    imports = {"import jax", *emit.imports}
    if any(i.static for i in rule.inputs):
        imports.add("import functools")
    return JaxPlan(
        header=_header(d),
        name=rule.name,
        params=_params(rule.inputs),
        nondiff_argnums=tuple(k for k, i in enumerate(rule.inputs) if i.static),
        statics=tuple(i.name for i in rule.inputs if i.static),
        arrays=arrays,
        custom="custom_jvp" if d.mode == "jvp" else "custom_vjp",
        forward=forward,
        tangents=tangents,
        primal_call=f"{rule.name}({', '.join(i.name for i in rule.inputs)})",
        outputs=outputs,
        jvp=jvp,
        saved=saved,
        cotangents=cotangents,
        bwd=bwd,
        imports=tuple(sorted(imports)),
        uses_sum_to_shape=bwd is not None and "_sum_to_shape(" in bwd.result,
    )


def plan_torch(d: Derivation) -> TorchPlan:
    """What the torch module of a rule computes: a torch.func-style Function."""
    rule = d.rule
    symbols = dict(d.symbols)
    residual_names = tuple(n for n, _ in d.residuals)
    for n in residual_names:
        symbols[f"{n}_bar"] = sp.Symbol(f"{n}_bar", real=True)
        symbols[f"{n}_dot"] = sp.Symbol(f"{n}_dot", real=True)
    emit = _Emitter(print_torch, symbols)
    statics = tuple(i.name for i in rule.inputs if i.static)
    inputs = tuple(i.name for i in rule.inputs)
    outputs = tuple(o.name for o in rule.outputs)
    diff_inputs = [i.name for i in d.diff_inputs]
    broadcastable = len([i for i in rule.inputs if not i.static]) > 1

    values = [*d.forward, *((n, _with_outputs(d, e)) for n, e in d.residuals)]
    forward = emit.block([], [Result(n, e) for n, e in values])

    # A residual's cotangent is non-zero only when a backward that read it is
    # itself differentiated; its partials make double backward right.
    backward_results = []
    for i in rule.inputs:
        expr = _linear(d, d.vjp_partials, i.name, outputs, "_bar", transpose=True)
        for r in residual_names:
            expr += d.residual_partials.get((r, i.name), sp.S.Zero) * symbols[f"{r}_bar"]
        if i.name not in diff_inputs or expr == 0:
            backward_results.append(Result(f"{i.name}_bar", code="None"))
        elif broadcastable:
            backward_results.append(Result(f"{i.name}_bar", expr, wrap=f"{{}}.sum_to_size({i.name}.shape)"))
        else:
            backward_results.append(Result(f"{i.name}_bar", expr))
    backward = emit.block([], backward_results)

    # Residual tangents too: torch.func.hessian runs forward mode over a
    # backward that reads them.
    jvp_results = []
    for o in rule.outputs:
        expr = _linear(d, d.jvp_partials, o.name, diff_inputs, "_dot")
        if not o.differentiable or expr == 0:
            jvp_results.append(Result(f"{o.name}_dot", code=f"torch.zeros_like({o.name})"))
        elif _needs_broadcast(d, o.name, expr):
            jvp_results.append(Result(f"{o.name}_dot", expr, wrap=f"torch.broadcast_to({{}}, {o.name}.shape)"))
        else:
            jvp_results.append(Result(f"{o.name}_dot", expr))
    for r in residual_names:
        expr = sp.Add(*(d.residual_partials.get((r, n), 0) * symbols[f"{n}_dot"] for n in diff_inputs))
        if expr == 0:
            jvp_results.append(Result(f"{r}_dot", code=f"torch.zeros_like({r})"))
        else:
            jvp_results.append(Result(f"{r}_dot", expr))
    jvp = emit.block([], jvp_results)

    computed = [r.expr for r in (*backward_results, *jvp_results) if r.expr is not None]
    used = _used(computed)
    used |= {
        n for n in (*inputs, *outputs, *residual_names) if f"({n})" in jvp.result or f"({n}.shape)" in backward.result
    }
    emit.imports.add("import torch")
    statics_used = tuple(s for s in statics if s in used)
    saved = tuple(n for n in (*inputs, *outputs, *residual_names) if n in used and n not in statics)
    non_diff = tuple(o.name for o in rule.outputs if not o.differentiable)
    values = (*outputs, *residual_names)
    return TorchPlan(
        header=_header(d),
        name=rule.name,
        class_name=rule.torch_class,
        params=_params(rule.inputs),
        inputs=inputs,
        statics=statics_used,
        forward=forward,
        outputs=outputs,
        residuals=residual_names,
        non_differentiable=non_diff,
        saved=saved,
        cotangents=tuple(f"{n}_bar" for n in (*outputs, *residual_names)),
        backward=backward,
        tangents=tuple(f"{i.name}_dot" for i in rule.inputs),
        jvp=jvp,
        imports=tuple(sorted(emit.imports)),
        setup_inputs=_targets(inputs, {*saved, *statics_used}, tuple_of_one=True),
        setup_outputs=_targets(values, {*saved, *non_diff}, tuple_of_one=False),
        wrapper_targets=", ".join(n if n in outputs else f"_{n}" for n in values),
    )


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
