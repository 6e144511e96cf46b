"""docs/tutorial.md runs: each section's Python blocks, in order, in a fresh interpreter.

The rules it shows are the rules of `rules/` it names, so neither the code
nor the YAML of the tutorial can drift from what rulegen builds.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import yaml

from tests.conftest import ROOT

TUTORIAL = ROOT / "docs" / "tutorial.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```$", re.S | re.M)


def _sections() -> dict[str, list[tuple[str, str]]]:
    """Each `## ` section's title, with its fenced blocks as (language, text)."""
    parts = re.split(r"^## (.+)$", TUTORIAL.read_text(), flags=re.M)
    return {title: BLOCK.findall(body) for title, body in zip(parts[1::2], parts[2::2], strict=True)}


def _python(title: str) -> str:
    return "\n".join(text for language, text in _sections()[title] if language == "python")


def test_every_section_with_code_is_run():
    with_code = {title for title, blocks in _sections().items() if any(lang == "python" for lang, _ in blocks)}
    assert with_code == {
        "2. PyTorch: an `nn.Module` under `torch.compile`",
        "3. JAX: an Equinox module under `jax.jit`",
    }


@pytest.mark.parametrize(
    "title",
    [
        pytest.param("2. PyTorch: an `nn.Module` under `torch.compile`", marks=pytest.mark.slow, id="torch"),
        pytest.param("3. JAX: an Equinox module under `jax.jit`", marks=pytest.mark.slow, id="jax"),
    ],
)
def test_the_tutorials_training_runs_and_learns(title):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", _python(title)], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr[-4000:]
    first, last = map(float, re.fullmatch(r"loss (\S+) -> (\S+)\n", result.stdout).groups())
    assert last < first


def test_the_rules_it_shows_are_those_of_rules():
    shown = [yaml.safe_load(text) for language, text in _sections()["1. The rules"] if language == "yaml"]
    assert [rule["name"] for rule in shown] == ["gelu", "logsumexp"]
    for rule in shown:
        source = yaml.safe_load((ROOT / "rules" / f"{rule['name']}.yaml").read_text())
        assert rule == {key: source[key] for key in rule}
