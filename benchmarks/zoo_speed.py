"""The forward-only rules of benchmarks/zoo/ under an accuracy policy, timed against autodiff of the forward.

    python -m benchmarks.zoo_speed [log2 of the element count, default 20] [--quick: 5 rounds]
                                   [--accuracy best|balanced|fast (default fast)] [--markdown] [--only NAME]

Forty activations, losses, log-densities and compositions of special
functions (benchmarks/zoo/zoo.yaml), built under the policy into a temporary
folder. Each is timed against the framework's autodiff of its forward as
written (`rulegen.check.accuracy.array_function`: the frameworks' own
functions, nothing custom), float32 on the CPU, in four ways: eager torch
forward + backward (a cotangent of ones), `torch.func.jvp`, JAX under `jit`
value and gradient of the sum of squares, and `jax.jvp` under `jit` (a
tangent of ones for every input). Generated and autodiff run interleaved
(A B A B ...), three times a round, each keeping its least time of the
round; each cell is the median of the per-round ratios generated / autodiff
with their min and max, so that a loaded machine moves both alike.
The inputs are drawn uniformly over each input's `domain`. The load average
is printed before and after. `--markdown` prints the medians as
docs/performance.md's table; `--only NAME` times one rule.
"""

from __future__ import annotations

import importlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from benchmarks import policy_argument, size_and_quick
from benchmarks.table import Layout, Table, quiet_if, request

ZOO = Path(__file__).resolve().parent / "zoo" / "zoo.yaml"
TABLES = ("zoo_speed",)
COLUMNS = ("eager fwd+bwd", "torch jvp", "jit grad", "jit jvp")
#: The policy the zoo is built under where the command line names none.
POLICY = "fast"


def names() -> tuple[str, ...]:
    """The zoo's rules, in its file's order (read without deriving anything)."""
    return tuple(r["name"] for r in yaml.safe_load(ZOO.read_text())["rules"])


def layout(table: str = TABLES[0]) -> Layout:
    return Layout(("generated / autodiff of the written forward", *COLUMNS), names())


def _ratio_cell(times: list[float], base: list[float]) -> str:
    ratios = [a / b for a, b in zip(times, base, strict=True)]
    return f"{statistics.median(ratios):.2f} [{min(ratios):.2f}, {max(ratios):.2f}]"


def _interleaved(impls: list[Callable[[], Any]], rounds: int, tries: int = 3) -> list[list[float]]:
    """Each of `impls` timed in `rounds` rounds, after two calls each to warm up: in a round each runs `tries`
    times, A B A B ..., and keeps its least time (a call the scheduler preempted on a loaded machine is
    dropped, not averaged in)."""
    for f in impls:
        f()
        f()
    times: list[list[float]] = [[] for _ in impls]
    for _ in range(rounds):
        best = [float("inf")] * len(impls)
        for _ in range(tries):
            for k, f in enumerate(impls):
                start = time.perf_counter()
                f()
                best[k] = min(best[k], time.perf_counter() - start)
        for k, t in enumerate(best):
            times[k].append(t)
    return times


def _columns(rule: Any, generated: dict[str, Callable], written: dict[str, Callable], n: int, rounds: int) -> list[str]:
    """The four ratio cells of one rule."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch

    rng = np.random.default_rng(0)
    arrays = []
    for i in rule.inputs:
        lo, hi = i.interval
        lo, hi = (lo if np.isfinite(lo) else -3.0), (hi if np.isfinite(hi) else 3.0)
        arrays.append(rng.uniform(lo, hi, n).astype(np.float32))
    xt = [torch.from_numpy(a) for a in arrays]
    xj = [jnp.asarray(a) for a in arrays]

    def torch_first(f: Callable) -> Callable:
        return lambda *a: (lambda r: r[0] if isinstance(r, tuple) else r)(f(*a))

    gen_t, auto_t = torch_first(generated["torch"]), torch_first(written["torch"])
    gen_j, auto_j = torch_first(generated["jax"]), torch_first(written["jax"])

    def fwd_bwd(f: Callable) -> Callable[[], Any]:
        def run() -> None:
            leaves = [x.detach().requires_grad_() for x in xt]
            out = f(*leaves)
            out.backward(torch.ones_like(out))

        return run

    def torch_jvp(f: Callable) -> Callable[[], Any]:
        tangents = tuple(torch.ones_like(x) for x in xt)
        return lambda: torch.func.jvp(f, tuple(xt), tangents)

    argnums = tuple(range(len(xj)))

    def jit_grad(f: Callable) -> Callable[[], Any]:
        g = jax.jit(jax.value_and_grad(lambda *a: (f(*a) ** 2).sum(), argnums))
        return lambda: jax.block_until_ready(g(*xj))

    def jit_jvp(f: Callable) -> Callable[[], Any]:
        g = jax.jit(lambda *a: jax.jvp(f, a, tuple(jnp.ones_like(x) for x in a)))
        return lambda: jax.block_until_ready(g(*xj))

    cells = []
    for make, (gen, auto) in (
        (fwd_bwd, (gen_t, auto_t)),
        (torch_jvp, (gen_t, auto_t)),
        (jit_grad, (gen_j, auto_j)),
        (jit_jvp, (gen_j, auto_j)),
    ):
        times = _interleaved([make(gen), make(auto)], rounds)
        cells.append(_ratio_cell(times[0], times[1]))
    return cells


def main(log2n: int, quick: bool = False, policy: str = POLICY, only: str | None = None) -> Table:
    """Prints the table as it measures; returns docs/performance.md's (the medians)."""
    import torch

    from rulegen.check.accuracy import _plan, array_function
    from rulegen.render.build import build, with_accuracy
    from rulegen.spec.rules import read_rules

    torch.set_num_threads(max(1, torch.get_num_threads()))
    table = Table(list(layout().header))
    n = 1 << log2n
    rounds = 5 if quick else 20
    rules = with_accuracy(read_rules([ZOO]), policy)
    known = [r.name for r in rules]
    with tempfile.TemporaryDirectory() as tmp:
        package = f"zoo_{policy}"
        print(f"building {len(rules)} zoo rules under accuracy: {policy}", file=sys.stderr)
        build([ZOO], Path(tmp) / package, accuracy=policy)
        sys.path.insert(0, tmp)
        modules = {b: importlib.import_module(f"{package}.{b}") for b in ("torch", "jax")}
        print(
            f"{len(rules)} zoo rules, accuracy: {policy}, float32, {n} elements, {rounds} interleaved rounds; "
            f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"
        )
        print(f"{'rule':<24} " + " ".join(f"{c:>22}" for c in COLUMNS) + " policy")
        worst: list[tuple[float, str, str]] = []
        for rule in rules:
            if only is not None and rule.name != only:
                continue
            plan = _plan(rule, known)
            exprs = [plan.written[o.name] for o in rule.outputs]
            written = {b: array_function(rule, exprs, b) for b in ("torch", "jax")}
            generated = {b: getattr(modules[b], rule.name) for b in ("torch", "jax")}
            cells = _columns(rule, generated, written, n, rounds)
            print(f"{rule.name:<24} " + " ".join(f"{c:>22}" for c in cells) + f" {rule.accuracy}", flush=True)
            table.add(rule.name, *(c.split()[0] for c in cells))
            worst += [(float(c.split()[0]), rule.name, col) for c, col in zip(cells, COLUMNS, strict=True)]
        over = sorted((w for w in worst if w[0] > 1.05), reverse=True)
        print(f"load average after: {os.getloadavg()[0]:.2f}; above 1.05: {len(over)} of {len(worst)} cells")
        for ratio, name, column in over:
            print(f"  {name} {column} {ratio:.2f}")
    return table


if __name__ == "__main__":
    asked = request(sys.argv[1:], TABLES)
    policy, rest = policy_argument(asked.rest)
    only = None
    if "--only" in rest:
        at = rest.index("--only")
        only = rest[at + 1] if at + 1 < len(rest) else None
        del rest[at : at + 2]
    size, quick = size_and_quick(rest, 20, __doc__ or "")
    with quiet_if(asked.markdown):
        measured = main(size, quick=quick, policy=policy or POLICY, only=only)
    if asked.markdown:
        print(measured.markdown())
