"""How often `rulegen test` fails a right rule, and how many wrong rules it catches.

    python -m benchmarks.false_alarms [--seeds 20] [--jobs N] [--check NAME ...]

Runs every check on every rule of `rules/`, `tests/right_rules/` and
`../shared/examples/` (rules known to be right) at the random points of seeds 0..N-1: each failure there
is a false alarm, printed with its seed and numbers.  Then runs the wrong
corpus `tests/wrong_rules/` once, at seed 0: a wrong rule is caught when the
check its comment names ("Caught by <check>") fails.  Prints the false-alarm
count and the kill rate (caught / total), and exits 1 if there is a false
alarm or a wrong rule goes uncaught.  `--check` (repeatable) runs only the
checks named, on the right rules and on the wrong rules that name them.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from rulegen.check import CheckSession, Outcome
from rulegen.check.registry import Check
from rulegen.check.run import chosen_checks
from rulegen.render.build import available_cores
from rulegen.spec.rules import read_rules, rule_files

ROOT = Path(__file__).resolve().parent.parent
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.false_alarms", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20, help="check right rules at seeds 0..SEEDS-1 (default 20)")
    parser.add_argument("--jobs", type=int, default=available_cores(), help="worker processes (default: the cores)")
    parser.add_argument("--check", action="append", dest="only", help="run only this check (repeatable)")
    args = parser.parse_args(argv)
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
    return 1 if alarms or caught < total else 0


if __name__ == "__main__":
    sys.exit(main())
