"""`.ci/run` runs the README's test command, step by step."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_ci_steps_are_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    (command,) = [line for line in readme.splitlines() if line.startswith("pip install") and "pytest" in line]
    steps = []
    for line in (ROOT / ".ci" / "run").read_text().splitlines():
        if line.startswith("step "):
            words = shlex.split(line)
            steps.append(words[2:])
    assert steps == [shlex.split(part) for part in re.split(r" && ", command)]
