"""The outcomes as tables, a summary line and JSON."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from rulegen.check.outcome import Outcome
from rulegen.check.registry import REGISTRY, Check


def summary(outcomes: Sequence[Outcome]) -> str:
    counts = {status: sum(o.status == status for o in outcomes) for status in ("pass", "fail", "n/a")}
    rules = len({o.rule for o in outcomes})
    return f"{rules} rules: {counts['pass']} passed, {counts['fail']} failed, {counts['n/a']} n/a"


def report_table(outcomes: Sequence[Outcome], checks: Sequence[Check] = REGISTRY) -> Any:
    from rich.markup import escape
    from rich.table import Table

    names = [check.name for check in checks]
    table = Table(title="rulegen test", show_lines=False)
    table.add_column("rule")
    for name in names:
        table.add_column(name, justify="center")
    by_rule: dict[str, dict[str, Outcome]] = {}
    for o in outcomes:
        by_rule.setdefault(o.rule, {})[o.check] = o
    marks = {"pass": "[green]pass[/green]", "fail": "[bold red]FAIL[/bold red]", "n/a": "[dim]n/a[/dim]"}
    for rule, cells in by_rule.items():
        table.add_row(escape(rule), *(marks[cells[c].status] if c in cells else "" for c in names))
    return table


_MARKS = {"pass": "[green]✓[/green]", "fail": "[bold red]✗[/bold red]", "n/a": "[dim]·[/dim]"}


def compact_table(outcomes: Sequence[Outcome], checks: Sequence[Check] = REGISTRY) -> Any:
    """One row per rule, one mark per check under its two-letter code (see `legend`).

    It fits the console from 3 columns a check and a few for the names up
    (at `COLUMNS=80` and above): the names take the width the checks leave,
    and a name longer than that folds onto the rows below its marks.
    """
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="rulegen test", box=None, pad_edge=False, collapse_padding=True, title_justify="left")
    table.add_column("rule", overflow="fold", min_width=8)
    for check in checks:
        table.add_column(check.code, justify="center", no_wrap=True, min_width=2)
    by_rule: dict[str, dict[str, Outcome]] = {}
    for o in outcomes:
        by_rule.setdefault(o.rule, {})[o.check] = o
    for rule, cells in by_rule.items():
        table.add_row(escape(rule), *(_MARKS[cells[c.name].status] if c.name in cells else "" for c in checks))
    return table


def legend(checks: Sequence[Check] = REGISTRY) -> str:
    """What the compact table's marks and column codes mean."""
    codes = ", ".join(f"{check.code} {check.name}" for check in checks)
    return f"{_MARKS['pass']} pass  {_MARKS['fail']} FAIL  {_MARKS['n/a']} n/a (reasons below); {codes}"


def outcomes_json(outcomes: Sequence[Outcome]) -> str:
    return json.dumps([asdict(o) for o in outcomes], indent=1)
