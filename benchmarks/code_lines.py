"""Code lines of the generated rule modules, per backend: what a reader reads besides the prose.

    python -m benchmarks.code_lines [generated folder, default generated/]

A code line holds a token that is neither a comment nor part of a docstring
(module, class or function); blank lines do not count. The runtime helpers
(`_name.py`) are not rule modules and are left out.
"""

from __future__ import annotations

import ast
import io
import sys
import tokenize
from pathlib import Path

_LAYOUT = {
    tokenize.COMMENT,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENCODING,
    tokenize.ENDMARKER,
}


def _docstring_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        first = node.body[0] if node.body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
            lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def code_lines(text: str) -> int:
    """The number of lines of the Python source `text` that hold code."""
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type not in _LAYOUT:
            lines.update(range(token.start[0], token.end[0] + 1))
    return len(lines - _docstring_lines(ast.parse(text)))


def rule_modules(generated: Path, backend: str) -> dict[str, int]:
    """Code lines of each rule module of `backend` under `generated`, by rule name."""
    return {path.stem: code_lines(path.read_text()) for path in sorted((generated / backend).glob("[!_]*.py"))}


def main(argv: list[str]) -> None:
    generated = Path(argv[0]) if argv else Path(__file__).resolve().parent.parent / "generated"
    for backend in ("torch", "jax"):
        counts = rule_modules(generated, backend)
        for name, count in counts.items():
            print(f"{backend:6} {name:20} {count:5}")
        print(f"{backend:6} {'all rule modules':20} {sum(counts.values()):5}")


if __name__ == "__main__":
    main(sys.argv[1:])
