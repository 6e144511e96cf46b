"""The planners read what derive/ hands them: they neither re-derive a rule's names nor parse its bodies again.

A rule's spelling of the generator's own names (`Rule.own_names`) is worked out once, in the spec stage; the
symbols of values a planner names (a saved intermediate, its tangent) come from the Derivation.  Before, plan/
called `derive.symbols.own_names` at 22 places, each parsing the rule's snippet bodies again.
"""

from __future__ import annotations

import ast
from pathlib import Path

import rulegen.plan
from rulegen.spec.rules import read_rule_file

PLAN = Path(rulegen.plan.__file__).parent
ROOT = Path(__file__).resolve().parents[2]

#: Where a planner still differentiates: the partials of the intermediates the torch Function saves, the
#: chained outputs' tangents, and two checks that a partial is what it claims.  Each is to move into derive/,
#: where the accuracy search measures it; one more here fails this test, and one fewer asks to be struck off.
DIFFERENTIATES = {
    ("torch.py", "_chained_tangents"),
}


def _modules() -> dict[str, ast.Module]:
    return {path.name: ast.parse(path.read_text()) for path in sorted(PLAN.glob("*.py"))}


def test_no_planner_imports_the_derivation_of_names() -> None:
    imported = {
        (name, node.module)
        for name, tree in _modules().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rulegen.derive.symbols")
    }
    assert not imported, imported


class _Differentiations(ast.NodeVisitor):
    """The innermost function around each `.diff(...)` call of a module."""

    def __init__(self) -> None:
        self.functions: list[str] = []
        self.found: set[str] = set()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.functions.append(node.name)
        self.generic_visit(node)
        self.functions.pop()

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Attribute) and node.func.attr == "diff":
            self.found.add(self.functions[-1] if self.functions else "<module>")
        self.generic_visit(node)


def test_the_planners_differentiate_only_where_listed() -> None:
    found = set()
    for name, tree in _modules().items():
        visitor = _Differentiations()
        visitor.visit(tree)
        found |= {(name, function) for function in visitor.found}
    assert found == DIFFERENTIATES, found


def test_a_rules_spelling_is_worked_out_once(tmp_path: Path) -> None:
    path = tmp_path / "ctx_rule.yaml"
    path.write_text("name: ctx_rule\ninputs: [ctx, x]\nforward:\n  python: return ctx * max(x, 0.0)\n")
    (rule,) = read_rule_file(path)
    assert rule.own_names is rule.own_names
    assert rule.torch_context == "ctx_" and rule.own_names["max"] == "max_" and rule.own_names["torch"] == "torch"
