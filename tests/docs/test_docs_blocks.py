"""Every fenced block in README.md and docs/*.md runs, parses as what it claims to be, or says it is illustrative.

- docs/tutorial.md and docs/cookbook.md are run by their own tests (tests/docs/test_tutorial.py,
  tests/docs/test_cookbook.py).
- A YAML block that opens with `# rules/NAME.yaml` is that file (its keys as written there); another with a
  `name` is a rule rulegen reads; any other YAML block parses.  TOML and JSON blocks parse.
- A shell block's `rulegen` lines parse as the command line parses them (subcommand, options, arguments), its
  `python -m` lines name a module of this repository, and the README's two set-up commands are `.ci/run`'s.
- A Python block runs, in a fresh interpreter at the repository's root.
- A `text` block is a listing or printed output: nothing to run.
- `<!-- illustrative -->` on the line before a block exempts it: a fragment that needs names it does not define.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN_ELSEWHERE = {"tutorial.md": "tests/docs/test_tutorial.py", "cookbook.md": "tests/docs/test_cookbook.py"}
ILLUSTRATIVE = "<!-- illustrative -->"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    language: str
    text: str
    illustrative: bool

    @property
    def id(self) -> str:
        return f"{self.path.name}:{self.line}"


def _blocks() -> list[Block]:
    found = []
    for path in DOCS:
        if path.name in RUN_ELSEWHERE:
            continue
        text = path.read_text()
        for match in FENCE.finditer(text):
            before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
            line = text.count("\n", 0, match.start()) + 1
            found.append(Block(path, line, match[1], match[2], before.strip() == ILLUSTRATIVE))
    return found


BLOCKS = _blocks()


def _of(language: str) -> list[Block]:
    return [b for b in BLOCKS if b.language == language and not b.illustrative]


def test_every_block_names_its_language_and_is_of_one_this_test_checks():
    unknown = [f"{b.id}: {b.language or 'no language'}" for b in BLOCKS if b.language not in CHECKED]
    assert not unknown, "a block this test does not check:\n" + "\n".join(unknown)


def test_the_blocks_run_elsewhere_are_run_there():
    for name, test in RUN_ELSEWHERE.items():
        assert (ROOT / "docs" / name).exists() and (ROOT / test).exists(), name


@pytest.mark.parametrize("block", _of("yaml"), ids=lambda b: b.id)
def test_a_yaml_block_is_the_rule_file_it_names_or_a_rule_or_yaml(block, tmp_path):
    from rulegen.spec.rules import read_rules

    data = yaml.safe_load(block.text)
    named = re.match(r"# (rules/\S+\.yaml)", block.text)
    if named:
        whole = yaml.safe_load((ROOT / named[1]).read_text())
        rules = whole.get("rules", [whole])
        rule = next(r for r in rules if r["name"] == data["name"])
        assert {k: rule[k] for k in data} == data, f"{block.id} is not {named[1]}"
    elif isinstance(data, dict) and "name" in data and "inputs" in data:
        (tmp_path / "rule.yaml").write_text(block.text)
        assert [r.name for r in read_rules([tmp_path / "rule.yaml"])] == [data["name"]]


@pytest.mark.parametrize("block", _of("toml") + _of("json"), ids=lambda b: b.id)
def test_a_toml_or_json_block_parses(block):
    if block.language == "toml":
        tomllib.loads(block.text)
    else:
        json.loads(block.text)


def _commands(text: str) -> list[list[str]]:
    """Each command of a shell text (`&&` splits), comments and a redirection's target left out."""
    lines = [re.sub(r"\s+#.*$", "", line).strip() for line in text.splitlines()]
    commands = [shlex.split(part) for line in lines if line and not line.startswith("#") for part in line.split("&&")]
    return [c[: c.index(">")] if ">" in c else c for c in commands if c]


def _parses_as_rulegen_parses(args: list[str]) -> None:
    """`rulegen ARGS` parsed as the command line parses it (an unknown command or option raises), not run."""
    import typer

    from rulegen.cli import app

    group = typer.main.get_command(app)
    context = group.make_context("rulegen", list(args))
    name, command, rest = group.resolve_command(context, [*context._protected_args, *context.args])
    command.make_context(name, rest, parent=context)


def _in_ci(command: list[str]) -> bool:
    """Whether `.ci/run` runs `command` (its words, in a line of its own or inside a step of one)."""
    n = len(command)
    for words in _commands((ROOT / ".ci" / "run").read_text()):
        if any(words[i : i + n] == command for i in range(len(words) - n + 1)):
            return True
    return False


@pytest.mark.parametrize("block", _of("sh"), ids=lambda b: b.id)
def test_a_shell_block_is_made_of_commands_that_exist(block):
    for command in _commands(block.text):
        program, *args = command
        if program == "rulegen":
            _parses_as_rulegen_parses(args)
        elif program == "python" and args[:1] == ["-m"]:
            module = args[1]
            assert importlib.util.find_spec(module) is not None, f"{block.id}: no module {module}"
            source = Path(importlib.util.find_spec(module).origin).read_text()
            for flag in (a for a in args[2:] if a.startswith("--")):
                assert flag in source or flag in _package_source(module), f"{block.id}: {module} has no {flag}"
        elif program == "python":
            assert (ROOT / args[0]).exists(), f"{block.id}: no {args[0]}"
        elif program in {"pip", "ruff", "mypy", "pytest"}:
            assert _in_ci(command), f"{block.id}: {shlex.join(command)} is not in .ci/run"
        else:
            pytest.fail(f"{block.id}: a command this test does not know: {' '.join(command)}")


def _package_source(module: str) -> str:
    """The source of `module`'s package (a benchmark's flags may live in its shared runner)."""
    package = ROOT / module.split(".")[0]
    return "\n".join(p.read_text() for p in package.glob("*.py"))


def test_the_readme_s_test_command_is_what_ci_runs():
    readme = [b for b in BLOCKS if b.path.name == "README.md" and b.language == "sh"]
    assert all(_in_ci(command) for command in _commands(readme[1].text))


@pytest.mark.parametrize("block", _of("python"), ids=lambda b: b.id)
def test_a_python_block_runs(block):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", block.text], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, f"{block.id}:\n{result.stderr[-3000:]}"


CHECKED = {"yaml", "toml", "json", "sh", "python", "text"}
