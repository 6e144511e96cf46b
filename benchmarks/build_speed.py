"""Cold and no-op build times of N generated rules, through the `rulegen` command as a user runs it.

    python -m benchmarks.build_speed [N ...] [--jobs J] [--cold-runs R] [--markdown]    (default: 10 100 1000)

For each N: the cold build (into an empty folder; the median of R runs), the
no-op rebuild (the median of 3) and the cold cost per rule.  Then the
marginal cost per rule between successive N and the least-squares line
cold = fixed + slope * N: a flat cost per rule shows as marginal costs that
match the slope, whatever N.  `--jobs` is passed to `rulegen build`; without
it, rulegen's default (the available cores) applies. `--markdown` measures each N with `--jobs 1` and
with the default, and prints docs/performance.md's table.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.table import Layout, Table, quiet_if, request

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

NOOP_RUNS = 3
COUNTS = (10, 100, 1000)
TABLES = ("build_speed",)


def layout(table: str = TABLES[0], counts: tuple[int, ...] = COUNTS) -> Layout:
    labels = [str(n) for n in counts] + [f"cost per rule, {counts[-2]} -> {counts[-1]}"]
    return Layout(("rules", "cold, `--jobs 1`", "cold, default", "no-op"), tuple(labels))


def markdown_table(counts: list[int], cold_runs: int) -> Table:
    """Each count's cold build with one worker and with the default, its no-op rebuild, the marginal cost."""
    table = Table(list(layout(counts=tuple(counts)).header))
    colds: dict[int | None, list[float]] = {1: [], None: []}
    for count in counts:
        noop = 0.0
        for jobs in colds:
            cold, noop = measure(count, jobs, cold_runs)
            colds[jobs].append(cold)
            print(f"{count} rules, --jobs {jobs}: cold {cold:.2f} s, no-op {noop:.2f} s", file=sys.stderr)
        table.add(str(count), f"{colds[1][-1]:.1f} s", f"{colds[None][-1]:.1f} s", f"{noop:.1f} s")
    step = counts[-1] - counts[-2]
    marginal = [f"{1000 * (c[-1] - c[-2]) / step:.0f} ms" for c in colds.values()]
    table.add(layout(counts=tuple(counts)).labels[-1], *marginal, "")
    return table


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


def least_squares(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """(intercept, slope) of the line through (xs, ys) with the least squared error."""
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sum((x - mean_x) ** 2 for x in xs)
    return mean_y - slope * mean_x, slope


def measure(count: int, jobs: int | None, cold_runs: int) -> tuple[float, float]:
    """(cold seconds, no-op seconds) of `rulegen build` of `count` generated rules."""
    command = [sys.executable, "-m", "rulegen", "build", "rules", "--out", "pkg"]
    if jobs is not None:
        command += ["--jobs", str(jobs)]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "rules").mkdir()
        write_rules(root / "rules", count)
        colds = []
        for _ in range(cold_runs):
            shutil.rmtree(root / "pkg", ignore_errors=True)
            colds.append(timed(command, root))
        noop = statistics.median(timed(command, root) for _ in range(NOOP_RUNS))
    return statistics.median(colds), noop


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("counts", nargs="*", type=int, default=list(COUNTS), help="numbers of rules")
    parser.add_argument("--jobs", "-j", type=int, help="passed to `rulegen build --jobs`")
    parser.add_argument("--cold-runs", type=int, default=1, help="cold builds per count (the median is shown)")
    asked = request(sys.argv[1:] if argv is None else argv, TABLES)
    args = parser.parse_args(asked.rest)
    counts = sorted(set(args.counts))
    if asked.markdown:
        with quiet_if(True):
            table = markdown_table(counts, args.cold_runs)
        print(table.markdown())
        return
    jobs = "rulegen's default" if args.jobs is None else args.jobs
    print(f"rulegen build, --jobs {jobs}; no-op: median of {NOOP_RUNS}")
    print(f"{'rules':>6} {'cold s':>8} {'per rule ms':>12} {'no-op s':>8}")
    colds = []
    for count in counts:
        cold, noop = measure(count, args.jobs, args.cold_runs)
        colds.append(cold)
        print(f"{count:>6} {cold:>8.2f} {1000 * cold / count:>12.1f} {noop:>8.3f}", flush=True)
    for k in range(1, len(counts)):
        marginal = (colds[k] - colds[k - 1]) / (counts[k] - counts[k - 1])
        print(f"marginal cost {counts[k - 1]}->{counts[k]} rules: {1000 * marginal:.1f} ms per rule")
    if len(counts) > 1:
        fixed, slope = least_squares([float(n) for n in counts], colds)
        print(f"least squares: cold = {fixed:.2f} s + {1000 * slope:.1f} ms x rules")


if __name__ == "__main__":
    main()
