"""Stage 3: decide what each backend computes where, and print it.

A plan is everything a template needs, already printed: the signature, which
values the forward pass saves, and each method's body as straight-line
assignments sharing subexpressions through `sympy.cse`.  Templates then only
lay the pieces out.
"""

from __future__ import annotations

import ast
import functools
import math
import textwrap
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType

import sympy as sp
from sympy.codegen.cfunctions import log1p
from sympy.codegen.rewriting import ReplaceOptim

from rulegen import functions as fn
from rulegen.derive import Derivation, Partials
from rulegen.forms import CANONICAL_FORMS, canonical, float_anchors, float_forms, integral_arrays
from rulegen.functions import one_plus_erf, sigmoid, sigmoid_product, silu, softplus
from rulegen.inplace import InPlaceWriter
from rulegen.lines import Assign, Block
from rulegen.printers import print_jax, print_torch, print_torch_compiled
from rulegen.routes import JaxRoute, Source
from rulegen.snippet import Code, SnippetDerivation
from rulegen.spec import Input, Rule

DOC_WIDTH = 100

# print_torch and its kind: an expression, and `scalars=`, the names of Python numbers in it.
Printer = Callable[..., tuple[str, frozenset[str]]]


@dataclass(frozen=True)
class Reads:
    """What one method of a torch Function takes back from ctx: only what its code reads."""

    saved: str  # unpacking targets of ctx.saved_tensors, `_` for the unread; "" if none is read
    statics: tuple[str, ...]


def _mentioned(names: Iterable[str], texts: Iterable[str]) -> list[str]:
    """The `names` the code `texts` reads as variables (`x.shape` reads no `shape`), in order."""
    read = frozenset().union(*map(_names_read, texts))
    return [n for n in names if n in read]


@functools.cache
def _names_read(code: str) -> frozenset[str]:
    """The variables a statement, or an expression list such as a block's results, names."""
    return frozenset(node.id for node in ast.walk(ast.parse(code)) if isinstance(node, ast.Name))


def _reads(saved: Sequence[str], statics: Sequence[str], texts: Iterable[str]) -> Reads:
    read = set(_mentioned((*saved, *statics), texts))
    targets = ", ".join(n if n in read else "_" for n in saved)
    if len(saved) == 1 and targets:
        targets += ","
    return Reads(saved=targets if read & set(saved) else "", statics=tuple(s for s in statics if s in read))


def _block_texts(*blocks: Block | None) -> list[str]:
    return [t for b in blocks if b is not None for t in (*(a.code for a in b.lines), b.result)]


@dataclass(frozen=True)
class Param:
    name: str
    default: str | None = None
    annotation: str | None = None

    def __str__(self) -> str:
        text = self.name if self.annotation is None else f"{self.name}: {self.annotation}"
        if self.default is None:
            return text
        return f"{text}={self.default}" if self.annotation is None else f"{text} = {self.default}"


@dataclass(frozen=True)
class Header:
    """What every generated module says about where it came from."""

    rule: str
    source: str
    source_hash: str
    module_doc: str  # docstring literals, ready to place
    doc: str  # the public function's (see help_text), indented one level
    class_doc: str  # the torch Function's: the rule's doc, indented one level; "" if it has none


@dataclass(frozen=True)
class JaxPlan:
    header: Header
    name: str
    params: tuple[Param, ...]
    returns: str
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
    util_names: tuple[str, ...]  # what the module imports from the package's jax/_util.py
    # With both a jvp and a vjp: the two halves of the linear_map the JVP applies.
    maps: tuple[Function, ...]
    array_arguments: str  # the primal body's first line (see array_arguments)


@dataclass(frozen=True)
class TorchPlan:
    header: Header
    name: str
    class_name: str
    params: tuple[Param, ...]
    returns: str
    inputs: tuple[str, ...]
    statics: tuple[str, ...]
    forward: Block
    outputs: tuple[str, ...]
    residuals: tuple[str, ...]
    non_differentiable: tuple[str, ...]
    saved: tuple[str, ...]
    cotangents: tuple[str, ...]
    backward: Block  # every cotangent's terms; absent ones read as 0.0
    first_order: Block | None  # the outputs' terms only, when no residual cotangent is present
    first_order_test: str
    fused_backward_params: tuple[str, ...]  # with `fuse`: what the compiled backward body takes; () without
    # With `fuse`, the bodies torch.compile runs where they differ from the
    # eager ones (rulegen.printers.CompiledTorchPrinter); None elsewhere.
    fused_forward_compiled: Block | None
    fused_backward_compiled: Block | None
    tangents: tuple[str, ...]
    absent_tangents: tuple[str, ...]  # inputs whose tangent may arrive as None
    jvp: Block
    # Bodies that update their own buffers in place, run when `plain(...)` of
    # the tensors they read holds (rulegen.inplace); None where nothing would.
    forward_in_place: Block | None
    forward_plain: str
    backward_in_place: Block | None  # of the first-order backward
    backward_plain: str
    backward_reads: Reads
    jvp_reads: Reads
    imports: tuple[str, ...]
    setup_inputs: str  # unpacking targets of `inputs` in setup_context, "" if none is kept
    setup_outputs: str  # likewise for `output`
    wrapper_targets: str  # what the wrapper unpacks from apply() when residuals are hidden
    tensor_arguments: str  # the wrapper's first line: its array arguments as tensors (see array_arguments)


@dataclass(frozen=True)
class Result:
    """One returned value: an expression printed into `wrap`, or fixed code."""

    name: str
    expr: sp.Expr | None = None
    wrap: str = "{}"
    code: str = ""
    imports: frozenset[str] = frozenset()


class _Emitter:
    """Prints expressions for one backend, sharing subexpressions.

    `forms` rewrites each expression into the backend's own fused forms
    first.  `scalars` name the static inputs, Python numbers, which the
    printer is told of: `math.sqrt(beta)`, where `torch.sqrt(beta)` raises.
    """

    def __init__(
        self,
        printer: Printer,
        taken: Iterable[str],
        forms: Callable[[sp.Expr], sp.Expr] = lambda e: e,
        scalars: Iterable[str] = (),
    ) -> None:
        self.printer = printer
        self.forms = forms
        self.scalars = frozenset(scalars)
        self.imports: set[str] = set()
        self.taken = set(taken)

    def code(self, expr: sp.Expr, scalars: frozenset[str] = frozenset()) -> str:
        """`expr` printed; `scalars` name this block's temporaries that hold Python numbers too."""
        text, imports = self.printer(expr, scalars=self.scalars | scalars)
        self.imports |= imports
        return text

    def _scalar_temporaries(self, assigned: Iterable[tuple[sp.Symbol, sp.Expr]]) -> frozenset[str]:
        """The names `assigned` of static inputs and numbers alone: Python numbers, as the static inputs are.

        sp.cse shares `1 / beta` as `t0 = 1 / beta` (and `sqrt(2)` as `t0 =
        math.sqrt(2)`); `sqrt(beta - t0)` read as a function of a tensor t0
        would print `torch.sqrt` of a float, which raises.  An `in_float` is
        a tensor even of numbers alone.
        """
        found: set[str] = set()
        for sym, value in assigned:
            names = {s.name for s in value.free_symbols}
            if not value.has(fn.in_float) and names <= self.scalars | found:
                found.add(str(sym))
        return frozenset(found)

    def block(
        self,
        lets: Sequence[tuple[str, sp.Expr]],
        results: Sequence[Result],
        forms: Callable[[sp.Expr], sp.Expr] | None = None,
    ) -> Block:
        """Assign each `let` and compute each result, shared parts once.

        A short result is returned inline; a long one is named first, as a
        person would write it.  `forms`, if given, replaces the emitter's own.
        """
        computed = [r for r in results if r.expr is not None]
        forms = forms or self.forms
        exprs = [forms(e) for e in (*(e for _, e in lets), *(r.expr for r in computed))]
        replacements, reduced = sp.cse(exprs, symbols=_temp_symbols(self.taken), order="none")
        scalars = self._scalar_temporaries([*replacements, *zip((n for n, _ in lets), reduced, strict=False)])
        code = functools.partial(self.code, scalars=scalars)
        lines = [Assign(str(sym), code(value)) for sym, value in replacements]
        lines += [Assign(name, code(e)) for (name, _), e in zip(lets, reduced, strict=False)]
        texts = dict(zip((r.name for r in computed), (code(e) for e in reduced[len(lets) :]), strict=True))
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

    def in_place_block(self, results: Sequence[Result], tensors: set[str]) -> Block | None:
        """`block` of `results` as torch code that updates the buffers it allocates (see rulegen.inplace).

        A line with an empty target is a statement.  None where that code
        would be the out-of-place code over again.
        """
        computed = [r for r in results if r.expr is not None]
        names = _temp_symbols(self.taken)
        replacements, reduced = sp.cse([self.forms(r.expr) for r in computed], symbols=names, order="none")
        code = functools.partial(self.code, scalars=self._scalar_temporaries(replacements))
        writer = InPlaceWriter(code, tensors, names)
        for sym, value in replacements:
            writer.assign(str(sym), value)
        texts = {r.name: writer.value(e) for r, e in zip(computed, reduced, strict=True)}
        returned: list[str] = []
        for r in results:
            self.imports |= r.imports
            if r.expr is None:
                returned.append(r.code)
            else:
                text = texts[r.name]
                returned.append(r.wrap.format(_atom(text) if r.wrap.startswith("{}.") else text))
        if not any(not step.target for step in writer.steps):
            return None
        return Block(tuple(writer.steps), tuple(returned))


def _is_simple(text: str) -> bool:
    """Short enough to return inline rather than name first."""
    return len(text) <= 60


def _temp_symbols(taken: set[str]) -> Iterable[sp.Symbol]:
    prefix = "t"
    while any(n.startswith(prefix) and n[len(prefix) :].isdigit() for n in taken):
        prefix = "_" + prefix
    return sp.numbered_symbols(prefix)


_SUM_TO_SHAPE = "sum_to_shape as _sum_to_shape"


def array_arguments(rule: Rule, helper: str) -> str:
    """The public function's first line: its array arguments through the backend's `helper`, or "".

    The helpers (torch/_util.as_tensors, jax/_util.as_arrays) take what users pass
    where JAX takes it: Python numbers and lists (torch's `apply` would hand
    them on as numbers), integer arrays for float inputs (a host body would
    return its float results truncated to integers); and they refuse complex
    arrays, which no rule supports yet.  JAX runs its helper when it traces
    the body, at no cost to the computation.
    """
    arrays = [i for i in rule.inputs if not i.static]
    if not arrays:
        return ""
    names = ", ".join(i.name for i in arrays)
    targets = f"{names}," if len(arrays) == 1 else names
    quoted = ", ".join(repr(i.name) for i in arrays) + ("," if len(arrays) == 1 else "")
    kinds = "".join(_DTYPE_LETTERS[i.dtype] for i in arrays)
    return f"{targets} = {helper}({rule.name!r}, ({quoted}), {kinds!r}, {names})"


def _with_util_names(imports: set[str], rule: Rule) -> tuple[str, ...]:
    """A JAX snippet module's imports, with one import of what it takes from jax/_util.py."""
    names = ["as_arrays"] if any(not i.static for i in rule.inputs) else []
    if "from ._util import unbroadcast" in imports:
        names.append("unbroadcast")
    kept = imports - {"from ._util import unbroadcast"}
    return tuple(sorted(kept | ({f"from ._util import {', '.join(names)}"} if names else set())))


_DTYPE_LETTERS = {"float": "f", "int": "i", "bool": "b"}
TENSORS_IMPORT = "from ._util import as_tensors"


def _with_torch_util(imports: set[str], names: Sequence[str]) -> tuple[str, ...]:
    """A torch snippet module's imports, with one import of what it takes from torch/_util.py."""
    return tuple(sorted(imports | ({f"from ._util import {', '.join(names)}"} if names else set())))


#: Per backend: the annotation of an array argument (by input dtype) and of a result.
ARRAY_TYPES = {
    "jax": (
        {"float": "jax.typing.ArrayLike", "int": "jax.typing.ArrayLike", "bool": "jax.typing.ArrayLike"},
        "jax.Array",
    ),
    "torch": (
        {"float": "torch.Tensor | float", "int": "torch.Tensor | int", "bool": "torch.Tensor | bool"},
        "torch.Tensor",
    ),
}


def _params(inputs: Sequence[Input], backend: str) -> tuple[Param, ...]:
    """The public function's parameters; array arguments annotated (statics may be any hashable value)."""
    arguments, _ = ARRAY_TYPES[backend]
    return tuple(
        Param(
            i.name,
            python_literal(i.default) if i.has_default else None,
            None if i.static else arguments[i.dtype],
        )
        for i in inputs
    )


def _returns(rule: Rule, backend: str) -> str:
    _, result = ARRAY_TYPES[backend]
    count = len(rule.outputs)
    return result if count == 1 else f"tuple[{', '.join([result] * count)}]"


def python_literal(value: object) -> str:
    """`value` (a default: None, a bool, a number, a string or a tuple of these) as Python source.

    `repr` alone gives `inf` and `nan`, which are no Python names.
    """
    if isinstance(value, float) and not math.isfinite(value):
        text = "float('nan')" if math.isnan(value) else "float('inf')"
        return f"-{text}" if value < 0 else text
    if isinstance(value, tuple):
        items = [python_literal(v) for v in value]
        return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
    if isinstance(value, bool | int | float | str) or value is None:
        return repr(value)
    raise TypeError(f"no Python literal for a default of type {type(value).__name__}")


def _docstring(text: str, indent: int) -> str:
    """A docstring literal for `text` at `indent`, that no rule text can break out of.

    Paragraphs (separated by blank lines) are wrapped; a line that starts
    with spaces keeps its break and indent, its continuation indented further.
    """
    text = text.strip().replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    if not text:
        return ""
    if text.endswith('"'):
        text = text[:-1] + '\\"'
    width = DOC_WIDTH - indent - 6
    lines: list[str] = []
    for paragraph in text.split("\n\n"):
        if lines:
            lines.append("")
        prose: list[str] = []
        for line in [*paragraph.splitlines(), ""]:
            if line.startswith(" ") or not line:
                lines += textwrap.wrap(" ".join(prose), width, break_long_words=False, break_on_hyphens=False)
                prose = []
            if line.startswith(" "):
                lead = " " * (len(line) - len(line.lstrip()))
                lines += textwrap.wrap(
                    line.strip(),
                    width,
                    initial_indent=lead,
                    subsequent_indent=lead + "    ",
                    break_long_words=False,
                    break_on_hyphens=False,
                )
            elif line:
                prose.append(line)
    if len(lines) == 1:
        return f'"""{lines[0]}"""'
    pad = " " * indent
    body = "\n".join(pad + line if line else "" for line in lines[1:])
    return f'"""{lines[0]}\n{body}\n{pad}"""'


#: A formula longer than this is cut in the docstring (the rule file has it whole).
FORMULA_CHARS = 300


def _formula(expr: sp.Expr) -> str:
    text = sp.sstr(expr)
    return text if len(text) <= FORMULA_CHARS else text[: FORMULA_CHARS - 3] + "..."


def _input_line(i: Input) -> str:
    if i.static:
        kind = "static (a hashable Python value; JAX recompiles for each)"
    else:
        kind = f"{i.dtype} array" + ("" if i.differentiable else ", not differentiated")
    default = f", default {python_literal(i.default)}" if i.has_default else ""
    assumed = f", assumed {' and '.join(i.assume)}" if i.assume else ""
    sampled = "" if i.static or i.dtype != "float" else f"; checked on [{i.domain[0]:g}, {i.domain[1]:g}]"
    return f"    {i.name}: {kind}{default}{assumed}{sampled}"


def help_text(d: Derivation | SnippetDerivation) -> str:
    """What `help()` of a generated function says: the rule's doc, its formulas, its inputs, its source."""
    rule = d.rule
    parts = [rule.doc.strip() or f"{rule.name}({', '.join(i.name for i in rule.inputs)}): a rulegen rule."]
    if isinstance(d, Derivation):
        parts.append("Forward:\n" + "\n".join(f"    {name} = {_formula(e)}" for name, e in d.forward))
        given = rule.derivatives is not None or rule.jvp is not None or rule.vjp is not None
        partials = [
            f"    d{out}/d{x} = {_formula(d.jvp_partials[out, x])}"
            for out in (o.name for o in rule.outputs)
            for x in (i.name for i in d.diff_inputs)
            if (out, x) in d.jvp_partials
        ]
        if partials:
            parts.append(f"Partials ({'from the rule' if given else 'derived by sympy'}):\n" + "\n".join(partials))
    else:
        bodies = [k for k in ("forward", "jvp", "vjp") if getattr(rule, k) is not None]
        parts.append(f"Forward and derivatives: Python bodies ({', '.join(bodies)}) in the rule file.")
    parts.append("Inputs:\n" + "\n".join(_input_line(i) for i in rule.inputs))
    parts.append(f"Generated by rulegen from {rule.source or 'a rule'}.")
    return "\n\n".join(parts)


def _header(d: Derivation | SnippetDerivation) -> Header:
    rule = d.rule
    # The source path lands in a comment: no line break may end it early.
    source = rule.source.encode("unicode_escape").decode("ascii")
    summary = f"{rule.name}: {rule.doc.strip()}" if rule.doc.strip() else f"{rule.name}: a rulegen rule."
    return Header(
        rule=rule.name,
        source=source,
        source_hash=rule.source_hash,
        module_doc=_docstring(summary, 0),
        doc=_docstring(help_text(d), 4),
        class_doc=_docstring(rule.doc, 4),
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


def _needs_broadcast(d: Derivation, expr: sp.Expr) -> bool:
    """Whether `expr` may lack an output's shape: that of all the array inputs together.

    An elementwise rule's outputs all have that shape, as a NumPy ufunc's
    do, even one that reads only some inputs (`a: x` beside `b: x * y`).
    """
    have = _shape_inputs(d, expr)
    return have is not None and not {i.name for i in d.rule.inputs if not i.static} <= have


def _broadcast_outputs(d: Derivation, broadcast: str) -> dict[str, str]:
    """For each output whose expression lacks the full shape, the wrap `broadcast` that gives it."""
    return {n: broadcast for n, e in d.forward if _needs_broadcast(d, e)}


def _compose(outer: str, inner: str) -> str:
    """The wrap that applies `inner`, then `outer`."""
    return outer.format(inner)


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


def torch_forms(scalars: Iterable[str], integral: Iterable[str]) -> Callable[[sp.Expr], sp.Expr]:
    """A rewrite of products with a sigmoid into torch's one-kernel forms.

    `a * sigmoid(beta * u)` is softplus's backward, and `u * sigmoid(u)` is
    silu: one pass over memory each where sigmoid and the multiplication are
    two.  `scalars` name the static inputs (Python numbers, which the native
    kernels do not take as tensors), `integral` the integer and boolean
    arrays (silu refuses them; softplus's backward promotes them).
    """
    scalars, integral = frozenset(scalars), frozenset(integral)

    def operand(expr: sp.Expr) -> bool:
        """A float tensor a native kernel takes: not a Python number, not an integer mask (`torch.where(c, 1, 0)`)."""
        return any(s.name not in scalars for s in expr.free_symbols) and not expr.has(sp.Piecewise)

    def rewrite(product: sp.Mul) -> sp.Expr:
        factors = list(product.args)
        k = next((k for k, f in enumerate(factors) if isinstance(f, sigmoid) and operand(f)), None)
        if k is None:
            return product
        tensors = [s for s in factors[k].free_symbols if s.name not in scalars]
        beta, u = factors[k].args[0].as_independent(*tensors, as_Add=False)
        if u.could_extract_minus_sign():  # the sign rides on beta, not on a negated copy of u
            beta, u = -beta, -u
        if beta == 1 and u in factors and not any(s.name in integral for s in u.free_symbols):
            rest = [f for j, f in enumerate(factors) if j != k]
            rest.remove(u)
            return sp.Mul(*rest, silu(u))
        candidates = [j for j, f in enumerate(factors) if j != k and operand(f)]
        if not candidates:
            return product
        a = min(candidates, key=lambda j: (not factors[j].is_Atom, j))  # a bare name needs no pass of its own
        rest = [f for j, f in enumerate(factors) if j not in (a, k)]
        return sp.Mul(*rest, sigmoid_product(factors[a], u, beta))

    return lambda expr: expr.replace(lambda e: e.is_Mul, rewrite)


def jax_forms(exprs: Iterable[sp.Expr], scalars: Iterable[str]) -> Callable[[sp.Expr], sp.Expr]:
    """A rewrite of softplus and sigmoid of one argument into forms that share one `exp`.

    XLA computes `jax.nn.softplus(u)` and `jax.nn.sigmoid(u)` with an `exp`
    each, even under one `jit`.  Where a rule reads both of u (log1pexp and
    its derivative, mish's), both are written over e = exp(-|u|):

        softplus(u) = where(u >= 0, u, 0) + log1p(e)
        sigmoid(u) = where(u >= 0, 1, e) / (1 + e)
        sigmoid(-u) = where(u >= 0, e, 1) / (1 + e)

    These are exact at every order under JAX's autodiff: at u = 0 each takes
    its `u >= 0` piece, and JAX differentiates |u| there as u (its abs
    rule selects on x >= 0), so the pieces agree with the derivatives.  An
    argument with a static input in it is left alone: its sign, and so the
    piece at 0, is unknown.
    """
    scalars = frozenset(scalars)

    def canonical(u: sp.Expr) -> sp.Expr:
        return -u if u.could_extract_minus_sign() else u

    found: dict[type, set[sp.Expr]] = {softplus: set(), sigmoid: set()}
    for expr in exprs:
        for f in expr.atoms(softplus, sigmoid):
            found[type(f)].add(f.args[0])
    shared = {
        canonical(u)
        for u in found[softplus]
        if (u in found[sigmoid] or -u in found[sigmoid]) and not any(s.name in scalars for s in u.free_symbols)
    }
    if not shared:
        return lambda expr: expr

    def pieces(u: sp.Expr, at_least_zero: sp.Expr, below: sp.Expr) -> sp.Expr:
        return sp.Piecewise((at_least_zero, sp.Ge(u, 0)), (below, True))

    def rewrite(f: sp.Function) -> sp.Expr:
        u = canonical(f.args[0])
        if u not in shared:
            return f
        negated = u != f.args[0]
        e = sp.exp(-sp.Abs(u))
        if isinstance(f, softplus):
            return (pieces(u, 0, -u) if negated else pieces(u, u, 0)) + log1p(e)
        return (pieces(u, e, 1) if negated else pieces(u, 1, e)) / (1 + e)

    return lambda expr: expr.replace(lambda e: isinstance(e, softplus | sigmoid), rewrite)


def _erf_term(term: sp.Expr, constant: sp.Expr) -> sp.Expr | None:
    """u where `term` is `constant * erf(u)`; -u where it is `-constant * erf(u)`."""
    coefficient, rest = term.as_coeff_Mul()
    if not isinstance(rest, sp.erf):
        return None
    if coefficient == constant:
        return rest.args[0]
    if coefficient == -constant:
        return -rest.args[0]
    return None


def _one_plus_erf(total: sp.Add) -> sp.Expr:
    constant, terms = total.as_coeff_Add()
    for term in sp.Add.make_args(terms):
        u = _erf_term(term, constant) if constant != 0 else None
        if u is not None:
            return terms - term + constant * one_plus_erf(u)
    return total


# Torch's own: `erfc` is one kernel where `erf` then `+ 1` is two (2^22
# float32: 1.6 ms against 2.9 ms), and exact where erf(u) nears -1. XLA's
# erfc costs twice its erf, so JAX keeps `1 + erf(u)`.
_TORCH_FUSED_FORMS = (
    *CANONICAL_FORMS,
    ReplaceOptim(  # c + c*erf(u) -> c*erfc(-u), c - c*erf(u) -> c*erfc(u)
        lambda e: e.is_Add and _one_plus_erf(e) is not e,
        _one_plus_erf,
    ),
)


def _with_fused_forms(d: Derivation, forms: Sequence[ReplaceOptim] = CANONICAL_FORMS) -> Derivation:
    def rewrite(expr: sp.Expr) -> sp.Expr:
        return canonical(expr, forms)

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


_JNP = frozenset({"import jax.numpy as jnp"})


def plan_jax(d: Derivation) -> JaxPlan:
    """What the JAX module of a rule computes: a custom_jvp, or a custom_vjp."""
    d = _with_fused_forms(d)
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
    emit = _Emitter(printer, d.symbols, lambda e: shared_exp(in_float(e)), statics)
    arrays = tuple(i.name for i in rule.inputs if not i.static)
    outputs = tuple(o.name for o in rule.outputs)
    diff_inputs = [i.name for i in d.diff_inputs]
    residuals = dict(d.residuals)
    shapes = ", ".join(f"jnp.shape({a})" for a in arrays)
    full_shape = f"jnp.broadcast_shapes({shapes})" if len(arrays) > 1 else shapes
    wraps = _broadcast_outputs(d, f"jnp.broadcast_to({{}}, {full_shape})")
    for n, cast in _dtype_casts(rule, {"int": "{}.astype(int)", "bool": "{}.astype(bool)"}).items():
        wraps[n] = _compose(cast, wraps.get(n, "{}"))
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
            elif _needs_broadcast(d, expr):
                wrap = f"jnp.broadcast_to({{}}, jnp.shape({o.name}))"
                results.append(Result(name, expr, wrap=wrap, imports=_JNP))
            else:
                results.append(Result(name, expr))
        applying: tuple[Assign, ...] = ()
        if rule.jvp is not None and rule.vjp is not None:
            maps, application, results = _given_linear_maps(d, emit, residuals, results, summed_wrap=broadcastable)
            applying, summed = (application,), broadcastable
        used = _used(r.expr for r in results if r.expr is not None)
        jvp = emit.block([(n, e) for n, e in residuals.items() if n in used], results)
        jvp = Block((*applying, *jvp.lines), jvp.results)
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
                summed = True
            else:
                results.append(Result(f"{i.name}_bar", expr))
        used = _used(r.expr for r in results if r.expr is not None)
        lets = [(n, e) for n, e in residuals.items() if n in used]
        used |= _used(e for _, e in lets)
        bwd = emit.block(lets, results)
        used |= set(_mentioned(arrays, [bwd.result]))
        saved = tuple(n for n in (*arrays, *outputs) if n in used)

    imports = {"import jax", *emit.imports}
    if any(i.static for i in rule.inputs):
        imports.add("import functools")
    return JaxPlan(
        header=_header(d),
        name=rule.name,
        params=_params(rule.inputs, "jax"),
        returns=_returns(rule, "jax"),
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
        util_names=tuple(n for n, used in (("as_arrays", bool(arrays)), (_SUM_TO_SHAPE, summed)) if used),
        array_arguments=array_arguments(rule, "as_arrays"),
        maps=maps,
    )


def _given_linear_maps(
    d: Derivation,
    emit: _Emitter,
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
        used = _used(r.expr for r in computed if r.expr is not None)
        block = emit.block([(n, e) for n, e in residuals.items() if n in used], computed)
        lines = [a.line for a in block.lines] + [f"return ({block.result},)"]
        return Function(f"_{name}_{kind}_map", (*statics, *known, *linear), tuple(lines))

    applied = [r for r in results if r.name.removesuffix("_dot") in diff_outputs]
    transposed = []
    for i in diff_inputs:
        expr = _linear(d, d.vjp_partials, i, diff_outputs, "_bar", transpose=True)
        if expr == 0:
            transposed.append(Result(f"{i}_bar", code=f"jnp.zeros_like({i})", imports=_JNP))
        elif summed_wrap:
            transposed.append(Result(f"{i}_bar", expr, wrap=f"_sum_to_shape({{}}, jnp.shape({i}))", imports=_JNP))
        else:
            transposed.append(Result(f"{i}_bar", expr))
    maps = (half("jvp", applied, dots), half("vjp", transposed, bars))
    emit.imports.add("from ._linear import linear_map")
    targets = ", ".join(f"{o}_dot" for o in diff_outputs) + ","
    packed = [_packed_tuple(known), _packed_tuple(dots), *([f"statics={_packed_tuple(statics)}"] if statics else [])]
    call = f"linear_map({maps[0].name}, {maps[1].name}, {', '.join(packed)})"
    kept = [Result(r.name, code=r.name) if r in applied else r for r in results]
    return maps, Assign(targets, call), kept


# Functions whose backward autodiff computes from their output (so it saves that).
_SAVES_OUTPUT = (sp.exp, sp.tanh, sigmoid)


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


def _recompute_cost(expr: sp.Expr, arrays: set[sp.Symbol]) -> int:
    """What recomputing `expr` in eager torch costs: a pass over memory per operation on arrays, two for a function.

    Constants fold: `sqrt(2) * x / 2` is one pass, as is `x**2`; `sin(x)` is
    one pass too, but its arithmetic costs about as much again.
    """
    cost = 0
    for node in sp.preorder_traversal(expr):
        if node.is_Atom or not node.free_symbols & arrays:
            continue
        if node.is_Add or node.is_Mul:
            operands = [a for a in node.args if a.free_symbols & arrays]
            cost += len(operands) - (len(operands) == len(node.args))
        else:
            cost += 2 if isinstance(node, sp.Function) else 1
    return cost


# Selections and roundings: a compare or two in a compiled loop, as cheap as arithmetic.
_SELECTIONS = (sp.Piecewise, sp.Abs, sp.sign, sp.Heaviside, sp.floor, sp.ceiling)


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


def saved_form(expr: sp.Expr, saved: Mapping[sp.Expr, sp.Symbol]) -> sp.Expr:
    """`expr` reading the saved intermediates, larger ones first; `subs` finds them inside products too."""
    for value, symbol in saved.items():
        expr = expr.subs(value, symbol)
    return expr


def _saved_intermediates(d: Derivation, taken: set[str]) -> dict[sp.Expr, sp.Symbol]:
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
    prefix = "saved"
    replacements, reduced = sp.cse([*forward, *partials], symbols=sp.numbered_symbols("_cse"), order="none")
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
    arrays = {d.symbols[i.name] for i in d.rule.inputs if not i.static}
    outputs = {e: d.symbols[n] for n, e in d.forward}
    if d.rule.fuse:
        # A compiled kernel does its arithmetic for free while it streams memory,
        # and saving costs two passes (a write, a read); the functions do not
        # come free: on the CPU each costs several passes' time (2^22 float32,
        # compiled: softplus 3.7 ms, tanh 1.5 ms, x * y, three passes, 1.1 ms).
        # Keeping what spares one function measured slower (fused gelu 0.28x
        # autodiff against 0.18x), hence two.
        cost = functools.partial(_fused_recompute_cost, arrays=arrays)
    else:
        # Recomputing one operation reads as much memory as reading it back
        # would, and often folds into the backward's own (a scale into a
        # product's constant, or into softplus_backward's beta): keep only dearer ones.
        cost = functools.partial(_recompute_cost, arrays=arrays)
    candidates = sorted(
        (full[s] for s in wanted if full[s].free_symbols & arrays and (full[s] in outputs or cost(full[s]) > 1)),
        key=lambda e: (e not in outputs, -cost(e), sp.default_sort_key(e)),
    )
    budget = len(_autodiff_saved(forward, arrays))
    chosen: dict[sp.Expr, sp.Symbol] = {}
    while any(n.startswith(prefix) for n in taken):
        prefix = "_" + prefix
    for expr in candidates:
        if budget == 0:
            break
        if expr not in outputs and any(sp.diff(expr, a).has(sp.Derivative, sp.Subs) for a in arrays):
            continue  # double backward needs its partials, and sympy has none
        count = len(set(chosen.values()) - set(outputs.values()))
        symbol = outputs.get(expr) or sp.Symbol(f"{prefix}{count}", real=True)
        rewritten = [p.subs(expr, symbol) for p in partials]
        if rewritten == partials:
            continue
        if d.rule.fuse and len(_functions_of(partials, arrays) - _functions_of(rewritten, arrays)) < 2:
            continue  # the backward still computes most of it (sin(x) * exp(-x**2) next to cos(x) * exp(-x**2))
        partials = rewritten
        chosen[expr] = symbol
        budget -= 1
    return chosen


def plan_torch(d: Derivation) -> TorchPlan:
    """What the torch module of a rule computes: a torch.func-style Function.

    Residuals, the rule's own and the intermediates chosen by
    `_saved_intermediates`, are extra outputs of `forward`, saved in
    `setup_context` and hidden by the wrapper.  A residual's cotangent is
    non-None only when a backward that read it is itself differentiated;
    with grads left unmaterialised, the first-order backward skips those
    terms, and the second-order one adds each residual's own partials (the
    MyCube trap).
    """
    d = _with_fused_forms(d, _TORCH_FUSED_FORMS)
    rule = d.rule
    symbols = dict(d.symbols)
    saved_map = _saved_intermediates(d, set(symbols))
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
    emit = _Emitter(printer, symbols, lambda e: native(in_float(e)), statics)
    inputs = tuple(i.name for i in rule.inputs)
    outputs = tuple(o.name for o in rule.outputs)
    diff_inputs = [i.name for i in d.diff_inputs]
    diff_outputs = [o.name for o in rule.outputs if o.differentiable]
    broadcastable = len([i for i in rule.inputs if not i.static]) > 1

    values = [*d.forward, *((n, _with_outputs(d, e)) for n, e in residuals)]
    arrays = tuple(i.name for i in rule.inputs if not i.static)
    if len(arrays) > 1:
        shape = f"torch.broadcast_shapes({', '.join(f'{a}.shape' for a in arrays)})"
        zeros = f"torch.zeros({shape}, dtype={arrays[0]}.dtype, device={arrays[0]}.device)"
    else:
        zeros = f"torch.zeros_like({arrays[0]})" if arrays else ""
    wraps = _broadcast_outputs(d, f"({{}}) + {zeros}") if arrays else {}
    # An input returned as it is must be a view: torch refuses to save it otherwise.
    aliases = {n for n, e in values if isinstance(e, sp.Symbol) and e.name in arrays and n not in wraps}
    wraps |= {n: f"{{}}.view_as({e})" for n, e in values if n in aliases}
    for n, cast in _dtype_casts(rule, {"int": "{}.long()", "bool": "{}.bool()"}).items():
        wraps[n] = _compose(cast, wraps.get(n, "{}"))
    forward_results = [Result(n, e, wrap=wraps.get(n, "{}")) for n, e in values]
    forward = emit.block([], forward_results)

    def backward_results(with_residuals: bool) -> list[Result]:
        found = []
        for i in rule.inputs:
            expr = _linear(d, vjp_partials, i.name, outputs, "_bar", transpose=True)
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
        expr = _linear(d, jvp_partials, o.name, diff_inputs, "_dot")
        if not o.differentiable:
            # Marked non-differentiable: torch wants no tangent for it.
            jvp_results.append(Result(f"{o.name}_dot", code="None"))
        elif expr == 0:
            jvp_results.append(Result(f"{o.name}_dot", code=f"torch.zeros_like({o.name})"))
        elif _needs_broadcast(d, expr):
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
    used = _used(computed) | set(absent_tangents)
    # Fixed code (a zeros_like, a broadcast to an output's shape) reads names too.
    used |= set(_mentioned((*inputs, *outputs, *residual_names), _block_texts(jvp, backward, first_order)))
    emit.imports.add("import torch")
    statics_used = tuple(s for s in statics if s in used)
    saved = tuple(n for n in (*inputs, *outputs, *residual_names) if n in used and n not in statics)
    non_diff = tuple(o.name for o in rule.outputs if not o.differentiable)
    values_out = (*outputs, *residual_names)
    fused_backward_params: tuple[str, ...] = ()
    fused_forward_compiled = fused_backward_compiled = None
    if rule.fuse:
        compiled = _Emitter(
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
        helpers = _mentioned(["tanh_expm1"], _block_texts(fused_forward_compiled, fused_backward_compiled))
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
    backward_texts = [*_block_texts(backward, first_order, backward_in_place), ", ".join(fused_backward_params)]
    jvp_texts = _block_texts(jvp) + [f"torch.zeros_like({x})" for x in absent_tangents]
    arguments = array_arguments(rule, "as_tensors")
    if arguments:
        emit.imports.add(TENSORS_IMPORT)
    return TorchPlan(
        header=_header(d),
        name=rule.name,
        class_name=rule.torch_class,
        params=_params(rule.inputs, "torch"),
        returns=_returns(rule, "torch"),
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


def _dtype_casts(rule: Rule, casts: Mapping[str, str]) -> dict[str, str]:
    """The wrap that gives each output of an integer or boolean `dtype` that dtype; sympy computes in floats."""
    return {o.name: casts[o.dtype] for o in rule.outputs if o.dtype in casts}


def _if_differs(block: Block, than: Block) -> Block | None:
    return block if block != than else None


def _in_place(emit: _Emitter, results: Sequence[Result], tensors: set[str]) -> Block | None:
    """The in-place form of `results`, or None where it would be the out-of-place code over again."""
    if not any(r.expr is not None for r in results):
        return None
    return emit.in_place_block(results, tensors)


def _read_names(block: Block | None, names: Sequence[str]) -> str:
    """The `names` that `block` reads, as call arguments."""
    return ", ".join(_mentioned(names, _block_texts(block))) if block is not None else ""


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


# ---------------------------------------------------------------- snippet rules


@dataclass(frozen=True)
class Function:
    """A function of the generated module: a body, or glue around the bodies."""

    name: str
    params: tuple[str, ...]
    lines: tuple[str, ...]
    decorator: str = ""
    returns: str = ""  # the return annotation, if any


@dataclass(frozen=True)
class SnippetPlan:
    """A module for a rule with snippet bodies: private body functions, then the glue.

    `assignments` are module-level statements placed between the bodies and
    the public function (a HostRule or a bridge); `tail` closes the module
    (a `defvjp`).  For torch, `methods` are the Function's staticmethods and
    `wrapper` the public function.
    """

    header: Header
    name: str
    imports: tuple[str, ...]
    bodies: tuple[Function, ...]
    assignments: tuple[str, ...]
    public: Function
    methods: tuple[Function, ...]
    tail: tuple[str, ...]
    class_name: str = ""
    class_attrs: tuple[str, ...] = ()
    compiled_subclass: bool = False
    called: tuple[str, ...] = ()  # the other rules its bodies call, imported at the module's end


_BODY_NAMES = {"forward": "_forward", "jvp": "_jvp", "vjp": "_vjp"}
_XP_IMPORT = {"jax": "import jax.numpy as xp", "torch": "import array_api_compat.torch as xp"}
_MODULE_IMPORTS = {
    "np": "import numpy as np",
    "math": "import math",
    "scipy": "import scipy",
    "jax": "import jax",
    "jnp": "import jax.numpy as jnp",
    "lax": "from jax import lax",
    "torch": "import torch",
}


def _body_name(role: str) -> str:
    return _BODY_NAMES.get(role) or "_" + role.replace(" ", "_")


def _call(code: Code) -> str:
    return f"{_body_name(code.role)}({', '.join(code.params)})"


def _tuple(names: Sequence[str]) -> str:
    """`a` for one name, `a, b` for several: unpacking targets or a returned tuple."""
    return ", ".join(names)


def _packed(names: Sequence[str]) -> str:
    """`a` for one name, `(a, b)` for several: a value inside a larger expression."""
    return names[0] if len(names) == 1 else f"({', '.join(names)})"


def _body_function(code: Code, backend: str, imports: set[str], statics: Sequence[str] = ()) -> Function:
    if code.kind == "sympy":
        printer = print_jax if backend == "jax" else print_torch
        emit = _Emitter(printer, code.params, scalars=() if backend == "jax" else statics)
        block = emit.block([], [Result(r, e) for r, e in zip(code.results, code.exprs, strict=True)])
        imports |= emit.imports
        lines = [a.line for a in block.lines] + [f"return {block.result}"]
    else:
        lines = code.text.splitlines()
        for module in code.modules:
            imports.add(_XP_IMPORT[backend] if module == "xp" else _MODULE_IMPORTS[module])
    return Function(_body_name(code.role), code.params, tuple(lines))


class _SnippetPlanner:
    """The shared facts about one snippet rule that both backends' plans use."""

    def __init__(self, d: SnippetDerivation, backend: str) -> None:
        self.d = d
        self.backend = backend
        rule = d.rule
        self.rule = rule
        self.arrays = tuple(i.name for i in rule.inputs if not i.static)
        self.statics = tuple(i.name for i in rule.inputs if i.static)
        self.inputs = tuple(i.name for i in rule.inputs)
        self.outputs = tuple(o.name for o in rule.outputs)
        self.diff_inputs = tuple(i.name for i in d.diff_inputs)
        self.diff_outputs = tuple(o.name for o in rule.outputs if o.differentiable)
        self.returned = d.returned_residuals
        self.imports: set[str] = set()
        codes = [d.forward, d.jvp, d.vjp, *(c for _, c in d.residuals)]
        self.bodies = tuple(
            _body_function(c[backend], backend, self.imports, self.statics) for c in codes if c and backend in c
        )
        calls = {name for c in codes if c and backend in c for name in c[backend].calls}
        self.called = tuple(sorted(calls - {rule.name}))
        self.broadcastable = len(self.arrays) > 1

    def code(self, role: str) -> Code | None:
        d = self.d
        found = {"forward": d.forward, "jvp": d.jvp, "vjp": d.vjp}.get(role)
        if role.startswith("residual "):
            found = dict(d.residuals)[role.split(" ", 1)[1]]
        return found[self.backend] if found and self.backend in found else None

    def forward_targets(self) -> str:
        return _tuple([*self.outputs, *(f"_{r}" for r in self.returned)])

    def residual_lines(self, needed: set[str], *, forward_call: bool) -> list[str]:
        """Compute the residuals a body reads: returned ones by calling the forward body, the rest by theirs."""
        lines = []
        if forward_call and needed & set(self.returned):
            targets = ["_" if n in self.outputs else n for n in (*self.outputs, *self.returned)]
            targets = [t if t in needed or t == "_" else "_" for t in targets]
            lines.append(f"{_tuple(targets)} = {_call(self.code('forward'))}")  # type: ignore[arg-type]
        for name, _ in self.d.residuals:
            if name in needed:
                lines.append(f"{name} = {_call(self.code(f'residual {name}'))}")  # type: ignore[arg-type]
        return lines

    def reads(self, *roles: str) -> set[str]:
        names: set[str] = set()
        for role in roles:
            code = self.code(role)
            if code is not None:
                names |= set(code.params)
        # A residual's body reads names too.
        for name, _ in self.d.residuals:
            if name in names:
                names |= set(self.code(f"residual {name}").params)  # type: ignore[union-attr]
        return names


def plan_jax_snippet(d: SnippetDerivation) -> SnippetPlan:
    """The JAX module of a snippet rule, by the route the derivation chose."""
    p = _SnippetPlanner(d, "jax")
    rule = d.rule
    imports = p.imports
    imports.add("import jax")  # every route annotates with jax.Array
    header = _header(d)
    params = _params(rule.inputs, "jax")
    result_type = _returns(rule, "jax")
    all_args = ", ".join(p.inputs)
    nondiff = tuple(k for k, i in enumerate(rule.inputs) if i.static)
    assignments: list[str] = []
    methods: list[Function] = []
    tail: list[str] = []
    decorator = ""
    route = d.routes.jax
    refusal = array_arguments(rule, "as_arrays")
    prologue = (*_doc_lines(header), *([refusal] if refusal else []))

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
            imports=_with_util_names(imports, rule),
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
            f"arrays={_str_tuple(p.arrays)}",
            f"statics={_str_tuple(p.statics)}",
            f"outputs=({outputs},)",
        ]
        if p.returned:
            fields.append(f"residuals={_str_tuple(p.returned)}")
        fields += [f"diff_inputs={_str_tuple(p.diff_inputs)}", f"diff_outputs={_str_tuple(p.diff_outputs)}"]
        if d.jvp is not None:
            fields.append("jvp=_jvp")
        if d.vjp is not None:
            fields.append("vjp=_vjp")
        fields.append(f"batching={rule.batching!r}")
        assignments.append(f"_{rule.name}_rule = HostRule(\n    " + ",\n    ".join(fields) + ",\n)")
        statics = ", ".join(f"{s}={s}" for s in p.statics)
        call = f"_{rule.name}_rule({', '.join([*p.arrays, *([statics] if statics else [])])})"
        results = [*p.outputs, *(f"_{r}" for r in p.returned)]
        lines = [f"{_tuple(results)}{',' if len(results) == 1 else ''} = {call}", f"return {_tuple(p.outputs)}"]
        return SnippetPlan(
            header=header,
            name=rule.name,
            imports=_with_util_names(imports, rule),
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
        primal_lines = [f"{p.forward_targets()} = {_call(forward)}", f"return {_tuple(p.outputs)}"]
    else:
        primal_lines = [f"return {_call(forward)}"]
    if route in (JaxRoute.CUSTOM_JVP, JaxRoute.CUSTOM_VJP, JaxRoute.TRANSPOSE, JaxRoute.LINEAR_MAP):
        kind = "custom_vjp" if route == JaxRoute.CUSTOM_VJP else "custom_jvp"
        decorator = f"@functools.partial(jax.{kind}, nondiff_argnums={nondiff})" if nondiff else f"@jax.{kind}"
        if nondiff:
            imports.add("import functools")

    if route in (JaxRoute.CUSTOM_JVP, JaxRoute.TRANSPOSE, JaxRoute.LINEAR_MAP):
        lines = [f"{_tuple(p.arrays)}{',' if len(p.arrays) == 1 else ''} = primals"]
        tangent_names = [f"{a}_dot" if a in p.diff_inputs else "_" for a in p.arrays]
        lines.append(f"{_tuple(tangent_names)}{',' if len(p.arrays) == 1 else ''} = tangents")
        lines.append(f"{_tuple(p.outputs)} = {rule.name}({all_args})")
        bodies = {JaxRoute.CUSTOM_JVP: ["jvp"], JaxRoute.TRANSPOSE: ["vjp"], JaxRoute.LINEAR_MAP: ["jvp", "vjp"]}
        needed = p.reads(*bodies[route])
        lines += p.residual_lines(needed, forward_call=True)
        dots = [f"{o}_dot" for o in p.diff_outputs]
        if route == JaxRoute.CUSTOM_JVP:
            lines.append(f"{_tuple(dots)} = {_call(p.code('jvp'))}")  # type: ignore[arg-type]
        else:
            maps, call = _linear_maps(p)
            methods += maps
            lines.append(f"{_tuple(dots)}, = {call}")
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
        lines.append(f"return {_packed(p.outputs)}, {_packed(out_tangents)}")
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
        fwd = [f"{_tuple(p.outputs)} = {rule.name}({all_args})"]
        fwd += p.residual_lines(needed, forward_call=True)
        saved = [n for n in (*p.arrays, *p.outputs, *p.returned, *(n for n, _ in d.residuals)) if n in needed]
        if p.broadcastable:
            saved += [i for i in p.diff_inputs if i not in saved]
        fwd.append(f"return {_packed(p.outputs)}, ({_tuple(saved)}{',' if len(saved) == 1 else ''})")
        bars = [f"{o}_bar" if o in p.diff_outputs else "_" for o in p.outputs]
        bwd = []
        if saved:
            bwd.append(f"{_tuple(saved)}{',' if len(saved) == 1 else ''} = saved")
        cotangent_param = bars[0] if len(bars) == 1 else "cotangents"
        if len(bars) > 1:
            bwd.append(f"{_tuple(bars)} = cotangents")
        results = [f"{i}_bar" for i in p.diff_inputs]
        bwd.append(f"{_tuple(results)} = {_call(vjp)}")
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
        bwd.append(f"return ({_tuple(returns)}{',' if len(returns) == 1 else ''})")
        methods.append(Function(f"_{rule.name}_fwd", p.inputs, tuple(fwd)))
        methods.append(Function(f"_{rule.name}_bwd", (*p.statics, "saved", cotangent_param), tuple(bwd)))
        tail.append(f"{rule.name}.defvjp(_{rule.name}_fwd, _{rule.name}_bwd)")

    return SnippetPlan(
        header=header,
        name=rule.name,
        imports=_with_util_names(imports, rule),
        bodies=p.bodies,
        called=p.called,
        assignments=tuple(assignments),
        public=Function(
            rule.name, tuple(map(str, params)), (*prologue, *primal_lines), decorator=decorator, returns=result_type
        ),
        methods=tuple(methods),
        tail=tuple(tail),
    )


def _linear_maps(p: _SnippetPlanner) -> tuple[list[Function], str]:
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
        (f"{_tuple(results)} = {_call(vjp)}", f"return ({_tuple(returned)},)"),
    )
    if jvp is not None:
        apply_lines: tuple[str, ...] = (f"return ({_call(jvp)},)",)
    else:
        p.imports.add("import functools")
        apply_lines = (
            f"vjp = functools.partial({transpose.name}, {', '.join((*statics, *known))})",
            f"return jax.linear_transpose(vjp, {', '.join(p.diff_outputs)})(({_tuple(dots)},))",
        )
    apply = Function(f"_{name}_jvp_map", (*statics, *known, *dots), apply_lines)
    args = [apply.name, transpose.name, _packed_tuple(known), _packed_tuple(dots)]
    if statics:
        args.append(_packed_tuple(statics))
    return [apply, transpose], f"linear_map({', '.join(args)})"


def _packed_tuple(names: Sequence[str]) -> str:
    return f"({names[0]},)" if len(names) == 1 else f"({', '.join(names)})"


def _str_tuple(names: Sequence[str]) -> str:
    """A tuple literal of the names; no trailing comma that would keep the formatter from joining it."""
    if len(names) == 1:
        return f"({names[0]!r},)"
    return "(" + ", ".join(repr(n) for n in names) + ")"


def _doc_lines(header: Header) -> tuple[str, ...]:
    return (header.doc,) if header.doc else ()


def plan_torch_snippet(d: SnippetDerivation) -> SnippetPlan:
    """The torch module of a snippet rule: a torch.func-style Function, or a plain function."""
    p = _SnippetPlanner(d, "torch")
    rule = d.rule
    imports = p.imports
    imports.add("import torch")
    header = _header(d)
    params = tuple(map(str, _params(rule.inputs, "torch")))
    result_type = _returns(rule, "torch")
    all_args = ", ".join(p.inputs)
    forward = p.code("forward")
    assert forward is not None
    host = forward.host
    cls = rule.torch_class

    arguments = array_arguments(rule, "as_tensors")
    util_names = ["as_tensors"] if arguments else []
    prologue = (*_doc_lines(header), *([arguments] if arguments else []))

    if d.jvp is None and d.vjp is None:
        # Nothing custom: torch differentiates the body as it is.
        if p.returned:
            lines = [f"{p.forward_targets()} = {_call(forward)}", f"return {_tuple(p.outputs)}"]
        else:
            lines = [f"return {_call(forward)}"]
        return SnippetPlan(
            header=header,
            name=rule.name,
            imports=_with_torch_util(imports, util_names),
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
        lines = [f"{_tuple(results)} = _forward({args})"]
        converted = []
        for n in results:
            spec = next((o for o in rule.outputs if o.name == n), None)
            if spec is not None and spec.dtype == "float" and like is not None:
                converted.append(f"from_host({n}, {like}, {like}.dtype)")
            else:
                converted.append(f"from_host({n}, {like})" if like else f"torch.as_tensor({n})")
        lines.append(f"return {_tuple(converted)}")
    else:
        # A body may return an input as it is (`return x`), which torch refuses to save for backward.
        read = ", ".join(a for a in p.arrays if a in forward.params)
        copies = read and needed & set(values)
        result = f"fresh_outputs({_call(forward)}, {read})" if copies else _call(forward)
        if copies:
            util_names.append("fresh_outputs")
        if p.returned:
            lines = [f"{p.forward_targets()} = {result}", f"return {_tuple(p.outputs)}"]
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
        setup.append(f"{_tuple(in_targets)}{',' if len(in_targets) == 1 else ''} = inputs")
    out_kept = set(saved) | set(non_diff)
    if out_kept & set(values):
        setup.append(f"{_tuple([n if n in out_kept else '_' for n in values])} = output")
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
            lines.append(f"{_tuple(saved)}{',' if len(saved) == 1 else ''} = ctx.saved_tensors")
        lines += [f"{s} = ctx.{s}" for s in statics]
        if not host:
            lines += p.residual_lines(needed, forward_call=True)
        return lines

    # backward
    bars = [f"{n}_bar" if n in p.diff_outputs else f"_{n}_bar" for n in values]
    lines = unpack()
    grads = [f"{i}_bar" for i in p.diff_inputs]
    if routes.torch_backward == Source.GIVEN:
        lines.append(f"{_tuple(grads)} = {_call(p.code('vjp'))}")  # type: ignore[arg-type]
    else:
        dots = [f"{i}_dot" for i in p.diff_inputs]
        lines.append(f"def jvp({', '.join(dots)}):")
        lines.append(f"    return {_call(p.code('jvp'))}")  # type: ignore[arg-type]
        zeros = ", ".join(f"torch.zeros_like({i})" for i in p.diff_inputs)
        lines.append(f"_, transpose = torch.func.vjp(jvp, {zeros})")
        out_bars = _packed([f"{o}_bar" for o in p.diff_outputs])
        lines.append(f"{_tuple(grads)}, = transpose({out_bars})")
    returns = []
    for i in rule.inputs:
        if i.name not in p.diff_inputs:
            returns.append("None")
        elif i.name in shapes:
            returns.append(f"{i.name}_bar.sum_to_size(ctx.{i.name}_shape)")
        else:
            returns.append(f"{i.name}_bar")
    lines.append(f"return {_tuple(returns)}")
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
            lines.append(f"{_tuple(out_dots)} = {_call(p.code('jvp'))}")  # type: ignore[arg-type]
        else:
            out_bars = [f"{o}_bar" for o in p.diff_outputs]
            lines.append(f"def vjp({', '.join(out_bars)}):")
            lines.append(f"    {_tuple(grads)} = {_call(p.code('vjp'))}")  # type: ignore[arg-type]
            if p.broadcastable:
                shaped = [f"{g}.sum_to_size(ctx.{i}_shape)" for g, i in zip(grads, p.diff_inputs, strict=True)]
                lines.append(f"    return {_tuple(shaped)}")
            else:
                lines.append(f"    return {_tuple(grads)}")
            # Linear, so any point will do; ones keep data-dependent loops running.
            ones = ", ".join(f"torch.ones_like({o})" for o in p.diff_outputs)
            lines.append(f"_, transpose = torch.func.vjp(vjp, {ones})")
            lines.append(f"{_tuple(out_dots)}, = transpose({_packed([f'{i}_dot' for i in p.diff_inputs])})")
        tangents = [f"{n}_dot" if n in p.diff_outputs else "None" for n in values]
        lines.append(f"return {_tuple(tangents)}")
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
            f"{_tuple([*p.outputs, *(f'_{r}' for r in values[len(p.outputs) :])])} = function.apply({all_args})"
        )
        wrapper.append(f"return {_tuple(p.outputs)}")
    else:
        wrapper.append(f"return function.apply({all_args})")
    return SnippetPlan(
        header=header,
        name=rule.name,
        imports=_with_torch_util(imports, util_names),
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
