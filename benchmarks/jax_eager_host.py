"""Host and torch-bridged JAX rules called eagerly, outside `jit`: time per call, compiles and memory.

    python -m benchmarks.jax_eager_host [calls, default 1000] [--markdown]

float32 3x4 arrays on the CPU. Each rule is called once to warm up, then
`calls` times; the table shows the median milliseconds per call, the
backend compiles JAX reports during the calls (`jax.monitoring`) and how
much the process's resident memory grew over them. A callback compiled
once per signature keeps the last two at 0. `--markdown` prints docs/performance.md's table.
"""

from __future__ import annotations

import resource
import statistics
import sys
import time

import jax
import jax.numpy as jnp

from benchmarks.table import Layout, Table, quiet_if, request

TABLES = ("jax_eager_host",)
RULES = {"scipy_erfcx": "scipy_erfcx", "numpy_sort": "numpy_sort", "torch_mish": "torch_mish (bridged)"}


def layout(table: str = TABLES[0]) -> Layout:
    return Layout(("rule", "ms/call", "compiles", "MiB grown"), tuple(RULES.values()))


def _resident_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() / 2**20


def main(calls: int) -> Table:
    """Prints the table as it measures, and returns it."""
    table = Table(list(layout().header))
    from generated.jax import numpy_sort, scipy_erfcx, torch_mish

    x = jnp.linspace(-1.0, 1.0, 12, dtype=jnp.float32).reshape(3, 4)
    compiles: list[str] = []

    def listener(event: str, duration: float, **kwargs: object) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            compiles.append(event)

    jax.monitoring.register_event_duration_secs_listener(listener)
    print(f"{'rule':<12} {'ms/call':>8} {'compiles':>9} {'MiB grown':>10}   ({calls} eager calls)")
    for name, rule in (("scipy_erfcx", scipy_erfcx), ("numpy_sort", numpy_sort), ("torch_mish", torch_mish)):
        jax.block_until_ready(rule(x))
        compiles.clear()
        before = _resident_mib()
        times = []
        for _ in range(calls):
            start = time.perf_counter()
            jax.block_until_ready(rule(x))
            times.append(time.perf_counter() - start)
        grown = _resident_mib() - before
        print(f"{name:<12} {1e3 * statistics.median(times):>8.2f} {len(compiles):>9} {grown:>10.1f}")
        table.add(RULES[name], f"{1e3 * statistics.median(times):.2f}", len(compiles), f"{grown:.1f}")
    jax.monitoring.unregister_event_duration_listener(listener)
    return table


if __name__ == "__main__":
    asked = request(sys.argv[1:], TABLES)
    with quiet_if(asked.markdown):
        measured = main(int(asked.rest[0]) if asked.rest else 1000)
    if asked.markdown:
        print(measured.markdown())
