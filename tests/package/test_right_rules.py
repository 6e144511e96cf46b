"""Every check on tests/right_rules/: right rules that once broke the generated code, each saying how."""

from __future__ import annotations

from pathlib import Path

import pytest

from rulegen.spec.rules import read_rules, rule_files
from tests.conftest import RIGHT, outcomes_of_part

# The costliest sweep of the suite, cut so that both xdist workers share it.
PARTS = 4


def test_every_right_rule_file_is_swept():
    assert {Path(r.loc.file).name for r in read_rules(rule_files([RIGHT]))} == {p.name for p in RIGHT.glob("*.yaml")}


@pytest.mark.costly
@pytest.mark.parametrize("part", range(PARTS))
def test_right_rules_that_once_broke_the_generated_code_pass_every_check(right_package, part):
    rules = read_rules(rule_files([RIGHT]))
    outcomes = outcomes_of_part(rules, part, PARTS, right_package, 0)
    failed = [(o.rule, o.check, o.detail[:300]) for o in outcomes if o.status == "fail"]
    assert not failed, failed
    assert {o.rule for o in outcomes} == {r.name for r in rules[part::PARTS]}
