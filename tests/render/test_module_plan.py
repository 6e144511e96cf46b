"""The render stage takes one ModulePlan per module: its header, imports and definitions, and what it needs."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from rulegen.plan import ModulePlan, plan_modules

RENDER = Path(__file__).resolve().parents[2] / "rulegen" / "render"


def test_the_render_stage_reads_module_plans_and_no_planner_s_own_model():
    # The planners' own models (TorchPlan's fifty fields, JaxPlan's, SnippetPlan's) stay inside plan/: render took
    # them whole, and read their class names and needs off whichever it was handed.
    names = {
        node.id if isinstance(node, ast.Name) else node.attr
        for path in RENDER.glob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Name | ast.Attribute)
    } | {
        alias.name
        for path in RENDER.glob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert not names & {"JaxPlan", "TorchPlan", "SnippetPlan", "plan_jax", "plan_torch"}
    assert "plan_modules" in names
    fields = [f.name for f in dataclasses.fields(ModulePlan)]
    assert fields == ["header", "imports", "definitions", "needs", "function_class"]


def test_a_rule_s_module_plans_name_its_torch_function_and_what_each_imports(tmp_path):
    from rulegen.derive.partials import derive_rule
    from rulegen.spec.rules import read_rules

    (tmp_path / "cube.yaml").write_text("name: cube\ninputs: [x]\nforward: x**3\n")
    (rule,) = read_rules([tmp_path / "cube.yaml"])
    jax_module, torch_module = plan_modules(derive_rule(rule))
    assert (jax_module.function_class, torch_module.function_class) == ("", "Cube")
    assert any(line.startswith("import jax") for line in jax_module.import_lines)
    assert any(line.startswith("import torch") for line in torch_module.import_lines)
    assert jax_module.header.rule == torch_module.header.rule == "cube"
