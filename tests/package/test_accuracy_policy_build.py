"""A build under an accuracy policy: the forms it keeps, the manifest, and what a rebuild under another reuses."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from rulegen.cli import app
from rulegen.render.build import build

TANH = """\
name: f_tanh
inputs: [x]
forward: tanh(x)
"""


def _stabilised(out):
    manifest = json.loads((out / ".rulegen-manifest.json").read_text())
    chosen = {c["quantity"]: c["chosen"] for s in manifest["sources"].values() for c in s["stabilised"]}
    return manifest["accuracy"], chosen


def test_each_policy_keeps_its_form_and_the_manifest_says_which(tmp_path):
    (tmp_path / "f_tanh.yaml").write_text(TANH)
    rules, out = [tmp_path / "f_tanh.yaml"], tmp_path / "pkg"
    build(rules, out)
    policy, chosen = _stabilised(out)
    assert policy == "best"
    assert "sigmoid" in chosen["dout/dx"]  # the exact tail
    result = build(rules, out, accuracy="fast")
    assert result.rebuilt  # another policy derives again, though neither the rule nor the compiler changed
    policy, chosen = _stabilised(out)
    assert policy == "fast"
    assert "dout/dx" not in chosen  # autodiff's 1 - tanh(x)**2, reading the saved tanh
    assert "sigmoid" not in (out / "torch" / "f_tanh.py").read_text()
    # The rule's own key wins over the build's.
    (tmp_path / "f_tanh.yaml").write_text(TANH + "accuracy: best\n")
    build(rules, out, accuracy="fast")
    assert "sigmoid" in _stabilised(out)[1]["dout/dx"]


def test_the_command_line_wins_over_the_project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "f_tanh.yaml").write_text(TANH)
    (tmp_path / "pyproject.toml").write_text('[tool.rulegen]\nrules = ["rules"]\naccuracy = "fast"\n')
    result = CliRunner().invoke(app, ["build", "-j", "1"])
    assert result.exit_code == 0, result.output
    assert _stabilised(tmp_path / "generated")[0] == "fast"
    result = CliRunner().invoke(app, ["build", "-j", "1", "--accuracy", "balanced"])
    assert result.exit_code == 0, result.output
    assert _stabilised(tmp_path / "generated")[0] == "balanced"


def test_the_checks_build_under_the_project_s_policy(tmp_path, monkeypatch):
    import inspect

    from rulegen.check.run import CheckSession
    from rulegen.spec.rules import read_rule_file

    (tmp_path / "f_tanh.yaml").write_text(TANH)
    rules = read_rule_file(tmp_path / "f_tanh.yaml")
    for policy, exact_tail in (("fast", False), (None, True)):
        with CheckSession(rules, accuracy=policy) as session:
            _, torch_pkg = session.modules
            source = inspect.getsource(inspect.getmodule(torch_pkg.f_tanh))
            assert ("sigmoid" in source) == exact_tail
