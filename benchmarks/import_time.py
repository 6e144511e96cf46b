"""What importing the generated package costs beyond the framework itself.

    python -m benchmarks.import_time [REPEATS]

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


def main(argv: list[str]) -> int:
    repeats = int(argv[0]) if argv else 7
    print(f"{'package':<18}{'rules':>6}{'best s':>9}{'median s':>10}  imports torch")
    for framework in ("jax", "torch"):
        r = measure(framework, repeats)
        torch = r["torch"] if framework == "jax" else "(the framework)"
        print(f"generated.{framework:<8}{r['rules']:>6}{r['seconds']:>9.3f}{r['median']:>10.3f}  {torch}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
