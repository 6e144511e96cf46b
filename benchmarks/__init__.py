"""Benchmarks for rulegen: `python -m benchmarks.build_speed`."""

from __future__ import annotations

import sys


def size_and_quick(argv: list[str], default: int, usage: str) -> tuple[int, bool]:
    """`[log2 of the element count] [--quick]` from `argv`; anything else prints `usage` and exits with status 2."""
    quick = "--quick" in argv  # 5 rounds, to see that it runs
    sizes = [a for a in argv if a != "--quick"]
    if len(sizes) > 1 or (sizes and not sizes[0].isdigit()):
        print(usage.strip(), file=sys.stderr)
        raise SystemExit(2)
    return (int(sizes[0]) if sizes else default), quick
