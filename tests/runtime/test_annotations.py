"""The runtime helpers ship in packages marked `py.typed`: every function of theirs is annotated.

mypy checks them so (`disallow_untyped_defs` for `rulegen.runtime` in
pyproject.toml); this reads the source, so that a helper added without
annotations fails here too.
"""

from __future__ import annotations

import ast

from rulegen.render.layout import RUNTIME


def _unannotated(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            a = node.args
            arguments = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(x for x in (a.vararg, a.kwarg) if x)]
            bare = [x.arg for x in arguments if x.annotation is None and x.arg not in ("self", "cls")]
            if bare or node.returns is None:
                found.append(f"{node.name}:{node.lineno} ({', '.join(bare) or 'return'})")
    return found


def test_every_runtime_function_is_annotated():
    missing = {
        path.relative_to(RUNTIME).as_posix(): found
        for path in sorted(RUNTIME.rglob("*.py"))
        if (found := _unannotated(ast.parse(path.read_text())))
    }
    assert not missing, missing


def test_the_check_finds_an_unannotated_function():
    assert _unannotated(ast.parse("def f(x: int): ...\ndef g(y) -> None: ...")) == ["f:1 (return)", "g:2 (y)"]
