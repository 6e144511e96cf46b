"""A pytest plugin: `pytest myrules/` runs rulegen's checks, one test item per rule and check.

Installing rulegen registers this plugin in every project, so it collects
YAML files (`.yaml`, `.yml`) as rule files only where asked to:

- a YAML file named on the command line (`pytest rules/gelu.yaml`), or given
  as an initial path some other way (a YAML file in `testpaths`);
- the YAML files under a folder named on the command line, whatever its
  name (`pytest myrules`, recursively), that have a rule file's top-level
  key (`forward:` or `rules:`), so that YAML data kept with a project's
  tests is left alone;
- the YAML files under the folders (or the files) of the `rulegen_rules` ini
  option (type "paths": relative to the ini file, wherever pytest runs).
  Plain `pytest` run in the rootdir collects them beside the `testpaths`,
  even when they lie outside them; `pytest tests/` collects only what it
  names.

Nothing else: a project that does not set `rulegen_rules` and runs plain
`pytest` gets no rule items, whatever its folders are called.

Each file is built once, the first time one of its items runs; a failed
check fails its item with the numbers, a check that cannot apply is skipped
with its reason.

A test marked `rulegen_against` audits implementations a project already
has against a rule file, after the test's own body:

    @pytest.mark.rulegen_against("rules/log1pexp.yaml", jax="mylib.ops:log1pexp", torch="mylib.ops:log1pexp_torch")
    def test_log1pexp(): ...

The rule file's path is relative to the test file's folder; `seed=` and
`checks=` (a list of check names) are optional.  Every failed check fails
the test, with its numbers.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from _pytest._code.code import TerminalRepr

RULES_INI = "rulegen_rules"


def _ini_rule_paths(config: pytest.Config) -> list[Path]:
    """The `rulegen_rules` paths, absolute and normalized like pytest's own paths."""
    return [Path(os.path.abspath(p)) for p in config.getini(RULES_INI)]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "rulegen_against(rule_file, jax=MODULE:ATTR, torch=MODULE:ATTR, seed=0, checks=None): audit your own "
        "implementations against a rulegen rule file",
    )
    paths = _ini_rule_paths(config)
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise pytest.UsageError(f"{RULES_INI}: no such file or folder: {', '.join(missing)}")
    # Plain `pytest` in the rootdir: the project's rule folders join the testpaths
    # (or the rootdir) as initial paths, unless one of those holds them already.
    plain = config.args_source == pytest.Config.ArgsSource.TESTPATHS or (
        config.args_source == pytest.Config.ArgsSource.INVOCATION_DIR
        and config.invocation_params.dir == config.rootpath
    )
    if not plain or config.option.pyargs:
        return
    initial = [Path(os.path.abspath(config.invocation_params.dir / arg)) for arg in config.args]
    for path in paths:
        if not any(path == i or i in path.parents for i in initial):
            config.args.append(str(path))


def pytest_runtest_call(item: pytest.Item) -> None:
    """A test marked `rulegen_against`: its implementations audited against the rule file, after its body."""
    marker = item.get_closest_marker("rulegen_against")
    if marker is None:
        return
    from rulegen.check.against import BACKENDS, AgainstError, audit_file, chosen_audit_checks

    if len(marker.args) != 1:
        raise pytest.UsageError("rulegen_against takes one rule file: rulegen_against(path, jax=..., torch=...)")
    targets = {backend: marker.kwargs[backend] for backend in BACKENDS if marker.kwargs.get(backend)}
    path = Path(item.path).parent / marker.args[0]
    try:
        checks = chosen_audit_checks(marker.kwargs.get("checks"))
        if not targets:
            raise AgainstError("rulegen_against: give jax=MODULE:ATTR, torch=MODULE:ATTR or both")
        outcomes = audit_file(path, targets, seed=int(marker.kwargs.get("seed", 0)), checks=checks)
    except (ValueError, AgainstError) as exc:
        raise CheckFailure(str(exc)) from None
    failed = [o for o in outcomes if o.status == "fail"]
    if failed:
        raise CheckFailure("\n".join(f"{o.rule}: check {o.check} failed: {o.detail}" for o in failed))


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix in (".yaml", ".yml") and _is_rule_file(file_path, parent.session):
        return RuleFile.from_parent(parent, path=file_path)
    return None


def _is_rule_file(file_path: Path, session: pytest.Session) -> bool:
    if session.isinitpath(file_path):
        return True
    if any(p == file_path or p in file_path.parents for p in _ini_rule_paths(session.config)):
        return True
    # Under a folder named on the command line (not one that pytest chose: testpaths, the rootdir),
    # and a rule file by its top-level keys: YAML data kept beside a project's tests is no rule.
    return (
        session.config.args_source == pytest.Config.ArgsSource.ARGS
        and any(session.isinitpath(folder) for folder in file_path.parents)
        and looks_like_rules(file_path)
    )


_RULE_KEY = re.compile(r"^(?:forward|rules)[ \t]*:", re.MULTILINE)


def looks_like_rules(path: Path) -> bool:
    """Whether a YAML file has a rule file's top-level key (`forward:` of a rule, or `rules:`)."""
    try:
        with path.open("rb") as handle:
            head = handle.read(1 << 16).decode("utf-8", errors="replace")
    except OSError:
        return False
    return _RULE_KEY.search(head) is not None


class RuleFile(pytest.File):
    """One rule file: its rules, checked together."""

    _outcomes: dict[tuple[str, str], Any] | None = None

    def collect(self) -> Iterator[pytest.Item]:
        from rulegen.check import CHECKS
        from rulegen.spec.errors import SpecErrors
        from rulegen.spec.rules import read_rule_file

        try:
            rules = read_rule_file(self.path)
        except SpecErrors as exc:
            raise pytest.Collector.CollectError(str(exc)) from None
        self.rules = rules
        # The declared audits' outcomes by rule and check, or why they could not run.
        self._audits: dict[str, dict[str, Any] | str] = {}
        for rule in rules:
            for check in CHECKS:
                yield CheckItem.from_parent(self, name=f"{rule.name}::{check}", rule=rule.name, check=check)
        # Implementations a rule declares (`checks.against`), audited against it check by check.
        for rule in rules:
            if rule.checks.against:
                from rulegen.check.against import AUDIT_CHECKS

                for audit_check in AUDIT_CHECKS:
                    yield CheckItem.from_parent(
                        self,
                        name=f"{rule.name}::against::{audit_check.name}",
                        rule=rule.name,
                        check=audit_check.name,
                        audit=True,
                    )

    def audit_outcome(self, rule: str, check: str) -> Any:
        """The outcome of `check` on the implementations `rule` declares; CheckFailure where one does not import."""
        if rule not in self._audits:
            from rulegen.check.against import AgainstError, chosen_audit_checks, declared_audit_outcomes
            from rulegen.cli import project_rules

            (declaring,) = (r for r in self.rules if r.name == rule)
            seed = int(self.config.getoption("rulegen_seed"))
            include_compile = bool(self.config.getoption("rulegen_compile"))
            # The checks of this rule's audit items the session runs (`-k` may select a few).
            selected = {
                i.check
                for i in self.session.items
                if isinstance(i, CheckItem) and i.parent is self and i.audit and i.rule == rule
            }
            try:
                found = declared_audit_outcomes(
                    [declaring],
                    project_rules([self.path]),
                    seed=seed,
                    include_compile=include_compile,
                    checks=chosen_audit_checks(selected),
                )
            except AgainstError as exc:
                self._audits[rule] = str(exc)
            else:
                self._audits[rule] = {o.check: o for o in found}
        audited = self._audits[rule]
        if isinstance(audited, str):
            raise CheckFailure(audited)
        return audited[check]

    def outcome(self, rule: str, check: str) -> Any:
        if self._outcomes is None:
            from rulegen.check import run_checks
            from rulegen.cli import project_rules
            from rulegen.spec.rules import callees

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
    def __init__(self, *, rule: str, check: str, audit: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rule = rule
        self.check = check
        self.audit = audit

    def runtest(self) -> None:
        assert isinstance(self.parent, RuleFile)
        if self.audit:
            outcome = self.parent.audit_outcome(self.rule, self.check)
        else:
            outcome = self.parent.outcome(self.rule, self.check)
        if outcome.status == "n/a":
            pytest.skip(f"n/a: {outcome.detail}")
        if outcome.status == "fail":
            raise CheckFailure(outcome.detail)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str | TerminalRepr:
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
    parser.addini(
        RULES_INI,
        type="paths",
        default=[],
        help="rulegen: the project's rule folders (or files), relative to the ini file; "
        "their YAML files are collected as rules, and plain `pytest` in the rootdir runs them",
    )
