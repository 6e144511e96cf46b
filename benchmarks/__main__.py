"""Every benchmark, one after the other, each printing its table of ratios.

    python -m benchmarks [--quick]

torch eager (2^22 elements), torch.compile (2^22), JAX under jit (2^20),
bfloat16 and float16 error and speed (2^20), build speed (10, 100 and 1000
rules), the generated package's import time, a transformer-style training
step (benchmarks.model), and the bits of error of `rules/` and FPBench's
hamming-ch3 beside autodiff (64 points per dtype).  `--quick` runs smaller
sizes and fewer rounds (2^18 elements and 5 rounds; 10 and 30 rules; 8
points; one compiled case of the low-precision table) to see that
everything runs.  `generated/` must be
built first (`rulegen build`).  Each benchmark is also its own module (see
README).
"""

from __future__ import annotations

import subprocess
import sys


def runs(quick: bool) -> list[list[str]]:
    """Each benchmark's module and arguments, in the order they run."""
    return [
        ["benchmarks.torch_eager", *(["18", "--quick"] if quick else ["22"])],
        ["benchmarks.torch_compile", *(["18", "--quick"] if quick else ["22"])],
        ["benchmarks.jax_jit", *(["18", "--quick"] if quick else ["20"])],
        ["benchmarks.low_precision", *(["16", "--quick"] if quick else ["20"])],
        ["benchmarks.build_speed", *(["10", "30"] if quick else [])],
        ["benchmarks.import_time", "3" if quick else "7"],
        ["benchmarks.model", *(["--quick"] if quick else [])],
        ["benchmarks.accuracy", *(["--quick"] if quick else [])],
    ]


def main(argv: list[str]) -> int:
    failed = 0
    for module, *args in runs("--quick" in argv):
        print(f"\n$ python -m {module} {' '.join(args)}".rstrip(), flush=True)
        # One process each: torch's and JAX's thread pools do not share the cores.
        failed |= subprocess.run([sys.executable, "-m", module, *args], check=False).returncode
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
