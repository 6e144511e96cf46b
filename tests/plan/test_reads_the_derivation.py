"""The planners read what derive/ hands them: they neither re-derive a rule's names nor parse its bodies again.

A rule's spelling of the generator's own names (`Rule.own_names`) is worked out once, in the spec stage; the
symbols of values a planner names (a saved intermediate, its tangent) come from the Derivation, and so does every
derivative a planner prints.  Before, plan/ called `derive.symbols.own_names` at 22 places, each parsing the
rule's snippet bodies again, and differentiated at four.
"""

from __future__ import annotations

import ast
from pathlib import Path

import rulegen.plan
from rulegen.spec.rules import read_rule_file
from tests.sources import parsed

PLAN = Path(rulegen.plan.__file__).parent
ROOT = Path(__file__).resolve().parents[2]


def _modules() -> dict[str, ast.Module]:
    return {path.name: parsed(path) for path in sorted(PLAN.glob("*.py"))}


def test_no_planner_imports_the_derivation_of_names() -> None:
    imported = {
        (name, node.module)
        for name, tree in _modules().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rulegen.derive.symbols")
    }
    assert not imported, imported


#: What differentiates: sympy's `diff` (a method, or the function) and derive's own `differentiate`.
_DERIVATIVES = frozenset({"diff", "differentiate"})


class _Differentiations(ast.NodeVisitor):
    """The innermost function around each call of a module that differentiates."""

    def __init__(self) -> None:
        self.functions: list[str] = []
        self.found: set[str] = set()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.functions.append(node.name)
        self.generic_visit(node)
        self.functions.pop()

    def visit_Call(self, node: ast.Call) -> None:
        called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
        if called in _DERIVATIVES:
            self.found.add(self.functions[-1] if self.functions else "<module>")
        self.generic_visit(node)


def test_no_planner_differentiates() -> None:
    """The saved intermediates' partials, the chained outputs' tangents and whether a given partial is sympy's
    are derived in rulegen.derive.saved and read from the Derivation."""
    found = set()
    for name, tree in _modules().items():
        visitor = _Differentiations()
        visitor.visit(tree)
        found |= {(name, function) for function in visitor.found}
    assert not found, found


def test_a_rules_spelling_is_worked_out_once(tmp_path: Path) -> None:
    path = tmp_path / "ctx_rule.yaml"
    path.write_text("name: ctx_rule\ninputs: [ctx, x]\nforward:\n  python: return ctx * max(x, 0.0)\n")
    (rule,) = read_rule_file(path)
    assert rule.own_names is rule.own_names
    assert rule.torch_context == "ctx_" and rule.own_names["max"] == "max_" and rule.own_names["torch"] == "torch"
