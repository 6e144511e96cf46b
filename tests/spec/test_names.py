"""Name hygiene: a rule's names never collide with the names generated code introduces (rulegen.spec.names)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rulegen.cli import app
from rulegen.spec import names
from rulegen.spec.rules import read_rules, rule_files
from tests.conftest import RULES

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = [RULES, ROOT.parent / "shared" / "examples", ROOT / "tests" / "right_rules"]


def test_ctx_attributes_are_every_public_attribute_of_torchs_function_context():
    from torch.autograd.function import BackwardCFunction

    public = {n for n in dir(BackwardCFunction) if not n.startswith("_")}
    assert public <= names.CTX_ATTRIBUTES


@pytest.mark.parametrize("folder", [*BUNDLED, ROOT / "tests" / "wrong_rules"], ids=lambda p: p.name)
def test_every_rule_and_input_read_from_a_file_knows_where_it_is(folder):
    """Every place an error can name: a model validator that rebuilt the YAML mapping lost it."""
    for rule in read_rules(rule_files([folder])):
        assert rule.loc.file != "<unknown>", rule.name
        for i in rule.inputs:
            assert i.loc.file != "<unknown>", (rule.name, i.name)


def test_show_resolves_rules_of_other_files(project):
    result = CliRunner().invoke(app, ["show", "quartered", "--rules", "rules/quartered.yaml", "-b", "jax"])
    assert result.exit_code == 0, result.output
    assert "from .halved import halved" in result.output


def test_an_attribute_is_not_a_read_of_the_input_it_is_named_like(tmp_path):
    # `.sum_to_size(x.shape)` read `shape` to the regex that found what a body reads:
    # the static `shape`, unused by the backward, was unpacked from ctx all the same.
    from rulegen.render.build import generate_rule

    path = tmp_path / "r.yaml"
    path.write_text(
        "name: scaled_prod\ninputs:\n  x: {shape: [3, 1]}\n  y: {shape: [1, 4]}\n"
        "  shape: {static: true, default: 2.0}\nforward: x * y + shape\n"
    )
    (rule,) = read_rules([path])
    torch_module = generate_rule(rule)["torch/scaled_prod.py"]
    tree = ast.parse(torch_module)
    backward = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "backward")
    assert "sum_to_size(x.shape)" in ast.unparse(backward)
    assert "ctx.shape" not in ast.unparse(backward)
