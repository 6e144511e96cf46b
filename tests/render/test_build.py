"""Parallel and incremental builds.

`rulegen build --jobs N` derives rules in worker processes: the package and
the errors are the same as a serial build's.  An incremental build keeps
unchanged modules as they are on disk, the package's own modules included,
and redoes whatever a changed rule set touches.
"""

from __future__ import annotations

import contextlib
import time

import pytest
from typer.testing import CliRunner

from rulegen.cli import app
from rulegen.derive.partials import sympy_time_limit
from rulegen.spec.errors import Loc, SpecErrors


def _compute(seconds: float) -> None:
    """Keeps the CPU busy for `seconds` of CPU time: the limit counts CPU time, which sleeping does not spend."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_a_timeout_swallowed_where_it_lands_fires_again():
    # As in a garbage-collector callback, whose exceptions Python ignores.
    with (
        pytest.raises(SpecErrors, match=r"slow\.yaml:3:10: sympy needs more than 0\.05 s"),
        sympy_time_limit(0.05, Loc("slow.yaml", 3, 10)),
    ):
        with contextlib.suppress(BaseException):
            _compute(5)
        _compute(5)


def test_a_timeout_that_c_code_reports_as_another_error_is_still_the_timeout():
    # `ast.parse` interrupted by the alarm fails with SystemError.
    with (
        pytest.raises(SpecErrors, match=r"slow\.yaml:3:10: sympy needs more than 0\.05 s"),
        sympy_time_limit(0.05, Loc("slow.yaml", 3, 10)),
    ):
        try:
            _compute(5)
        except BaseException as exc:
            raise SystemError("error return without exception set") from exc


def test_an_error_within_the_time_limit_is_not_a_timeout():
    with pytest.raises(ValueError, match="not a timeout"), sympy_time_limit(5, Loc("slow.yaml", 3, 10)):
        raise ValueError("not a timeout")


def test_an_output_that_names_a_file_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "r.yaml").write_text("name: good\ninputs: [x]\nforward: x\n")
    (tmp_path / "afile").write_text("mine")
    for extra in ([], ["--check"]):
        result = CliRunner().invoke(app, ["build", "r.yaml", "--out", "afile", *extra], catch_exceptions=False)
        assert result.exit_code == 2, result.output
        assert "afile:1:1: error: the output names a file" in result.output
    assert (tmp_path / "afile").read_text() == "mine"


@pytest.mark.parametrize("command", [["build"], ["test"], ["show", "anything"]])
def test_no_rules_given_outside_a_project_says_what_to_do(tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)  # no pyproject.toml from here up (tmp_path is outside the project), no rules/
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 2, result.output
    assert "cannot read" not in result.output
    assert "no rule files given" in result.output and "rulegen new NAME" in result.output
    assert not list(tmp_path.iterdir())
