"""Benchmarks for rulegen: `python -m benchmarks.build_speed`."""

from __future__ import annotations

import atexit
import importlib
import shutil
import sys
import tempfile
from pathlib import Path
from types import ModuleType

#: The repository's root: rules/ and generated/ are in it.
ROOT = Path(__file__).resolve().parent.parent


def size_and_quick(argv: list[str], default: int, usage: str) -> tuple[int, bool]:
    """`[log2 of the element count] [--quick]` from `argv`; anything else prints `usage` and exits with status 2."""
    quick = "--quick" in argv  # 5 rounds, to see that it runs
    _, argv = policy_argument(argv)  # `generated` has read it
    sizes = [a for a in argv if a != "--quick"]
    if len(sizes) > 1 or (sizes and not sizes[0].isdigit()):
        print(usage.strip(), file=sys.stderr)
        raise SystemExit(2)
    return (int(sizes[0]) if sizes else default), quick


def policy_argument(argv: list[str]) -> tuple[str | None, list[str]]:
    """`--accuracy POLICY` taken out of `argv`: (the policy or None, the rest); a policy not known exits with 2."""
    from benchmarks.table import option
    from rulegen.derive.stabilise import POLICIES

    rest = list(argv)
    return option(rest, "--accuracy", POLICIES), rest


def bundled(framework: str) -> ModuleType:
    """`generated.<framework>`: the bundled rules as built in generated/ or, where the command line names
    `--accuracy POLICY`, rules/ built under that policy (rules naming their own keep theirs) into a temporary
    folder once per process, imported as `generated` in its place."""
    policy, _ = policy_argument(sys.argv[1:])
    if policy is not None and "generated" not in sys.modules:
        _build_under(policy)
    return importlib.import_module(f"generated.{framework}")


def _build_under(policy: str) -> None:
    from rulegen.render.build import build

    folder = Path(tempfile.mkdtemp(prefix=f"rulegen-{policy}-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    print(f"building rules/ under accuracy: {policy} into {folder}", file=sys.stderr)
    build([ROOT / "rules"], folder / "generated", accuracy=policy)
    sys.path.insert(0, str(folder))


def rule_policies() -> dict[str, str]:
    """Each bundled rule's accuracy policy in the package the benchmark runs (`generated`): its own, or the
    build's (`--accuracy`, else the default)."""
    from rulegen.derive.stabilise.policy import DEFAULT_POLICY
    from rulegen.render.build import with_accuracy
    from rulegen.spec.rules import read_rules, rule_files

    policy, _ = policy_argument(sys.argv[1:])
    found = with_accuracy(read_rules(rule_files([ROOT / "rules"])), policy or DEFAULT_POLICY)
    return {r.name: str(r.accuracy) for r in found}
