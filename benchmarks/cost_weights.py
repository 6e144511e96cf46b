"""Calibrates the accuracy search's cost model: each operation's time in eager torch and under `jax.jit`.

    python -m benchmarks.cost_weights [--backend torch|jax] [--rounds N] [--write]

Times every function of the cost model (`rulegen.derive.stabilise.cost`)
that the function registry names a torch and a JAX call for, as the
generated code calls it (the registry's `torch` and `jax` names), float32
on the CPU, and prints each one's measured time and the weight it gives
beside the weight in use:

- `jax`: under `jax.jit`, eight calls fused in one program (the call's
  argument shifted by a constant each time, summed), less the same program
  without the call, per call, over `exp`'s: a unit is one `exp`.  Every
  argument is shifted: XLA would compute a call of a repeated one once.
- `torch`: one eager call (`torch.set_num_threads(1)`), over an add's; the
  weight is a kernel's 1 plus a tenth of the ratio past 1.

Everything is timed interleaved (each operation in turn, each keeping its
least of three calls a round) over `--rounds` rounds, and a ratio is the
median of the per-round ratios, so that a loaded machine moves the
operation and its unit alike; the load average is printed before and after.
`--write` stores the weights of the measured backends, and what was measured,
in `rulegen/derive/cost_weights.json`, which the cost model reads; the
operations it does not measure (arithmetic, a `where`, the fallbacks for a
function not listed) keep their weights there.
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from rulegen.derive.stabilise.cost import BACKENDS, WEIGHTS, WEIGHTS_FILE

#: Elements per array.
ELEMENTS = 1 << 18
#: Calls fused in one JAX program.
FUSED = 8
#: The operations measured besides the registry's functions: name -> (torch, jax) of one array.
_POWERS: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    "sqrt": (lambda x: x.sqrt(), lambda x: __import__("jax").numpy.sqrt(x)),
    "rsqrt": (lambda x: x.rsqrt(), lambda x: __import__("jax").lax.rsqrt(x)),
    "pow": (lambda x: x**1.5, lambda x: x**1.5),
}
#: The weights no timing sets: arithmetic and a `where` (fused away under jit; a kernel in eager torch), and the
#: fallbacks for a function the model does not list.
UNMEASURED = ("arithmetic", "unary", "select", "function", "composite")


def _resolved(dotted: str) -> Callable[..., Any]:
    """The function a printed name calls: `jnp.log1p` is jax.numpy.log1p."""
    module, _, name = dotted.replace("jnp.", "jax.numpy.", 1).rpartition(".")
    return getattr(importlib.import_module(module), name)


def _arguments(name: str) -> tuple[float, float, int]:
    """(low, high, order) of the inputs a function is timed on: inside its domain, away from its edges."""
    from rulegen.derive.functions import BY_NAME

    function = BY_NAME.get(name)
    domain = function.domain if function is not None else ()
    order = 0
    if function is not None and function.orders:
        order = int(domain[0][0])
        domain = domain[1:]
    low, high = domain[-1] if domain else (-3.0, 3.0)
    low = max(low, -3.0) + (0.1 if low > -3.0 else 0.0)
    high = min(high, 3.0) - (0.1 if high < 3.0 else 0.0)
    if name in ("sqrt", "rsqrt", "pow"):
        low, high = 0.1, 3.0
    return low, high, order


def operations() -> dict[str, tuple[Callable[..., Any], Callable[..., Any], int]]:
    """Each measured operation: (torch call, jax call, number of array arguments)."""
    from rulegen.derive.functions import BY_NAME

    found: dict[str, tuple[Callable[..., Any], Callable[..., Any], int]] = {
        name: (t, j, 1) for name, (t, j) in _POWERS.items()
    }
    for name in WEIGHTS["jax"]:
        function = BY_NAME.get(name)
        if name in found or name in UNMEASURED or function is None or not (function.torch and function.jax):
            continue
        arrays = 2 if name in ("logaddexp", "atan2", "xlogy", "xlog1py") else 1
        found[name] = (_resolved(function.torch), _resolved(function.jax), arrays)
    return found


def _programs(backend: str) -> dict[str, Callable[[], Any]]:
    """One timed call per operation (and the units: torch's add, JAX's program without a call)."""
    import numpy as np

    rng = np.random.default_rng(0)
    programs: dict[str, Callable[[], Any]] = {}
    if backend == "torch":
        import torch

        torch.set_num_threads(1)
        a, b = (torch.from_numpy(rng.uniform(0.5, 2.0, ELEMENTS).astype(np.float32)) for _ in range(2))
        programs["add"] = lambda: a + b
        for name, (call, _, arrays) in operations().items():
            low, high, order = _arguments(name)
            xs = [torch.from_numpy(rng.uniform(low, high, ELEMENTS).astype(np.float32)) for _ in range(arrays)]
            programs[name] = _torch_call(call, order, xs)
        return programs
    import jax
    import jax.numpy as jnp

    def fused(call: Callable[..., Any] | None, xs: list[Any], order: int) -> Callable[[], Any]:
        def body(*xs: Any) -> Any:
            total = 0.0
            for k in range(FUSED):
                shifted = tuple(x + k / 128 for x in xs)  # every argument: XLA computes a repeated one once
                total = total + (shifted[0] if call is None else call(order, *shifted) if order else call(*shifted))
            return total

        program = jax.jit(body)
        return lambda: jax.block_until_ready(program(*xs))

    base = [jnp.asarray(rng.uniform(0.5, 2.0, ELEMENTS).astype(np.float32))]
    programs["none"] = fused(None, base, 0)
    for name, (_, call, arrays) in operations().items():
        low, high, order = _arguments(name)
        # 8/128 below the top of the range: the shifted arguments stay inside the domain.
        xs = [jnp.asarray(rng.uniform(low, high - FUSED / 128, ELEMENTS).astype(np.float32)) for _ in range(arrays)]
        programs[name] = fused(call, xs, order)
    return programs


def _torch_call(call: Callable[..., Any], order: int, xs: list[Any]) -> Callable[[], Any]:
    return (lambda: call(order, *xs)) if order else (lambda: call(*xs))


def measure(backend: str, rounds: int, tries: int = 3) -> dict[str, list[float]]:
    """Each program's least time of `tries` calls, in each of `rounds` rounds, all interleaved (seconds)."""
    programs = _programs(backend)
    for run in programs.values():
        run()
        run()
    times: dict[str, list[float]] = {name: [] for name in programs}
    for _ in range(rounds):
        best = dict.fromkeys(programs, float("inf"))
        for _ in range(tries):
            for name, run in programs.items():
                start = time.perf_counter()
                run()
                best[name] = min(best[name], time.perf_counter() - start)
        for name, t in best.items():
            times[name].append(t)
    return times


def weights(backend: str, times: dict[str, list[float]]) -> dict[str, float]:
    """The weight of each measured operation, from its per-round times: the median of the per-round ratios."""
    found = {}
    for name in times:
        if name in ("add", "none"):
            continue
        if backend == "torch":
            ratio = statistics.median(t / a for t, a in zip(times[name], times["add"], strict=True))
            found[name] = round(1.0 + (ratio - 1.0) / 10, 2)
        else:
            ratios = [
                (t - n) / (e - n) for t, e, n in zip(times[name], times["exp"], times["none"], strict=True) if e > n
            ]
            found[name] = round(max(statistics.median(ratios), 0.05), 2)
    return found


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg()) if hasattr(os, "getloadavg") else "?"


def main(argv: list[str]) -> None:
    backends = [a.split("=", 1)[1] for a in argv if a.startswith("--backend=")]
    if "--backend" in argv:
        backends.append(argv[argv.index("--backend") + 1])
    backends = backends or list(BACKENDS)
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 15
    data = json.loads(WEIGHTS_FILE.read_text())
    for backend in backends:
        before = _load()
        times = measure(backend, rounds)
        after = _load()
        found = weights(backend, times)
        unit = "add" if backend == "torch" else "none"
        print(f"{backend}: load average before {before}, after {after}; {rounds} rounds, {ELEMENTS} float32 elements")
        print(f"{'operation':<12} {'us (median)':>12} {'weight now':>11} {'measured':>9}")
        for name in sorted(found):
            us = statistics.median(times[name]) * 1e6
            print(f"{name:<12} {us:12.1f} {WEIGHTS[backend].get(name, float('nan')):11.2f} {found[name]:9.2f}")
        print(f"{unit:<12} {statistics.median(times[unit]) * 1e6:12.1f}")
        data["weights"][backend] = {**data["weights"][backend], **found}
        data["measured"][backend] = {
            "load_average_before": before,
            "load_average_after": after,
            "rounds": rounds,
            "elements": ELEMENTS,
            "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "versions": _versions(backend),
            "median_us": {name: round(statistics.median(t) * 1e6, 1) for name, t in sorted(times.items())},
        }
    if "--write" in argv:
        WEIGHTS_FILE.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
        print(f"wrote {WEIGHTS_FILE}")


def _versions(backend: str) -> str:
    from importlib.metadata import version

    python = ".".join(map(str, sys.version_info[:2]))
    return f"{backend} {version('torch' if backend == 'torch' else 'jax')}, python {python}"


if __name__ == "__main__":
    main(sys.argv[1:])
