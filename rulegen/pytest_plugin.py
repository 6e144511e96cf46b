"""A pytest plugin: `pytest rules/` runs rulegen's checks, one test item per rule and check.

Rule files are collected from folders named `rules` or `examples`, and from
any YAML file named on the command line.  Each file is built once, the first
time one of its items runs; a failed check fails its item with the numbers,
a check that cannot apply is skipped with its reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

RULE_FOLDERS = {"rules", "examples"}


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix not in (".yaml", ".yml"):
        return None
    if file_path.parent.name in RULE_FOLDERS or parent.session.isinitpath(file_path):
        return RuleFile.from_parent(parent, path=file_path)
    return None


class RuleFile(pytest.File):
    """One rule file: its rules, checked together."""

    _outcomes: dict[tuple[str, str], Any] | None = None

    def collect(self) -> Iterator[pytest.Item]:
        from rulegen.check import CHECKS
        from rulegen.errors import SpecErrors
        from rulegen.spec import read_rule_file

        try:
            rules = read_rule_file(self.path)
        except SpecErrors as exc:
            raise pytest.Collector.CollectError(str(exc)) from None
        self.rules = rules
        for rule in rules:
            for check in CHECKS:
                yield CheckItem.from_parent(self, name=f"{rule.name}::{check}", rule=rule.name, check=check)

    def outcome(self, rule: str, check: str) -> Any:
        if self._outcomes is None:
            from rulegen.check import run_checks
            from rulegen.cli import project_rules
            from rulegen.spec import callees

            seed = int(self.config.getoption("rulegen_seed"))
            include_compile = bool(self.config.getoption("rulegen_compile"))
            # Rules of other files of the project that these call are built (and checked) beside them.
            rules = (*self.rules, *callees(self.rules, project_rules([self.path])))
            found = run_checks(rules, seed=seed, include_compile=include_compile)
            self._outcomes = {(o.rule, o.check): o for o in found}
        return self._outcomes[(rule, check)]


class CheckFailure(Exception):
    pass


class CheckItem(pytest.Item):
    def __init__(self, *, rule: str, check: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rule = rule
        self.check = check

    def runtest(self) -> None:
        assert isinstance(self.parent, RuleFile)
        outcome = self.parent.outcome(self.rule, self.check)
        if outcome.status == "n/a":
            pytest.skip(f"n/a: {outcome.detail}")
        if outcome.status == "fail":
            raise CheckFailure(outcome.detail)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, CheckFailure):
            return f"{self.rule}: check {self.check} failed: {excinfo.value}"
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"{self.rule}::{self.check}"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("rulegen")
    group.addoption("--rulegen-seed", dest="rulegen_seed", default=0, help="seed of rulegen's random check points")
    group.addoption(
        "--rulegen-compile", dest="rulegen_compile", action="store_true", help="also check torch.compile (slow)"
    )
