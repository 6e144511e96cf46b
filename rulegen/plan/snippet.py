"""What the two snippet planners share: the bodies as private functions, and the calls that glue them."""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence

from sympy.printing.precedence import PRECEDENCE

from rulegen.derive.routes import JaxRoute
from rulegen.derive.snippet import Code, SnippetDerivation
from rulegen.plan.code import (
    LITERAL,
    LOOSEST,
    PRIMARY,
    Assign,
    Class,
    Comment,
    Def,
    Docstring,
    Given,
    Import,
    Imported,
    Statement,
    Value,
)
from rulegen.plan.emit import Emitter
from rulegen.plan.forms import corrections
from rulegen.plan.model import Result, SnippetPlan
from rulegen.plan.printers import print_jax, print_torch
from rulegen.spec.names import ctx_attribute, hidden

_BODY_NAMES = {"forward": "_forward", "jvp": "_jvp", "vjp": "_vjp"}


_XP_IMPORT = {"jax": Import("jax.numpy", alias="xp"), "torch": Import("array_api_compat.torch", alias="xp")}


_MODULE_IMPORTS = {
    "np": Import("numpy", alias="np"),
    "math": Import("math"),
    "scipy": Import("scipy"),
    "jax": Import("jax"),
    "jnp": Import("jax.numpy", alias="jnp"),
    "lax": Import("jax", "lax"),
    "torch": Import("torch"),
}


def _body_name(role: str) -> str:
    return _BODY_NAMES.get(role) or "_" + role.replace(" ", "_")


def tuple_text(names: Sequence[str]) -> str:
    """`a` for one name, `a, b` for several: unpacking targets or a returned tuple."""
    return ", ".join(names)


def packed(names: Sequence[str]) -> str:
    """`a` for one name, `(a, b)` for several: a value inside a larger expression."""
    return names[0] if len(names) == 1 else f"({', '.join(names)})"


def tuple_literal(names: Sequence[str]) -> str:
    return f"({names[0]},)" if len(names) == 1 else f"({', '.join(names)})"


def str_tuple_literal(names: Sequence[str]) -> str:
    """A tuple literal of the names; no trailing comma that would keep the formatter from joining it."""
    if len(names) == 1:
        return f"({names[0]!r},)"
    return "(" + ", ".join(repr(n) for n in names) + ")"


def body_function(
    code: Code, backend: str, imports: set[Import], statics: Sequence[str] = ()
) -> tuple[Def, Value | None]:
    """The body as a private function, and its expression where it is one line (see `inline_expression`)."""
    if code.kind != "sympy":
        imports |= _module_imports(code, backend)
        given = Given(tuple(code.text.splitlines()))
        return Def(_body_name(code.role), code.params, (given,)), inline_expression(code)
    printer = print_jax if backend == "jax" else print_torch
    # The registry's corrections, as for a symbolic rule: a function the backend computes wrongly somewhere (or
    # lacks: torch has no beta) is the expression that replaces it.
    correct = corrections("jax" if backend == "jax" else "torch")
    emit = Emitter(printer, code.params, correct, scalars=() if backend == "jax" else statics)
    block = emit.block([], [Result(r, e) for r, e in zip(code.results, code.exprs, strict=True)])
    imports |= emit.imports
    # A torch derivative method passes a static as `ctx.beta`, which a function's parameter takes.
    passed_from_ctx = backend == "torch" and bool(set(statics) & set(code.params))
    one_line = not block.lines and len(block.results) == 1 and not passed_from_ctx
    return Def(_body_name(code.role), code.params, block.statements), block.results[0] if one_line else None


def _module_imports(code: Code, backend: str) -> set[Import]:
    return {_XP_IMPORT[backend] if module == "xp" else _MODULE_IMPORTS[module] for module in code.modules}


def inline_expression(code: Code, spelled: Mapping[str, str] | None = None) -> Value | None:
    """The expression of a body that is one `return <expression>` on one line, to write where it is called.

    A person would not wrap `return xp.clip(out_bar, lo, hi)` in a function
    of its own.  Bodies with comments keep them, in their function.  With
    `spelled`, the names it reads are written so (`ctx.dim` for `dim`), and
    None where it binds one of them itself (a lambda's parameter).
    """
    if code.kind == "numpy" or "#" in code.text:
        return None
    statements = ast.parse(code.text).body
    if len(statements) != 1 or not isinstance(statements[0], ast.Return) or statements[0].value is None:
        return None
    value = statements[0].value
    text = ast.get_source_segment(code.text, value)
    if text is None or "\n" in text:
        return None
    if spelled:
        nodes = list(ast.walk(value))
        bound = {n.id for n in nodes if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
        bound |= {n.arg for n in nodes if isinstance(n, ast.arg)}
        reads = sorted(
            (n.col_offset - value.col_offset, (n.end_col_offset or 0) - value.col_offset, spelled[n.id])
            for n in nodes
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in spelled
        )
        # Python 3.11 places names inside an f-string by the string's own offsets: not rewritten by position.
        if bound & set(spelled) or (reads and any(isinstance(n, ast.JoinedStr) for n in nodes)):
            return None
        # ast's offsets count UTF-8 bytes.
        encoded = text.encode()
        for start, end, name in reversed(reads):
            encoded = encoded[:start] + name.encode() + encoded[end:]
        text = encoded.decode()
    return Value(text, binding(value))


#: How tightly each of Python's operators binds, on the printers' scale (rulegen.plan.code.PRIMARY).
_OPERATORS: dict[type, int] = {
    ast.Add: PRECEDENCE["Add"],
    ast.Sub: PRECEDENCE["Add"],
    ast.Mult: PRECEDENCE["Mul"],
    ast.MatMult: PRECEDENCE["Mul"],
    ast.Div: PRECEDENCE["Mul"],
    ast.FloorDiv: PRECEDENCE["Mul"],
    ast.Mod: PRECEDENCE["Mul"],
    ast.Pow: PRECEDENCE["Pow"],
    ast.BitOr: PRECEDENCE["BitwiseOr"],
    ast.BitXor: PRECEDENCE["BitwiseXor"],
    ast.BitAnd: PRECEDENCE["BitwiseAnd"],
    ast.LShift: PRECEDENCE["BitwiseAnd"],
    ast.RShift: PRECEDENCE["BitwiseAnd"],
    ast.And: PRECEDENCE["And"],
    ast.Or: PRECEDENCE["Or"],
}


def binding(node: ast.expr) -> int:
    """How tightly the expression a rule's snippet writes binds, by its syntax tree's node (see PRIMARY)."""
    match node:
        case ast.Name() | ast.Call() | ast.Attribute() | ast.Subscript():
            return PRIMARY
        case ast.List() | ast.Dict() | ast.Set() | ast.ListComp() | ast.DictComp() | ast.SetComp():
            return PRIMARY  # a display: an atom
        case ast.Constant():
            return LITERAL
        case ast.BinOp(op=op) | ast.BoolOp(op=op):
            return _OPERATORS.get(type(op), LOOSEST)
        case ast.UnaryOp(op=ast.Not()):
            return PRECEDENCE["And"]  # `not a`: looser than a comparison
        case ast.UnaryOp():
            return PRECEDENCE["Add"]  # `-a`, `~a`: looser than a power
        case ast.Compare():
            return PRECEDENCE["Relational"]
    return LOOSEST  # a conditional expression, a lambda, a tuple


class SnippetPlanner:
    """The shared facts about one snippet rule that both backends' plans use."""

    def __init__(self, d: SnippetDerivation, backend: str) -> None:
        self.d = d
        self.backend = backend
        rule = d.rule
        self.rule = rule
        self.arrays = tuple(i.name for i in rule.inputs if not i.static)
        self.statics = tuple(i.name for i in rule.inputs if i.static)
        self.inputs = tuple(i.name for i in rule.inputs)
        # How the module spells generated code's own names (`primals`, `torch`): `_` added where the rule takes one.
        self.own = rule.own_names
        self.ctx = self.own["ctx"]  # a torch Function's context parameter
        self.outputs = tuple(o.name for o in rule.outputs)
        self.diff_inputs = tuple(i.name for i in d.diff_inputs)
        self.diff_outputs = tuple(o.name for o in rule.outputs if o.differentiable)
        self.returned = d.returned_residuals
        self.imports: set[Import] = set()
        codes = [d.forward, d.jvp, d.vjp, *(c for _, c in d.residuals)]
        # A host primitive takes its bodies as functions (a one-line one as a lambda, `reference`); elsewhere a
        # one-line body is written where it is called.
        by_reference = backend == "jax" and d.routes.jax == JaxRoute.PRIMITIVE
        present = [c[backend] for c in codes if c and backend in c]
        made = [body_function(c, backend, self.imports, self.statics) for c in present]
        # A torch derivative method reads a static from ctx where it is used: a body that rebinds its name
        # (a lambda's parameter) stays a function, which takes it as an argument.
        from_ctx = self.spelled_from_ctx() if backend == "torch" else {}
        self.inlined = {
            f.name: value
            for (f, value), c in zip(made, present, strict=True)
            if value is not None
            and not (by_reference and c.host)
            and (not set(from_ctx) & set(c.params) or inline_expression(c, from_ctx) is not None)
        }
        self.bodies = tuple(f for f, _ in made if f.name not in self.inlined)
        calls = {name for c in codes if c and backend in c for name in c[backend].calls}
        self.requires = tuple(sorted({m for c in codes if c and backend in c for m in c[backend].imports}))
        self.apis = tuple(sorted({a for c in codes if c and backend in c for a in c[backend].apis}))
        self.called = tuple(sorted(calls - {rule.name}))
        self.broadcastable = len(self.arrays) > 1

    def call(self, code: Code, *, in_ctx: bool = False) -> str:
        """What computes the body `code` where a method needs it: its expression (in parentheses unless a
        primary or a literal), or a call of its function.

        `in_ctx`: in a torch Function's derivative method, which reads a static
        input where it passes it (`ctx.dim`), rather than unpacking it first.
        """
        return self.computed(code, in_ctx=in_ctx).within(LITERAL)

    def computed(self, code: Code, *, in_ctx: bool = False) -> Value:
        """`call`'s expression or call, as a Value: the code, and how tightly it binds."""
        spelled = self.spelled_from_ctx() if in_ctx else {}
        name = _body_name(code.role)
        if name in self.inlined:
            return (inline_expression(code, spelled) if spelled else None) or self.inlined[name]
        return Value(f"{name}({', '.join(spelled.get(n, n) for n in code.params)})")

    def reference(self, code: Code) -> str:
        """The body `code` as a function value: its function's name, or a lambda of its one line."""
        name = _body_name(code.role)
        if name in self.inlined:
            body = self.inlined[name].within(LITERAL)
            return f"lambda{' ' if code.params else ''}{', '.join(code.params)}: {body}"
        return name

    def spelled_from_ctx(self) -> dict[str, str]:
        """Each static input as a torch Function's derivative method reads it: `ctx.dim`."""
        return {s: f"{self.ctx}.{ctx_attribute(s)}" for s in self.statics}

    def code(self, role: str) -> Code | None:
        d = self.d
        found = {"forward": d.forward, "jvp": d.jvp, "vjp": d.vjp}.get(role)
        if role.startswith("residual "):
            found = dict(d.residuals)[role.split(" ", 1)[1]]
        return found[self.backend] if found and self.backend in found else None

    def given(self, role: str) -> Code:
        """The body `role`, which the route guarantees the rule gives."""
        code = self.code(role)
        if code is None:
            raise AssertionError(f"{self.rule.name}: its route needs a {role} body for {self.backend}")
        return code

    def forward_targets(self) -> str:
        return tuple_text([*self.outputs, *map(hidden, self.returned)])

    def residual_lines(self, needed: set[str], *, forward_call: bool, in_ctx: bool = False) -> list[Statement]:
        """Compute the residuals a body reads: returned ones by calling the forward body, the rest by theirs."""
        lines: list[Statement] = []
        if forward_call and needed & set(self.returned):
            targets = ["_" if n in self.outputs else n for n in (*self.outputs, *self.returned)]
            targets = [t if t in needed or t == "_" else "_" for t in targets]
            lines.append(Assign(tuple_text(targets), self.call(self.given("forward"), in_ctx=in_ctx)))
        for name, _ in self.d.residuals:
            if name in needed:
                lines.append(Assign(name, self.call(self.given(f"residual {name}"), in_ctx=in_ctx)))
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
                names |= set(self.given(f"residual {name}").params)
        return names


def snippet_definitions(plan: SnippetPlan) -> tuple[Statement, ...]:
    """What a snippet rule's module defines after its imports: the bodies, then the glue around them."""
    found: list[Statement] = [*plan.bodies, *plan.assignments]
    if plan.class_name:
        doc = (Docstring(plan.header.class_help),) if plan.header.class_help else ()
        found.append(Class(plan.class_name, (plan.base,), (*doc, *plan.methods)))
        found += [plan.routed_line] if plan.routed_line else []
        found += [*plan.result_classes, plan.public]
    else:
        found += [*plan.result_classes, plan.public, *plan.methods]
    found += plan.tail
    if plan.called:
        found.append(Comment("The rules this one calls, imported last: rules may call each other, and a"))
        found.append(Comment("module that defines its own names first can be imported in any order."))
        found += [Imported((Import(f".{rule}", rule),), noqa="E402") for rule in plan.called]
    return tuple(found)
