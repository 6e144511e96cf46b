"""The `accuracy:` key of a rule, `[tool.rulegen] accuracy` and `--accuracy`: read, refused where bad, precedence."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from rulegen.cli import app, build_accuracy, load_config
from rulegen.render.build import with_accuracy
from rulegen.spec.errors import SpecErrors
from rulegen.spec.rules import read_rule_file
from tests.conftest import rules_from

RULE = """\
name: softer
inputs: [x]
forward: log(1 + exp(x))
accuracy: {policy}
"""


def test_the_key_reads_each_policy_and_defaults_to_none(tmp_path):
    for policy in ("best", "balanced", "fast"):
        path = tmp_path / f"{policy}.yaml"
        path.write_text(RULE.format(policy=policy))
        (rule,) = read_rule_file(path)
        assert rule.accuracy == policy
    (rule,) = rules_from(tmp_path, RULE.replace("accuracy: {policy}\n", ""), "none.yaml")
    assert rule.accuracy is None


def test_a_bad_policy_is_refused_at_its_place(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(RULE.format(policy="quick"))
    with pytest.raises(SpecErrors) as caught:
        read_rule_file(path)
    (error,) = caught.value.errors
    assert str(error.loc).endswith("bad.yaml:4:11")
    assert "balanced" in error.message
    result = CliRunner().invoke(app, ["show", "softer", "--why", "--rules", str(path)])
    assert result.exit_code == 2
    assert "bad.yaml:4:11" in result.output


def test_the_rule_s_policy_wins_over_the_build_s(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text(RULE.format(policy="best"))
    (rule,) = with_accuracy(read_rule_file(path), "fast")
    assert rule.accuracy == "best"
    path.write_text(RULE.replace("accuracy: {policy}\n", ""))
    (rule,) = with_accuracy(read_rule_file(path), "fast")
    assert rule.accuracy == "fast"
    (rule,) = with_accuracy(read_rule_file(path), None)
    assert rule.accuracy is None


def test_the_project_s_policy_is_read_and_a_bad_one_exits_2(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "softer.yaml").write_text(RULE.replace("accuracy: {policy}\n", ""))
    (tmp_path / "pyproject.toml").write_text('[tool.rulegen]\nrules = ["rules"]\naccuracy = "balanced"\n')
    assert build_accuracy(load_config()) == "balanced"
    result = CliRunner().invoke(app, ["show", "softer", "--why"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "accuracy: balanced" in result.output
    (tmp_path / "pyproject.toml").write_text('[tool.rulegen]\nrules = ["rules"]\naccuracy = "fastest"\n')
    result = CliRunner().invoke(app, ["show", "softer", "--why"], env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert "fastest" in result.output
    result = CliRunner().invoke(app, ["build", "--accuracy", "fastest"])
    assert result.exit_code == 2


def test_the_schema_offers_the_policies():
    result = CliRunner().invoke(app, ["schema"])
    schema = json.loads(result.output)
    text = json.dumps(schema)
    assert '"accuracy"' in text
    assert all(f'"{p}"' in text for p in ("best", "balanced", "fast"))
