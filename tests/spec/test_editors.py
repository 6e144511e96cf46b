"""Rule files in editors and in pre-commit.

`rulegen new` writes a rule whose first line names the JSON Schema of the
format (written beside it), so that an editor with yaml-language-server
completes and checks it as you type; the repository's `.pre-commit-hooks.yaml`
runs `rulegen build --check` before a commit.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib

import typer
import yaml
from typer.testing import CliRunner

from rulegen.cli import app
from rulegen.spec.rules import json_schema
from tests.conftest import ROOT


def test_a_second_new_rule_keeps_the_schema_and_an_old_schema_is_refreshed(tmp_path):
    rules = tmp_path / "rules"
    runner = CliRunner()
    assert runner.invoke(app, ["new", "first", "--dir", str(rules)]).exit_code == 0
    (rules / "rulegen.schema.json").write_text("{}\n")  # from an older rulegen
    result = runner.invoke(app, ["new", "second", "--dir", str(rules)])
    assert result.exit_code == 0, result.output
    assert json.loads((rules / "rulegen.schema.json").read_text()) == json_schema()
    assert sorted(p.name for p in rules.iterdir()) == ["first.yaml", "rulegen.schema.json", "second.yaml"]


def test_the_pre_commit_hook_runs_an_existing_command_on_rule_files():
    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == "rulegen-build-check"
    assert hook["language"] == "python" and hook["pass_filenames"] is False
    files = re.compile(hook["files"])
    assert files.search("rules/log1pexp.yaml") and files.search("rules/a.yml")
    assert not files.search("generated/jax/log1pexp.py")
    program, *arguments = shlex.split(hook["entry"])
    # `language: python` installs this repository: the program must be one of its console scripts.
    assert program in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert arguments == ["build", "--check"]
    group = typer.main.get_command(app)
    context = group.make_context(program, list(arguments), resilient_parsing=True)
    command = group.get_command(context, arguments[0])
    assert command is not None, f"rulegen has no command {arguments[0]!r}"
    command.make_context(arguments[0], arguments[1:])  # raises on an option `build` does not take
