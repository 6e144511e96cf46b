"""Parse Python snippet bodies (`python:`, `jax:`, `torch:`, `numpy:`) without running them,
and decide what each backend runs for a rule that has them.

A snippet is the body of a function whose parameters are the names in scope
(inputs, outputs, residuals, tangents, cotangents).  Building never executes
it: it is parsed with `ast`, a syntax error is reported at its line in the
rule file, and every name it reads must be a parameter, a name it binds
itself, a builtin, the backend's modules or another rule of the build.
"""

from __future__ import annotations

import ast
import builtins
import difflib
import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import sympy as sp

from rulegen.derive.expr import parse_expression
from rulegen.derive.floors import apis_used, listed
from rulegen.derive.routes import Gives, Routes, choose_routes
from rulegen.derive.symbols import scope, symbols_of
from rulegen.spec.errors import Loc, SpecError, SpecErrors
from rulegen.spec.names import COTANGENT, TANGENT, cotangent, tangent
from rulegen.spec.rules import Input, Rule, SnippetBody, SympyBody, Text

#: Modules each kind of body sees, by the names it uses for them.
MODULES = {
    "python": frozenset({"xp", "math"}),
    "jax": frozenset({"jax", "jnp", "lax", "math", "np"}),
    "torch": frozenset({"torch", "math", "np"}),
    "numpy": frozenset({"np", "math", "scipy"}),
}
_BUILTINS = frozenset(dir(builtins))
#: The framework modules behind those names (`xp` is whichever framework runs the body).
_FRAMEWORK_NAMES = {"jax": "jax", "jnp": "jax.numpy", "lax": "jax.lax", "torch": "torch"}


@dataclass(frozen=True)
class Snippet:
    """A parsed body: its text, where it is, and the names it reads from outside."""

    kind: str
    text: Text
    reads: frozenset[str]
    imports: frozenset[str] = frozenset()  # top-level modules the body imports itself
    apis: frozenset[str] = frozenset()  # the framework APIs it calls whose age matters (rulegen.derive.floors)
    called: frozenset[str] = frozenset()  # the names it calls as functions (`f` of `f(a, x)`)


def _bound_names(tree: ast.AST) -> set[str]:
    """Every name the body binds anywhere: assignments, loops, defs, arguments, imports."""
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            bound.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and node.name:
            bound.add(node.name)
    return bound


def parse_snippet(kind: str, text: Text, scope: Iterable[str], rules: Iterable[str] = ()) -> Snippet:
    """The parsed body, or a SpecError at the line and column of the problem in the rule file."""
    source = text.value
    wrapped = "def _body():\n" + "".join(f"    {line}\n" for line in source.splitlines())
    try:
        tree = ast.parse(wrapped)
    except SyntaxError as exc:
        line = max((exc.lineno or 2) - 1, 1)
        col = max((exc.offset or 5) - 5, 0)
        raise SpecError(text.loc.offset(line, col), f"syntax error in the `{kind}` body: {exc.msg}") from None
    except (RecursionError, MemoryError, ValueError) as exc:
        raise SpecError(text.loc, f"the `{kind}` body cannot be parsed: {type(exc).__name__}") from None
    function = tree.body[0]
    assert isinstance(function, ast.FunctionDef)
    if not any(isinstance(node, ast.Return) and node.value is not None for node in ast.walk(function)):
        raise SpecError(text.loc, f"the `{kind}` body returns nothing; end it with `return ...`")
    known = set(scope) | set(rules) | MODULES[kind] | _BUILTINS | _bound_names(function)
    reads: set[str] = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            if node.id not in known:
                close = difflib.get_close_matches(node.id, sorted(known - _BUILTINS), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                where = text.loc.offset(node.lineno - 1, node.col_offset - 4)
                raise SpecError(where, f"unknown name {node.id!r} in the `{kind}` body{hint}")
            reads.add(node.id)
    apis = listed(apis_used(function, {n: m for n, m in _FRAMEWORK_NAMES.items() if n in MODULES[kind]}))
    called = frozenset(
        node.func.id
        for node in ast.walk(function)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in reads
    )
    return Snippet(
        kind=kind, text=text, reads=frozenset(reads), imports=_imported_modules(function), apis=apis, called=called
    )


def _imported_modules(tree: ast.AST) -> frozenset[str]:
    """The top-level modules a body imports (`import scipy.special` imports scipy): what its package requires."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return frozenset(found)


# ---------------------------------------------------------------- snippet rules

#: What `Code.kind` a backend runs for each form a body may take, best first.
_BACKEND_KINDS = {"jax": ("jax", "python", "numpy"), "torch": ("torch", "python", "numpy")}


@dataclass(frozen=True)
class Code:
    """One body as one backend runs it: a snippet's text, or sympy expressions to print.

    `params` are the names in scope that the body reads, in scope order; the
    generated function that holds the body takes exactly these.
    """

    role: str
    kind: str  # "sympy", "python", "jax", "torch" or "numpy"
    params: tuple[str, ...]
    results: tuple[str, ...]
    loc: Loc
    text: str = ""
    exprs: tuple[sp.Expr, ...] = ()
    calls: tuple[str, ...] = ()  # other rules of the build it calls
    modules: tuple[str, ...] = ()  # module names it reads (np, jnp, torch, ...)
    imports: tuple[str, ...] = ()  # top-level modules the body imports itself
    apis: tuple[str, ...] = ()  # the framework APIs it calls whose age matters (rulegen.derive.floors)
    called: tuple[str, ...] = ()  # the names in scope it calls as functions (a static `f` of `f(a, x)`)

    @property
    def host(self) -> bool:
        return self.kind == "numpy"


BackendCode = Mapping[str, Code]  # backend ("jax", "torch") -> the code it runs


@dataclass(frozen=True)
class SnippetDerivation:
    """A rule with at least one snippet body: what each backend runs, and which routes carry it (`derive.routes`)."""

    rule: Rule
    forward: BackendCode
    jvp: BackendCode | None
    vjp: BackendCode | None
    residuals: tuple[tuple[str, BackendCode], ...]
    returned_residuals: tuple[str, ...]
    routes: Routes

    @property
    def diff_inputs(self) -> tuple[Input, ...]:
        return tuple(i for i in self.rule.inputs if i.differentiable)

    @property
    def called(self) -> frozenset[str]:
        """The names in scope that some body calls as functions (`f` of `f(a, x)`)."""
        bodies = [self.forward, self.jvp, self.vjp, *(code for _, code in self.residuals)]
        return frozenset(n for body in bodies if body is not None for code in body.values() for n in code.called)

    @property
    def host(self) -> bool:
        return self.forward["torch"].host


class _SnippetDeriver:
    def __init__(self, rule: Rule, known_rules: frozenset[str]) -> None:
        self.rule = rule
        self.known_rules = known_rules
        self.errors: list[SpecError] = []
        self.inputs = [i.name for i in rule.inputs]
        self.outputs = [o.name for o in rule.outputs]
        self.diff_inputs = [i.name for i in rule.inputs if i.differentiable]
        self.diff_outputs = [o.name for o in rule.outputs if o.differentiable]
        self.returned = list(rule.returned_residuals)

    def scope(self, role: str) -> list[str]:
        return scope(self.rule, role)

    def results(self, role: str) -> tuple[str, ...]:
        if role == "forward":
            return (*self.outputs, *self.returned)
        if role == "jvp":
            return tuple(tangent(n) for n in self.diff_outputs)
        if role == "vjp":
            return tuple(cotangent(n) for n in self.diff_inputs)
        return (role.split(" ", 1)[1],)

    def code(self, role: str, body: Any) -> BackendCode | None:
        if body is None:
            return None
        scope = self.scope(role)
        results = self.results(role)
        if isinstance(body, SympyBody):
            return self.sympy_code(role, body, scope, results)
        found: dict[str, Code] = {}
        parsed: dict[str, Snippet] = {}
        for kind in ("python", "jax", "torch", "numpy"):
            text = getattr(body, kind)
            if text is None:
                continue
            try:
                parsed[kind] = parse_snippet(kind, text, scope, self.known_rules)
            except SpecError as exc:
                self.errors.append(exc)
                continue
            # The rule's names hide a module in the bodies whose scope they are in: one body would read the
            # module where another reads the rule's name, and the module keeps its name for the bodies alone.
            hidden = sorted(parsed[kind].reads & MODULES[kind] & (set(symbols_of(self.rule)) - set(scope)))
            if hidden:
                self.errors.append(
                    SpecError(
                        text.loc,
                        f"the `{kind}` body reads the module {hidden[0]!r}, which the rule also names one of its "
                        "own values; choose another name for it",
                    )
                )
        for backend, kinds in _BACKEND_KINDS.items():
            chosen = next((k for k in kinds if k in parsed), None)
            if chosen is None:
                continue
            snippet = parsed[chosen]
            found[backend] = Code(
                role=role,
                kind=chosen,
                params=tuple(n for n in scope if n in snippet.reads),
                results=results,
                loc=snippet.text.loc,
                text=textwrap.dedent(snippet.text.value).strip("\n"),
                calls=tuple(
                    sorted(n for n in snippet.reads & self.known_rules if n not in scope and n != self.rule.name)
                ),
                modules=tuple(sorted(snippet.reads & MODULES[chosen] - set(scope))),
                imports=tuple(sorted(snippet.imports)),
                apis=tuple(sorted(snippet.apis)),
                called=tuple(n for n in scope if n in snippet.called),
            )
        return found

    def sympy_code(self, role: str, body: SympyBody, scope: list[str], results: tuple[str, ...]) -> BackendCode:
        symbols = symbols_of(self.rule)
        names = [r for r in results if role != "forward" or r in self.outputs]
        bare = [r.removesuffix(TANGENT).removesuffix(COTANGENT) for r in names]
        exprs_by_name = body.exprs
        texts: list[Text] = []
        if None in exprs_by_name:
            if len(names) != 1:
                self.errors.append(SpecError(body.loc, f"this {role} needs one expression per name: {', '.join(bare)}"))
                return {}
            texts = [exprs_by_name[None]]
        else:
            for name in bare:
                if name not in exprs_by_name:
                    self.errors.append(SpecError(body.loc, f"the {role} body gives no expression for {name!r}"))
                    return {}
            extra = [k for k in exprs_by_name if k not in bare]
            if extra:
                assert extra[0] is not None
                self.errors.append(SpecError(exprs_by_name[extra[0]].loc, f"{extra[0]!r} is not one of {bare}"))
                return {}
            texts = [exprs_by_name[n] for n in bare]
        exprs = []
        for text in texts:
            try:
                exprs.append(parse_expression(text.value, {n: symbols[n] for n in scope}, text.loc))
            except SpecError as exc:
                self.errors.append(exc)
        if len(exprs) != len(texts):
            return {}
        reads = {s.name for e in exprs for s in e.free_symbols}
        code = Code(
            role=role,
            kind="sympy",
            params=tuple(n for n in scope if n in reads),
            results=results,
            loc=body.loc,
            exprs=tuple(exprs),
        )
        return {"jax": code, "torch": code}

    def derive(self) -> SnippetDerivation:
        rule = self.rule
        forward = self.code("forward", rule.forward) or {}
        jvp = self.code("jvp", rule.jvp)
        vjp = self.code("vjp", rule.vjp)
        residuals = []
        for name, body in rule.residual_bodies.items():
            residuals.append((name, self.code(f"residual {name}", body) or {}))
        if self.errors:
            raise SpecErrors(self.errors)
        if "torch" not in forward:
            raise SpecErrors([SpecError(rule.forward.loc, "the forward needs a `torch` or `python` body")])
        host = forward["torch"].host
        torch_only = "jax" not in forward
        for role, code in (("jvp", jvp), ("vjp", vjp), *((f"residual {n}", c) for n, c in residuals)):
            if code is not None and "torch" in code and code["torch"].host:
                raise SpecErrors(
                    [SpecError(code["torch"].loc, f"a `numpy` body is for the forward only, not the {role}")]
                )
            if code is not None and "jax" not in code and not torch_only:
                raise SpecErrors([SpecError(code["torch"].loc, f"the {role} needs a `jax` or `python` body")])
        if self.returned and not (isinstance(rule.forward, SnippetBody)):
            raise SpecErrors([SpecError(rule.loc, "residuals returned by the forward need a snippet forward")])
        if rule.mode == "vjp" and vjp is None:
            raise SpecErrors([SpecError(rule.loc, "`mode: vjp` needs a `vjp` body")])
        if rule.mode == "jvp" and jvp is None:
            raise SpecErrors([SpecError(rule.loc, "`mode: jvp` needs a `jvp` body")])
        if torch_only and rule.jvp is not None and rule.vjp is None:
            raise SpecErrors([SpecError(rule.loc, "a torch-only rule reaches JAX through its VJP: give `vjp` too")])

        routes = choose_routes(
            Gives(
                rule.name,
                symbolic=False,
                jvp=jvp is not None,
                vjp=vjp is not None,
                host=host,
                torch_only=torch_only,
                mode=rule.mode,
                true_derivative=rule.checks.true_derivative,
            )
        )
        if host and not isinstance(rule.batching, str):
            raise SpecErrors(
                [SpecError(rule.batching.loc, "batching bodies are not supported yet: use elementwise or sequential")]
            )
        if host and residuals:
            raise SpecErrors([SpecError(rule.loc, "a `numpy` forward returns its residuals: list their names")])
        if host and jvp is None and vjp is None:
            raise SpecErrors([SpecError(rule.loc, "a `numpy` forward runs outside autodiff: give a `jvp` or `vjp`")])
        return SnippetDerivation(
            rule=rule,
            forward=forward,
            jvp=jvp,
            vjp=vjp,
            residuals=tuple(residuals),
            returned_residuals=tuple(self.returned),
            routes=routes,
        )


def derive_snippet_rule(rule: Rule, known_rules: Iterable[str]) -> SnippetDerivation:
    """What each backend runs for a rule with snippet bodies, or SpecErrors saying what is wrong."""
    return _SnippetDeriver(rule, frozenset(known_rules) | {rule.name}).derive()
