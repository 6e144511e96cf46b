"""Generated torch rules against the composite, both under `torch.compile`, forward + backward.

    python -m benchmarks.torch_compile [log2 of the element count, default 22] [--quick: 5 rounds] [--markdown]

float32 on the CPU, the 8 elementwise cases of `benchmarks.torch_eager`. Each
side is one `torch.compile(dynamic=False)` of a step that calls the function
and then `torch.autograd.grad` with a fixed random cotangent: dynamo compiles
the forward into one graph, AOTAutograd derives the backward graph from it
(through the generated Function's own `backward`, or autodiff of the
composite's plain torch ops), inductor compiles both, and the step breaks the
graph at `autograd.grad` (dynamo's default `trace_autograd_ops=False`), which
then runs the compiled backward; the two sides are alike in that. Every
step is compiled and warmed up before any timing; before timing, the
compiled generated function's value and gradients must match the eager
one's (and the compiled composite's its eager self). The two steps then run
interleaved (A B A B ...); "gen/composite" is the median of the per-round
ratios, with their min and max; then each side's median time, and how many
graphs dynamo made of each step (`torch._dynamo.explain`; 1 where the
function compiles whole). `--markdown` prints docs/performance.md's table.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

import torch
import torch._dynamo

from benchmarks import size_and_quick
from benchmarks.table import Layout, Table, quiet_if, request
from benchmarks.torch_eager import CASES, _ratio_cell


def step_of(f: Callable) -> Callable:
    """Forward + backward: the value and the gradient of every input."""

    def step(*args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        *xs, g = args
        out = f(*xs)
        return (out.detach(), *torch.autograd.grad(out, xs, g))

    return step


def graphs(f: Callable, args: list[torch.Tensor]) -> int:
    """How many graphs dynamo makes of the step up to `autograd.grad` (1: the function has no graph break)."""
    count = torch._dynamo.explain(step_of(f))(*args).graph_count
    torch._dynamo.reset()
    return count


def timed(step: Callable, args: list[torch.Tensor]) -> float:
    start = time.perf_counter()
    step(*args)
    return time.perf_counter() - start


TABLES = ("torch_compile",)
COLUMNS = ("gen/composite [min, max]", "gen ms", "composite ms", "graphs gen/composite")


def layout(table: str = TABLES[0], log2n: int = 22) -> Layout:
    return Layout((f"torch.compile, fwd+bwd, 2^{log2n} float32", *COLUMNS), tuple(case[0] for case in CASES))


def main(log2n: int, quick: bool = False) -> Table:
    """Prints the table as it measures, and returns it as docs/performance.md lays it out."""
    table = Table(list(layout(log2n=log2n).header))
    n = 1 << log2n
    rounds = 5 if quick else 40
    print(f"torch.compile, float32, {n} elements, forward+backward, {rounds} interleaved rounds")
    print(f"{'case':<22} {'gen/composite':>22} {'gen ms':>8} {'composite ms':>12} {'graphs gen/composite':>21}")
    for name, arity, generated, composite, _hand, _fused in CASES:
        # Each case compiles afresh: both steps share one code object, whose cache
        # holds few entries (cache_size_limit) before dynamo falls back to eager.
        torch._dynamo.reset()
        rng = torch.Generator().manual_seed(0)
        xs = [torch.randn(n, generator=rng).requires_grad_() for _ in range(arity)]
        g = torch.randn(n, generator=rng)
        n_graphs = "/".join(str(graphs(f, [*xs, g])) for f in (generated, composite))
        steps = [torch.compile(step_of(f), dynamic=False) for f in (generated, composite)]
        for step, f, side in zip(steps, (generated, composite), ("generated", "composite"), strict=True):
            got = step(*xs, g)  # compiles here
            want = step_of(f)(*xs, g)  # eager
            for a, b, what in zip(got, want, ["value"] + [f"gradient {i}" for i in range(arity)], strict=True):
                label = f"{name}, {side} {what}, compiled against eager"
                torch.testing.assert_close(a, b, msg=lambda m, label=label: f"{label}: {m}")
            for _ in range(2):
                step(*xs, g)
        times: list[list[float]] = [[] for _ in steps]
        for _ in range(rounds):
            for k, step in enumerate(steps):
                times[k].append(timed(step, [*xs, g]))
        ms = [f"{statistics.median(t) * 1e3:.2f}" for t in times]
        print(f"{name:<22} {_ratio_cell(times[0], times[1]):>22} {ms[0]:>8} {ms[1]:>12} {n_graphs:>21}")
        table.add(name, _ratio_cell(times[0], times[1]), *ms, n_graphs)
    return table


if __name__ == "__main__":
    asked = request(sys.argv[1:], TABLES)
    size, quick = size_and_quick(asked.rest, 22, __doc__ or "")
    with quiet_if(asked.markdown):
        measured = main(size, quick=quick)
    if asked.markdown:
        print(measured.markdown())
