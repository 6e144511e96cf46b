"""The shipped package (`rulegen build --package-name`): its version, and framework floors that cover its code.

The floors are read off the APIs the package's modules use (`rulegen.derive.floors`);
these tests read every module of a package built from the bundled rules the
same way and check that its pyproject.toml requires, of each framework, a
release that has all of them.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version
from typer.testing import CliRunner

from rulegen.cli import app
from rulegen.derive.floors import apis_used, floors_of
from tests.conftest import ROOT

SQUARE = "name: sq\ndoc: The square.\ninputs: [x]\nforward: x**2\n"


def test_rulegens_own_jax_extra_covers_the_generated_code():
    # `rulegen test` runs the generated code: rulegen's extra must install a jax that has it.
    from rulegen.render.layout import RUNTIME

    every_helper = set().union(*(apis_used(p.read_text()) for p in RUNTIME.glob("jax/_*.py")))
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["jax"]
    (jax,) = [Requirement(line) for line in extra if line.startswith("jax>")]
    assert Version(next(iter(jax.specifier)).version) >= floors_of(every_helper)["jax"]


def test_apis_are_read_through_imports_and_keywords():
    source = (
        "import torch\nimport jax.numpy as jnp\nfrom jax.extend.core import Primitive\n"
        "@torch.compiler.disable(reason='why')\ndef f(x):\n    return jnp.exp(x).to_tangent_aval(), Primitive\n"
    )
    assert {
        "torch.compiler.disable(reason=)",
        "jax.numpy.exp",
        ".to_tangent_aval",
        "jax.extend.core.Primitive",
    } <= apis_used(source)


def _rules(tmp_path: Path) -> Path:
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "sq.yaml").write_text(SQUARE)
    return tmp_path / "rules"


@pytest.mark.parametrize(
    ("arguments", "table", "message"),
    [
        (["--package-name", "p", "--package-version", "one"], "", "--package-version 'one': not a PEP 440 version"),
        (["--package-name", "p", "--package-version", "1.0-final-x"], "", "not a PEP 440 version"),
        (["--package-name", "p", "--package-version", ""], "", "not a PEP 440 version"),
        (["--package-version", "1.0"], "", "a version needs a distribution"),
        (["--package-name", "p"], 'package-version = "1.x"', "[tool.rulegen] package-version '1.x': not a PEP 440"),
        (["--package-name", "p"], "package-version = 2", "[tool.rulegen] package-version 2: the version must be"),
    ],
)
def test_a_bad_package_version_is_refused_and_nothing_is_written(tmp_path, monkeypatch, arguments, table, message):
    rules = _rules(tmp_path)
    (tmp_path / "pyproject.toml").write_text(f'[tool.rulegen]\nrules = ["rules"]\n{table}\n')
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["build", str(rules), "--out", str(tmp_path / "p"), *arguments])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert "Traceback" not in result.output
    assert not (tmp_path / "p").exists()
