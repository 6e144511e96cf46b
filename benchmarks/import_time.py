"""What importing the generated package costs beyond the framework itself.

    python -m benchmarks.import_time [REPEATS] [--markdown]

Each backend in fresh processes: the framework is imported first, then the
package's subpackage (`generated.jax`, `generated.torch`) is timed alone,
best and median of REPEATS (default 7), in wall-clock and CPU seconds (on a
loaded machine the wall clock runs ahead of the CPU time).  The package
imports a rule's module when the rule is first read: `gelu s` is reading
one rule after the import, `every rule s` reading all of them.  Also says
whether `generated.jax` imported torch once every rule is read (it must
not: the one rule bridged to torch imports it on its first call).

Between the two imports the process runs a full garbage collection, timed
apart (`framework gc s`): the framework's import leaves one due, which the
next few thousand objects any import makes set off (0.07 s of CPU after
`import torch`), whatever that import is.
`generated/` must be built first (`rulegen build`).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

from benchmarks.table import Layout, Table, request

TABLES = ("import_time",)
PROBE = """
import gc, json, sys, time
import {framework}
start = time.perf_counter()
gc.collect()
collection = time.perf_counter() - start
start, cpu = time.perf_counter(), time.process_time()
import generated.{framework} as package
seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
rules = [n for n in package.__all__ if n[0].islower()]
start = time.perf_counter()
package.gelu
gelu = time.perf_counter() - start
start = time.perf_counter()
for name in rules:
    getattr(package, name)
every = time.perf_counter() - start
print(json.dumps({{"seconds": seconds, "cpu": cpu, "collection": collection, "rules": len(rules), "gelu": gelu,
                  "every": every, "torch": "torch" in sys.modules}}))
"""


def measure(framework: str, repeats: int) -> dict[str, float]:
    runs = []
    for _ in range(repeats):
        out = subprocess.run(
            [sys.executable, "-c", PROBE.format(framework=framework)], capture_output=True, text=True, check=True
        ).stdout
        runs.append(json.loads(out.strip().splitlines()[-1]))
    best = min(runs, key=lambda r: r["seconds"])
    medians = {
        f"median {key}": statistics.median(r[key] for r in runs)
        for key in ("seconds", "cpu", "collection", "gelu", "every")
    }
    return {**best, **medians}


def layout(table: str = TABLES[0]) -> Layout:
    return Layout(
        (
            "package",
            "rules",
            "best s",
            "median s",
            "cpu s",
            "gelu s",
            "every rule s",
            "framework gc s",
            "imports torch",
        ),
        ("generated.jax", "generated.torch"),
    )


def main(argv: list[str]) -> int:
    asked = request(argv, TABLES)
    repeats = int(asked.rest[0]) if asked.rest else 7
    table = Table(list(layout().header))
    for framework in ("jax", "torch"):
        r = measure(framework, repeats)
        torch = r["torch"] if framework == "jax" else "(the framework)"
        table.add(
            f"generated.{framework}",
            r["rules"],
            f"{r['seconds']:.3f}",
            f"{r['median seconds']:.3f}",
            f"{r['median cpu']:.3f}",
            f"{r['median gelu']:.3f}",
            f"{r['median every']:.3f}",
            f"{r['median collection']:.3f}",
            torch,
        )
    print(table.markdown() if asked.markdown else table.text())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
