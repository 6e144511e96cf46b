"""Code lines of the generated rule modules, per backend: what a reader reads besides the prose.

    python -m benchmarks.code_lines [generated folder, default generated/] [--markdown]

`--markdown` prints the table of docs/performance.md instead: the code lines
of eight rules of the shared examples, torch, JAX and both, and the totals
over all rule modules.

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

from benchmarks.table import Layout, Table, request

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


#: The rules of the markdown table: the shared examples, one of each kind of rule.
EXAMPLES = ("gelu", "sin_mul", "my_cube", "log1pexp", "fixed_point", "clip_gradient", "numpy_sort", "polar")
TOTAL = "all rule modules"
TABLES = ("code_lines",)


def layout(table: str = TABLES[0]) -> Layout:
    """The markdown table's header and row labels."""
    return Layout(("rule", "torch", "JAX", "both"), (*EXAMPLES, TOTAL))


def markdown_table(generated: Path) -> Table:
    """Code lines of each of `EXAMPLES` per backend and in all, then the totals over every rule module."""
    torch, jax = rule_modules(generated, "torch"), rule_modules(generated, "jax")
    table = Table(list(layout().header))
    for name in EXAMPLES:
        table.add(name, torch[name], jax[name], torch[name] + jax[name])
    total_torch, total_jax = sum(torch.values()), sum(jax.values())
    table.add(TOTAL, f"{total_torch:,}", f"{total_jax:,}", f"{total_torch + total_jax:,}")
    return table


def main(argv: list[str]) -> None:
    asked = request(argv, TABLES)
    argv = asked.rest
    generated = Path(argv[0]) if argv else Path(__file__).resolve().parent.parent / "generated"
    if asked.markdown:
        print(markdown_table(generated).markdown())
        return
    for backend in ("torch", "jax"):
        counts = rule_modules(generated, backend)
        for name, count in counts.items():
            print(f"{backend:6} {name:20} {count:5}")
        print(f"{backend:6} {'all rule modules':20} {sum(counts.values()):5}")


if __name__ == "__main__":
    main(sys.argv[1:])
