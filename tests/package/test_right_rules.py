"""Every check on tests/right_rules/: right rules that once broke the generated code, each saying how."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rulegen.spec.rules import read_rules, rule_files
from tests.conftest import outcomes_of_part

RIGHT = Path(__file__).resolve().parents[1] / "right_rules"
# The costliest sweep of the suite, cut so that both xdist workers share it.
PARTS = 4


@pytest.fixture(scope="session")
def right_package(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """tests/right_rules/ built once per worker, importable as `rg_right`."""
    from rulegen.render.build import build

    root = tmp_path_factory.mktemp("right")
    build(rule_files([RIGHT]), root / "rg_right")
    sys.path.insert(0, str(root))
    try:
        yield "rg_right"
    finally:
        sys.path.remove(str(root))


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
