"""The checks of `rulegen test` catch wrong rules and pass correct ones.

tests/wrong_rules/ holds deliberately wrong rules, each naming in a comment
the check that must catch it ("Caught by <check>"); every bundled rule must
pass on several seeds.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from rulegen.check import CHECKS, CheckFailed, compare, run_checks, summary
from rulegen.cli import app
from rulegen.spec import read_rules, rule_files
from tests.conftest import RULES, SHARED_EXAMPLES

WRONG = Path(__file__).resolve().parent / "wrong_rules"
WRONG_FILES = sorted(WRONG.glob("*.yaml"))


def _expected_catchers(path: Path) -> set[str]:
    found = re.search(r"Caught by ([a-z_0-9]+)", path.read_text())
    assert found, f"{path.name} says in a comment which check catches it"
    return {found.group(1)}


@pytest.fixture(scope="module")
def wrong_outcomes():
    return run_checks(read_rules(WRONG_FILES))


def test_the_wrong_corpus_is_large_enough():
    assert len(WRONG_FILES) >= 20


@pytest.mark.parametrize("path", WRONG_FILES, ids=[p.stem for p in WRONG_FILES])
def test_every_wrong_rule_is_caught_by_the_check_it_names(wrong_outcomes, path):
    name = read_rules([path])[0].name
    failed = {o.check for o in wrong_outcomes if o.rule == name and o.status == "fail"}
    assert failed, f"{name} passed every check"
    assert _expected_catchers(path) <= failed, f"{name} was caught by {failed}"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bundled_rules_pass_on_several_seeds(seed):
    paths = [p for p in rule_files([RULES]) if p.name != "functions.yaml"]
    outcomes = run_checks(read_rules(paths), seed=seed)
    failures = [f"{o.rule}/{o.check}: {o.detail}" for o in outcomes if o.status == "fail"]
    assert not failures, "\n".join(failures)
    assert {o.check for o in outcomes if o.status == "pass"} >= set(CHECKS) - {"compile"}


@pytest.mark.skipif(not SHARED_EXAMPLES.exists(), reason="../shared/examples is not beside this checkout")
def test_every_shared_example_passes():
    outcomes = run_checks(read_rules(sorted(SHARED_EXAMPLES.glob("*.yaml"))), seed=4)
    assert len({o.rule for o in outcomes}) == 8
    failures = [f"{o.rule}/{o.check}: {o.detail}" for o in outcomes if o.status == "fail"]
    assert not failures, "\n".join(failures)


def test_function_rules_pass_every_check():
    outcomes = run_checks(read_rules([RULES / "functions.yaml"]), seed=3)
    failures = [f"{o.rule}/{o.check}: {o.detail}" for o in outcomes if o.status == "fail"]
    assert not failures, "\n".join(failures)


def test_every_outcome_says_why_when_it_does_not_pass(wrong_outcomes):
    for outcome in wrong_outcomes:
        if outcome.status != "pass":
            assert outcome.detail, outcome


def test_compare_reports_where_and_by_how_much():
    with pytest.raises(CheckFailed, match=r"at index \(1,\) expected 2, got 2.5"):
        compare("x", np.array([1.0, 2.5]), np.array([1.0, 2.0]), 1e-7, 1e-9)
    compare("x", np.array([1.0, np.nan]), np.array([1.0, np.nan]), 1e-7, 1e-9)
    with pytest.raises(CheckFailed, match="shape"):
        compare("x", np.zeros(2), np.zeros(3), 1e-7, 1e-9)


def test_rule_can_skip_a_check_with_a_reason(tmp_path):
    path = tmp_path / "skipper.yaml"
    path.write_text(
        "name: skipper\ninputs: [x]\nforward: sin(x)\nchecks:\n  skip:\n    float32: not meant for float32\n"
    )
    outcomes = {o.check: o for o in run_checks(read_rules([path]))}
    assert outcomes["float32"].status == "n/a"
    assert "not meant for float32" in outcomes["float32"].detail
    assert outcomes["jvp_fd"].status == "pass"


def test_true_derivative_false_keeps_cross_backend_and_points(tmp_path):
    path = tmp_path / "scaled.yaml"
    path.write_text(
        "name: scaled\ninputs: [x]\nforward: x\nderivatives:\n  x: 2\n"
        "checks:\n  true_derivative: false\n  points:\n    - at: {x: 1.0}\n      grad: {x: 2.0}\n"
    )
    outcomes = {o.check: o for o in run_checks(read_rules([path]))}
    assert outcomes["jvp_fd"].status == "n/a"
    assert outcomes["cross_backend"].status == "pass"
    assert outcomes["points"].status == "pass"


def test_rulegen_test_cli_exits_1_on_a_wrong_rule_and_prints_json():
    runner = CliRunner()
    result = runner.invoke(app, ["test", str(WRONG / "wrong_sign.yaml"), "--json"])
    assert result.exit_code == 1
    outcomes = json.loads(result.stdout)
    assert {"rule": "wrong_sign", "check": "jvp_fd"}.items() <= next(
        o for o in outcomes if o["check"] == "jvp_fd"
    ).items()
    result = runner.invoke(app, ["test", str(RULES / "log1pexp.yaml")])
    assert result.exit_code == 0, result.output
    assert "1 rules:" in result.output


def test_summary_counts_outcomes(wrong_outcomes):
    text = summary(wrong_outcomes)
    assert f"{len(WRONG_FILES)} rules" in text
