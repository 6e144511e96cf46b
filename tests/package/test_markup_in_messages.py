"""Messages that quote a rule file or a path are printed as they are, whatever rich's markup they hold."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from rulegen.cli import app


@pytest.mark.parametrize("text", ["[/x]", "[bold]", "[red]a[/blue]"])
def test_rule_text_in_a_message_is_printed_as_it_is(tmp_path: Path, text: str) -> None:
    """Messages quote the rule file; rich's markup in it was read as markup (`[/x]` raised MarkupError)."""
    path = tmp_path / "markup.yaml"
    path.write_text(f'name: "a{text}"\ninputs: [x]\nforward: sin(x)\n')
    result = CliRunner().invoke(app, ["build", str(path), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert f"'a{text}'" in result.output
    assert not (tmp_path / "out").exists()
