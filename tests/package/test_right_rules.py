"""Every check on tests/right_rules/: right rules that once broke the generated code, each saying how.

A file of its own: the fast lane hands out whole files (`--dist loadfile`), and this sweep, the
costliest test of the lane, then runs beside tests/package/test_check.py's sweeps instead of after them on
the same worker.
"""

from __future__ import annotations

from pathlib import Path

from rulegen.check import run_checks
from rulegen.spec.rules import read_rules, rule_files

RIGHT = Path(__file__).resolve().parents[1] / "right_rules"


def test_right_rules_that_once_broke_the_generated_code_pass_every_check():
    rules = read_rules(rule_files([RIGHT]))
    outcomes = run_checks(rules, jobs=1)
    failed = [(o.rule, o.check, o.detail[:300]) for o in outcomes if o.status == "fail"]
    assert not failed, failed
    assert {o.rule for o in outcomes} == {r.name for r in rules}
    assert {Path(r.loc.file).name for r in rules} == {p.name for p in RIGHT.glob("*.yaml")}
