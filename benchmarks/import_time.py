"""What importing the generated package costs beyond the framework itself.

    python -m benchmarks.import_time [REPEATS] [--markdown]

Each backend in fresh processes: the framework is imported first, then the
package's subpackage (`generated.jax`, `generated.torch`) is timed alone,
best of REPEATS (default 7).  Also says whether `generated.jax` imported
torch (it must not: the one rule bridged to torch imports it on its first call).
`generated/` must be built first (`rulegen build`).
"""

from __future__ import annotations

import json
import subprocess
import sys

from benchmarks.table import Layout, Table, request

TABLES = ("import_time",)
PROBE = """
import json, sys, time
import {framework}
start = time.perf_counter()
import generated.{framework} as package
seconds = time.perf_counter() - start
rules = [n for n in dir(package) if not n.startswith("_") and n[0].islower()]
print(json.dumps({{"seconds": seconds, "rules": len(rules), "torch": "torch" in sys.modules}}))
"""


def measure(framework: str, repeats: int) -> dict[str, float]:
    runs = []
    for _ in range(repeats):
        out = subprocess.run(
            [sys.executable, "-c", PROBE.format(framework=framework)], capture_output=True, text=True, check=True
        ).stdout
        runs.append(json.loads(out.strip().splitlines()[-1]))
    best = min(runs, key=lambda r: r["seconds"])
    return {**best, "median": sorted(r["seconds"] for r in runs)[len(runs) // 2]}


def layout(table: str = TABLES[0]) -> Layout:
    return Layout(("package", "rules", "best s", "median s", "imports torch"), ("generated.jax", "generated.torch"))


def main(argv: list[str]) -> int:
    asked = request(argv, TABLES)
    repeats = int(asked.rest[0]) if asked.rest else 7
    table = Table(list(layout().header))
    for framework in ("jax", "torch"):
        r = measure(framework, repeats)
        torch = r["torch"] if framework == "jax" else "(the framework)"
        table.add(f"generated.{framework}", r["rules"], f"{r['seconds']:.3f}", f"{r['median']:.3f}", torch)
    print(table.markdown() if asked.markdown else table.text())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
