"""The planners read what derive/ hands them: they neither re-derive a rule's names nor parse its bodies again.

A rule's spelling of the generator's own names (`Rule.own_names`) is worked out once, in the spec stage; the
symbols of values a planner names (a saved intermediate, its tangent) come from the Derivation, and so does every
derivative a planner prints.  Before, plan/ called `derive.symbols.own_names` at 22 places, each parsing the
rule's snippet bodies again, and differentiated at four.

Nor do they call back into derive/ to rewrite, fuse or measure what they print.  Of the call sites of plan/ into
derive/ that derive, rewrite or measure, there were 22: the fused forms (`saved.with_fused_forms`, 3), silu's
derivative as one (`forms.silu_derivatives`, 1), the partials reading the saved intermediates (`saved.saved_form`,
1), the residuals with outputs written out (`saved.with_outputs`, 1), the backends' printing rewrites
(`forms.float_forms` 2, `float_anchors` 2, `integral_arrays` 2, `corrections` 3, `torch_forms` 1, `jax_forms` 1)
and the eager cost model (`expr.shared_subexpressions` 3, `saved.recompute_cost` 2).  The first four are the
derivation's, computed once where it is completed (`Derivation.fused`, `Derivation.torch`); the printing
rewrites are the planners' own (`rulegen.plan.forms`); the model of how generated code computes an expression,
which derive/ measures by and the planners print by (the subexpressions shared, the eager cost, how a quotient
is divided), is a library below both stages (`rulegen.computation`).  None remain: plan/ imports of derive/ the
derivation's model and the registry, as data.
"""

from __future__ import annotations

import ast
from pathlib import Path

import rulegen.plan
from tests.conftest import rules_from
from tests.sources import parsed

PLAN = Path(rulegen.plan.__file__).parent
ROOT = Path(__file__).resolve().parents[2]


def _modules() -> dict[str, ast.Module]:
    return {path.name: parsed(path) for path in sorted(PLAN.glob("*.py"))}


def _imported_modules(tree: ast.Module) -> set[str]:
    """Every module `tree` imports, in any form: `import a.b`, `from a.b import c` (a.b, and a.b.c, which may be a
    module: `from rulegen.derive import symbols`)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
    return found


def test_no_planner_imports_the_derivation_of_names() -> None:
    imported = {
        (name, module)
        for name, tree in _modules().items()
        for module in _imported_modules(tree)
        if module.startswith("rulegen.derive.symbols")
    }
    assert not imported, imported
    # The test sees each form an import takes.
    forms = ast.parse(
        "import rulegen.derive.symbols\nfrom rulegen.derive import symbols\nfrom rulegen.derive.symbols import x"
    )
    assert _imported_modules(forms) >= {"rulegen.derive.symbols", "rulegen.derive.symbols.x"}


#: What differentiates: sympy's `diff` (a method, or the function), its `Derivative` (evaluated by `doit`) and
#: `idiff`, and derive's own `differentiate`.
_DERIVATIVES = frozenset({"diff", "Derivative", "idiff", "differentiate"})


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
    (rule,) = rules_from(
        tmp_path, "name: ctx_rule\ninputs: [ctx, x]\nforward:\n  python: return ctx * max(x, 0.0)\n", "ctx_rule.yaml"
    )
    assert rule.own_names is rule.own_names
    assert rule.torch_context == "ctx_" and rule.own_names["max"] == "max_" and rule.own_names["torch"] == "torch"


#: What plan/ may import from derive/: the derivation's model as data, the routes, the snippet's parsed code, and
#: the function registry (`functions`, imported as a module or by name: its tables and sympy functions).
DATA = frozenset(
    {
        ("rulegen.derive.partials", "Derivation"),
        ("rulegen.derive.partials", "Partials"),
        ("rulegen.derive.snippet", "SnippetDerivation"),
        ("rulegen.derive.snippet", "Code"),
        ("rulegen.derive.routes", "JaxRoute"),
        ("rulegen.derive.routes", "Source"),
    }
)


def _imports_from_derive() -> set[tuple[str, str, str]]:
    found = set()
    for name, tree in _modules().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found |= {(name, a.name, "") for a in node.names if a.name.startswith("rulegen.derive")}
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rulegen.derive"):
                found |= {(name, node.module, a.name) for a in node.names}
    return found


def _allowed(module: str, name: str) -> bool:
    registry = module == "rulegen.derive.functions" or (module, name) == ("rulegen.derive", "functions")
    return registry or (module, name) in DATA


def test_planners_read_the_derivation_and_the_registry_as_data() -> None:
    """No planner imports from derive/ what derives, rewrites, fuses or measures: the fused forms, torch's, the
    partials reading the saved intermediates are the Derivation's, each backend's printing rewrites plan/'s own,
    and how generated code computes an expression `rulegen.computation`'s, below both stages."""
    found = _imports_from_derive()
    assert found, "no import from derive/ found: the test reads the wrong modules"
    refused = {(plan, module, name) for plan, module, name in found if not _allowed(module, name)}
    assert not refused, sorted(refused)
