"""Cold and no-op build times of N generated rules, through the `rulegen` command as a user runs it.

    python -m benchmarks.build_speed [N ...]      (default: 40)

Prints seconds for the cold build, the no-op rebuild, and the cost per rule.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Forward-only bodies of the kind users write; every derivative is derived.
BODIES = [
    "log(1 + exp(x))",
    "x * (1 + erf(x / sqrt(2))) / 2",
    "x * tanh(softplus(x))",
    "x * sigmoid(x)",
    "sin(x) * exp(-x**2)",
    "atan(x) + x**3 / 3",
    "sqrt(1 + x**2)",
    "cosh(x) * tanh(x)",
    "Piecewise((x**2, x > 0), (sin(x), True))",
    "logaddexp(x, 2 * x)",
]


def write_rules(folder: Path, count: int) -> None:
    for k in range(count):
        body = BODIES[k % len(BODIES)]
        scale = 1 + k // len(BODIES)
        (folder / f"r{k:04d}.yaml").write_text(f"name: r{k:04d}\ninputs: [x]\nforward: {scale} * ({body})\n")


def timed(args: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{' '.join(args)} failed:\n{proc.stdout}{proc.stderr}")
    return elapsed


def main(counts: list[int]) -> None:
    rulegen = [sys.executable, "-m", "rulegen"]
    print(f"{'rules':>6} {'cold s':>8} {'per rule ms':>12} {'no-op s':>8}")
    for count in counts:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            (root / "rules").mkdir()
            write_rules(root / "rules", count)
            cold = timed([*rulegen, "build", "rules", "--out", "pkg"], root)
            noop = statistics.median(timed([*rulegen, "build", "rules", "--out", "pkg"], root) for _ in range(3))
            print(f"{count:>6} {cold:>8.2f} {1000 * cold / count:>12.1f} {noop:>8.3f}")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [40])
