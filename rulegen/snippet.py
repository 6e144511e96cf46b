"""Parse Python snippet bodies (`python:`, `jax:`, `torch:`, `numpy:`) without running them.

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
from collections.abc import Iterable
from dataclasses import dataclass

from rulegen.errors import SpecError
from rulegen.spec import Text

#: Modules each kind of body sees, by the names it uses for them.
MODULES = {
    "python": frozenset({"xp", "math"}),
    "jax": frozenset({"jax", "jnp", "lax", "math", "np"}),
    "torch": frozenset({"torch", "math", "np"}),
    "numpy": frozenset({"np", "math", "scipy"}),
}
_BUILTINS = frozenset(dir(builtins))


@dataclass(frozen=True)
class Snippet:
    """A parsed body: its text, where it is, and the names it reads from outside."""

    kind: str
    text: Text
    reads: frozenset[str]


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
    return Snippet(kind=kind, text=text, reads=frozenset(reads))
