"""The generated torch rules that changed since a commit: aten operations and CPU time, eager.

    python -m benchmarks.changed_torch_rules COMMIT [log2 of the element count, default 20] [--no-compile]
                                            [--rounds N] [RULE ...]

COMMIT's generated/torch (read with `git archive`, not checked out) and
this checkout's generated/torch are imported side by side.  For each rule
named (default: every rule whose torch module differs between the two and
whose public function takes float arrays alone) it prints the aten
operations the backward runs in each (a TorchDispatchMode's count, every
gradient wanted) and the median, min and max of the per-round ratios of
this checkout's time to COMMIT's, the two run interleaved (A B A B ...),
each round's time the least of 3 runs, on float32 inputs uniform on
[0.5, 2].  Times are the process's CPU time with torch on one thread: on a
shared machine the wall time of identical code varied 0.2-10x between runs
(load 5-12 on two cores), its CPU time within 5%.  The same for
forward mode (`torch.func.jvp`).  `--no-compile` is the default and the
only mode: torch.compile is `benchmarks.torch_compile`'s.
"""

from __future__ import annotations

import importlib
import inspect
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks import ROOT
from benchmarks.against_commit import PACKAGE, generated_at

USAGE = __doc__.split("\n\n")[1]


def differing(ours: Path, theirs: Path) -> list[str]:
    """The rule modules whose text differs between the two packages."""
    return sorted(
        p.stem
        for p in ours.glob("*.py")
        if not p.stem.startswith("_") and (theirs / p.name).exists() and p.read_text() != (theirs / p.name).read_text()
    )


class _Counted(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def _inputs(f: Callable, n: int) -> list[torch.Tensor] | None:
    """float32 arrays for each parameter of `f`, or None where it takes anything else."""
    params = inspect.signature(f).parameters.values()
    if any("Tensor" not in str(p.annotation) or "tuple" in str(p.annotation) for p in params):
        return None
    generator = torch.Generator().manual_seed(0)
    return [torch.rand(n, generator=generator) * 1.5 + 0.5 for _ in params]


def _outputs(out: object) -> list[torch.Tensor]:
    return [out] if isinstance(out, torch.Tensor) else [o for o in out if isinstance(o, torch.Tensor)]  # type: ignore[attr-defined]


def backward_ops(f: Callable, xs: list[torch.Tensor]) -> int:
    leaves = [x.clone().requires_grad_() for x in xs]
    outs = _outputs(f(*leaves))
    counted = _Counted()
    with counted:
        torch.autograd.backward(outs, [torch.ones_like(o) for o in outs])
    return len(counted.ops)


def fwd_bwd(f: Callable, xs: list[torch.Tensor]) -> float:
    leaves = [x.requires_grad_() for x in xs]
    start = time.process_time()
    outs = _outputs(f(*leaves))
    torch.autograd.backward(outs, [torch.ones_like(o) for o in outs])
    elapsed = time.process_time() - start
    for x in leaves:
        x.grad = None
    return elapsed


def forward_mode(f: Callable, xs: list[torch.Tensor]) -> float:
    tangents = tuple(torch.ones_like(x) for x in xs)
    start = time.process_time()
    torch.func.jvp(f, tuple(x.detach() for x in xs), tangents)
    return time.process_time() - start


#: Runs of each implementation per round, whose least time the round's ratio reads: a shared machine's load
#: lengthens some runs, never shortens one.
RUNS = 3


def ratios(measure: Callable, ours: Callable, theirs: Callable, xs: list[torch.Tensor], rounds: int) -> str:
    """Median [min, max] of the per-round ratios ours / theirs, interleaved, after one warm-up each."""
    measure(ours, xs)
    measure(theirs, xs)
    found = []
    for _ in range(rounds):
        b = min(measure(theirs, xs) for _ in range(RUNS))
        a = min(measure(ours, xs) for _ in range(RUNS))
        found.append(a / b)
    return f"{statistics.median(found):.2f} [{min(found):.2f}, {max(found):.2f}]"


def main(argv: list[str]) -> None:
    rest = [a for a in argv if a != "--no-compile"]
    rounds = 20
    if "--rounds" in rest:
        k = rest.index("--rounds")
        rounds = int(rest[k + 1])
        del rest[k : k + 2]
    if not rest:
        print(USAGE, file=sys.stderr)
        raise SystemExit(2)
    commit, *rest = rest
    log2n = int(rest.pop(0)) if rest and rest[0].isdigit() else 20
    ours = importlib.import_module("generated.torch")
    folder = generated_at(commit) / "torch"
    theirs = importlib.import_module(f"{PACKAGE}.torch")
    names = rest or differing(ROOT / "generated" / "torch", folder)
    torch.set_num_threads(1)
    print(f"{commit} against this checkout, 2**{log2n} float32, {rounds} rounds, CPU time, one thread")
    print(f"{'rule':<14} {'bwd aten ops':>14} {'fwd+bwd ours/theirs':>24} {'jvp ours/theirs':>24}")
    for name in names:
        f_ours = getattr(ours, name, None)
        f_theirs = getattr(theirs, name, None)
        xs = _inputs(f_ours, 2**log2n) if f_ours is not None and f_theirs is not None else None
        if xs is None:
            print(f"{name:<14} (skipped: not float arrays alone)")
            continue
        ops = f"{backward_ops(f_theirs, xs)} -> {backward_ops(f_ours, xs)}"
        timed = ratios(fwd_bwd, f_ours, f_theirs, xs, rounds)
        jvp = ratios(forward_mode, f_ours, f_theirs, xs, rounds)
        print(f"{name:<14} {ops:>14} {timed:>24} {jvp:>24}")


if __name__ == "__main__":
    main(sys.argv[1:])
