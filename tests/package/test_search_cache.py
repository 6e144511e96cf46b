"""The search's choices recorded in a built package's manifest and printed by `rulegen show --why`."""

from __future__ import annotations

from tests.derive.test_search_cache import RULES


def test_the_choices_are_in_the_manifest_and_show_why_prints_them(tmp_path, monkeypatch):
    import json

    from typer.testing import CliRunner

    from rulegen.cli import app
    from rulegen.render.build import build

    monkeypatch.chdir(tmp_path)
    (tmp_path / "rules.yaml").write_text(RULES + "  - {name: plain_sin, inputs: [x], forward: sin(x)}\n")
    build([tmp_path / "rules.yaml"], tmp_path / "pkg")
    (source,) = json.loads((tmp_path / "pkg" / ".rulegen-manifest.json").read_text())["sources"].values()
    tanh = next(c for c in source["stabilised"] if c["rule"] == "cached_tanh")
    assert tanh["quantity"] == "dout/dx" and tanh["derived"] == "1 - tanh(x)**2" and "sigmoid" in tanh["chosen"]
    assert tanh["bits_before"][0] > 2 > tanh["bits_after"][0]
    # The docstring names the quantity, without numbers: a file changes only when a choice does.
    module = (tmp_path / "pkg" / "torch" / "cached_tanh.py").read_text()
    assert "dout/dx" in module and "show cached_tanh --why" in module and "bits" not in module
    from rulegen import cli

    monkeypatch.setattr(cli.out_console, "width", 200)  # a row on one line, whatever the terminal
    result = CliRunner().invoke(app, ["show", "cached_tanh", "rules.yaml", "--why"])
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if "dout/dx" in line)
    assert "1 - tanh(x)**2" in row and "sigmoid" in row and f"{tanh['bits_before'][0]:.1f}" in row
    result = CliRunner().invoke(app, ["show", "plain_sin", "rules.yaml", "--why"])
    assert result.exit_code == 0 and "computed as derived" in result.output, result.output
