"""The pytest plugin end to end: rule files collected and checked, other YAML left alone."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import rulegen
from rulegen.check import CHECKS
from tests.check.test_pytest_plugin import SQ, TRIVIAL_TEST, collected, items, run


def test_rule_checks_run_end_to_end(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    # The subprocess imports the rulegen under test (this checkout), not another installed copy.
    monkeypatch.setenv("PYTHONPATH", str(Path(rulegen.__file__).resolve().parent.parent))
    pytester.makeini("[pytest]\n")
    pytester.mkdir("myrules")
    (pytester.path / "myrules" / "two.yaml").write_text(
        "rules:\n"
        "  - name: sq\n    inputs: [x]\n    forward: x**2\n"
        # wrong on purpose: d/dx x**3 is 3 x**2
        "  - name: bad_cube\n    inputs: [x]\n    forward: x**3\n    derivatives:\n      x: x**2\n"
    )
    result = pytester.runpytest_subprocess("-v", "-p", "no:cacheprovider", "myrules")
    status = dict(re.findall(r"^myrules/two\.yaml::(\S+) (PASSED|FAILED|SKIPPED|ERROR)", result.stdout.str(), re.M))
    assert sorted(status) == sorted(f"{rule}::{check}" for rule in ("sq", "bad_cube") for check in CHECKS)
    assert {s for name, s in status.items() if name.startswith("sq::")} <= {"PASSED", "SKIPPED"}
    assert status["sq::forward"] == status["sq::jvp_fd"] == "PASSED"
    assert status["bad_cube::jvp_fd"] == "FAILED"
    result.stdout.fnmatch_lines(["*bad_cube: check jvp_fd failed:*"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_yaml_data_under_a_folder_on_the_command_line_is_not_a_rule(pytester: pytest.Pytester) -> None:
    # A project without the option: `pytest tests` must not read its YAML fixtures as rules.
    pytester.makeini("[pytest]\n")
    (pytester.path / "tests" / "data").mkdir(parents=True)
    (pytester.path / "tests" / "data" / "config.yaml").write_text("model: {layers: 3}\nname: not a rule\n")
    (pytester.path / "tests" / "data" / "sq.yaml").write_text(SQ)
    (pytester.path / "tests" / "test_x.py").write_text(TRIVIAL_TEST)
    result = run(pytester, "--collect-only", "-q", "tests")
    assert result.ret == pytest.ExitCode.OK
    assert sorted(collected(result)) == sorted(["tests/test_x.py::test_x", *items("tests/data/sq.yaml", "sq")])
    named = run(pytester, "--collect-only", "-q", "tests/data/config.yaml")  # named itself: taken as a rule file
    assert named.ret != pytest.ExitCode.OK
