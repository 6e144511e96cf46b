"""A rule written by `rulegen new` names its JSON Schema and builds.

`rulegen new` writes a rule whose first line names the JSON Schema of the
format (written beside it), so that an editor with yaml-language-server
completes and checks it as you type; the repository's `.pre-commit-hooks.yaml`
runs `rulegen build --check` before a commit.
"""

from __future__ import annotations

import json
import re

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from rulegen.cli import app
from rulegen.spec.rules import json_schema

MODELINE = re.compile(r"# yaml-language-server: \$schema=(\S+)\n")


def test_a_new_rule_names_the_schema_it_is_checked_with_and_still_builds(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    assert runner.invoke(app, ["new", "my_rule", "--dir", "rules"]).exit_code == 0
    text = (tmp_path / "rules" / "my_rule.yaml").read_text()
    modeline = MODELINE.match(text)
    assert modeline, text.splitlines()[0]
    # yaml-language-server resolves a relative schema path against the rule file's folder.
    schema = json.loads((tmp_path / "rules" / modeline[1]).read_text())
    assert schema == json_schema()
    jsonschema.validate(yaml.safe_load(text), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**yaml.safe_load(text), "fowrard": "x"}, schema)
    result = runner.invoke(app, ["build", "rules", "--out", "pkg"])
    assert result.exit_code == 0, result.output
    assert "1 rules" in result.output
