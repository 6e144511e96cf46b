"""The compiler's own modules parsed once per test process.

Several tests read rulegen's source as syntax trees (what a stage imports, which strings look like statements,
where a planner differentiates): each parsed every module again, a second or more a test.  The trees are only
read, never changed, so one parse serves them all.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path


@functools.cache
def parsed(path: Path) -> ast.Module:
    """`path`'s syntax tree, parsed on the first call in this process; callers must not change it."""
    return ast.parse(path.read_text())


@functools.cache
def walked(path: Path) -> tuple[ast.AST, ...]:
    """Every node of `parsed(path)`, in `ast.walk`'s order."""
    return tuple(ast.walk(parsed(path)))
