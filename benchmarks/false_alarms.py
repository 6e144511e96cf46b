"""How often `rulegen test` fails a right rule, and how many wrong rules it catches.

    python -m benchmarks.false_alarms [--seeds 20] [--jobs N] [--check NAME ...] [--implementations]

Runs every check on every rule of `rules/`, `tests/right_rules/` and
`../shared/examples/` (rules known to be right) at the random points of seeds 0..N-1: each failure there
is a false alarm, printed with its seed and numbers.  Then runs the wrong
corpus `tests/wrong_rules/` once, at seed 0: a wrong rule is caught when the
check its comment names ("Caught by <check>") fails.  Prints the false-alarm
count and the kill rate (caught / total), and exits 1 if there is a false
alarm or a wrong rule goes uncaught.  `--check` (repeatable) runs only the
checks named, on the right rules and on the wrong rules that name them.

Then the same for hand-written implementations (`rulegen test --against`):
every module of `tests/implementations/` names its rule (`RULE`, a rule of
`../shared/examples/`) and its callables (`AGAINST`); the `right_*` ones are
audited at seeds 0..N-1 (5 at most) with every check, each failure a false
alarm, and each `wrong_*` one at seed 0 with the check its `CAUGHT_BY` names.
`--implementations` runs only this part.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
import time
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from rulegen.check import CheckSession, Outcome
from rulegen.check.registry import Check
from rulegen.check.run import chosen_checks
from rulegen.render.build import available_cores
from rulegen.spec.rules import read_rules, rule_files

ROOT = Path(__file__).resolve().parent.parent
IMPLEMENTATIONS = ROOT / "tests" / "implementations"
EXAMPLES = ROOT.parent / "shared" / "examples"
RIGHT_FOLDERS = (ROOT / "rules", ROOT / "tests" / "right_rules", ROOT.parent / "shared" / "examples")
WRONG_FOLDER = ROOT / "tests" / "wrong_rules"


def false_alarms(folder: Path, seeds: int, jobs: int, checks: Sequence[Check]) -> tuple[int, list[Outcome]]:
    """How many checks ran on the folder's rules over all seeds, and every one that failed."""
    rules = read_rules(rule_files([folder]))
    ran, failed = 0, []
    with CheckSession(rules, jobs=jobs) as session:
        for seed in range(seeds):
            started = time.perf_counter()
            outcomes = session.run(seed=seed, checks=checks)
            ran += sum(o.status != "n/a" for o in outcomes)
            failures = [o for o in outcomes if o.status == "fail"]
            for o in failures:
                print(f"  false alarm: seed {seed}: {o.rule} / {o.check}: {o.detail[:300]}", flush=True)
            failed += failures
            print(
                f"  {folder.name}: seed {seed}: {len(rules)} rules, {len(failures)} false alarm(s), "
                f"{time.perf_counter() - started:.1f} s",
                flush=True,
            )
    return ran, failed


def named_check(path: Path) -> str:
    """The check a wrong rule's comment says must catch it."""
    found = re.search(r"Caught by ([a-z_0-9]+)", path.read_text())
    if found is None:
        sys.exit(f"{path}: no 'Caught by <check>' comment")
    return found.group(1)


def kill_rate(jobs: int, checks: Sequence[Check]) -> tuple[int, int]:
    """How many wrong rules the check they name catches, of how many (those naming one of `checks`)."""
    names = {check.name for check in checks}
    paths = [p for p in sorted(WRONG_FOLDER.glob("*.yaml")) if named_check(p) in names]
    rules = read_rules(paths)
    with CheckSession(rules, jobs=jobs) as session:
        outcomes = session.run(seed=0, checks=checks)
    failed = {(o.rule, o.check) for o in outcomes if o.status == "fail"}
    caught = 0
    for path, rule in zip(paths, rules, strict=True):
        if (rule.name, named_check(path)) in failed:
            caught += 1
        else:
            others = sorted(check for name, check in failed if name == rule.name)
            print(f"  missed: {rule.name} passes {named_check(path)} (failed: {others or 'nothing'})")
    return caught, len(rules)


def implementation_modules(prefix: str) -> list[Any]:
    """The modules of tests/implementations/ whose names start with `prefix`, imported (the folder importable)."""
    if str(IMPLEMENTATIONS) not in sys.path:
        sys.path.insert(0, str(IMPLEMENTATIONS))
    return [importlib.import_module(p.stem) for p in sorted(IMPLEMENTATIONS.glob(f"{prefix}*.py"))]


def audit_module(module: Any, seeds: Sequence[int], only: Collection[str] | None) -> list[Outcome]:
    """Every outcome of auditing one module's implementations against its rule, at each seed."""
    from rulegen.check.against import audit_outcomes, audits, chosen_audit_checks

    examples = read_rules(rule_files([EXAMPLES]))
    rule = next(r for r in examples if r.name == module.RULE)
    targets = {backend: f"{module.__name__}:{attribute}" for backend, attribute in module.AGAINST.items()}
    checks = chosen_audit_checks(only)
    with audits([rule], targets, examples) as audited:
        # A check that loops forever fails after two minutes (its thread is left behind).
        return [o for seed in seeds for o in audit_outcomes(audited[0], seed=seed, checks=checks, timeout=120)]


def implementation_false_alarms(seeds: int, only: Collection[str] | None) -> tuple[int, list[Outcome]]:
    """How many checks applied to the right implementations over all seeds, and every one that failed."""
    ran, failed = 0, []
    for module in implementation_modules("right_"):
        started = time.perf_counter()
        outcomes = audit_module(module, range(seeds), only)
        ran += sum(o.status != "n/a" for o in outcomes)
        failures = [o for o in outcomes if o.status == "fail"]
        for o in failures:
            print(f"  false alarm: {o.rule} / {o.check}: {o.detail[:300]}", flush=True)
        failed += failures
        print(
            f"  {module.__name__}: {seeds} seed(s), {len(failures)} false alarm(s), "
            f"{time.perf_counter() - started:.1f} s",
            flush=True,
        )
    return ran, failed


def implementation_kill_rate(only: Collection[str] | None) -> tuple[int, int]:
    """How many wrong implementations the check they name catches, of how many (those naming one of `only`)."""
    caught = total = 0
    for module in implementation_modules("wrong_"):
        if only is not None and module.CAUGHT_BY not in only:
            continue
        total += 1
        outcomes = audit_module(module, [0], [module.CAUGHT_BY])
        if any(o.status == "fail" for o in outcomes):
            caught += 1
        else:
            found = "; ".join(f"{o.status}: {o.detail[:200]}" for o in outcomes)
            print(f"  missed: {module.__name__} passes {module.CAUGHT_BY} ({found})", flush=True)
    return caught, total


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.false_alarms", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20, help="check right rules at seeds 0..SEEDS-1 (default 20)")
    parser.add_argument("--jobs", type=int, default=available_cores(), help="worker processes (default: the cores)")
    parser.add_argument("--check", action="append", dest="only", help="run only this check (repeatable)")
    parser.add_argument(
        "--implementations", action="store_true", help="only the hand-written implementations of tests/implementations"
    )
    args = parser.parse_args(argv)
    if args.implementations:
        return implementations(args.seeds, args.only)
    try:
        checks = chosen_checks(args.only)
    except ValueError as why:
        parser.error(str(why))

    started = time.perf_counter()
    ran, alarms = 0, []
    for folder in RIGHT_FOLDERS:
        if folder.is_dir():
            folder_ran, folder_alarms = false_alarms(folder, args.seeds, args.jobs, checks)
            ran += folder_ran
            alarms += folder_alarms
    right_seconds = time.perf_counter() - started
    started = time.perf_counter()
    caught, total = kill_rate(args.jobs, checks)
    wrong_seconds = time.perf_counter() - started

    print(f"false alarms: {len(alarms)} of {ran} checks that applied, over {args.seeds} seeds ({right_seconds:.0f} s)")
    print(f"kill rate: {caught}/{total} wrong rules caught by the check they name ({wrong_seconds:.0f} s)")
    failed = implementations(args.seeds, args.only)
    return 1 if alarms or caught < total or failed else 0


def implementations(seeds: int, only: Collection[str] | None) -> int:
    """The hand-written implementations' false alarms (at min(seeds, 5) seeds) and kill rate; 1 if either is off."""
    seeds = min(seeds, 5)
    started = time.perf_counter()
    ran, alarms = implementation_false_alarms(seeds, only)
    right_seconds = time.perf_counter() - started
    started = time.perf_counter()
    caught, total = implementation_kill_rate(only)
    print(
        f"implementations: false alarms: {len(alarms)} of {ran} checks that applied, over {seeds} seeds "
        f"({right_seconds:.0f} s)"
    )
    print(
        f"implementations: kill rate: {caught}/{total} wrong implementations caught by the check they name "
        f"({time.perf_counter() - started:.0f} s)"
    )
    return 1 if alarms or caught < total else 0


if __name__ == "__main__":
    sys.exit(main())
