"""The durability check's shard_map part, run in a process that sees two host devices.

`python -m rulegen.check.shard_map_worker CALL.pickle`, with
`XLA_FLAGS=--xla_force_host_platform_device_count=2` in its environment
(JAX reads the device count once): CALL.pickle holds a `ShardedCall`.  It
prints, as its last line, a JSON list of what is off (empty where every
shard agrees with eager).
"""

from __future__ import annotations

import importlib
import json
import pickle
import sys
from typing import Any, NamedTuple

import numpy as np

from rulegen.check.subject import subject_of
from rulegen.spec.rules import Rule


class ShardedCall(NamedTuple):
    """What the worker rebuilds the checking process's subject from: the same seed and name give the same sample.

    The sample itself is not sent: a rule's statics may be callables.
    """

    folder: str  # where the built package lies
    package: str
    rule: Rule
    seed: int
    known: tuple[str, ...]


def shards_off(call: ShardedCall) -> list[str]:
    """Each of two calls (the sample and a moved copy), one per device under shard_map, against eager."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    jax.config.update("jax_enable_x64", True)
    shard_map = getattr(jax, "shard_map", None) or importlib.import_module("jax.experimental.shard_map").shard_map
    sys.path.insert(0, call.folder)
    jax_package = importlib.import_module(f"{call.package}.jax")
    torch_package = importlib.import_module(f"{call.package}.torch")
    s = subject_of(call.rule, jax_package, torch_package, call.seed, call.known)
    # Every array argument is split between the devices (as sharded data is), statics stay as they are.
    arrays = [k for k, v in enumerate(s.values) if isinstance(v, np.ndarray)]
    wrt = tuple(arrays.index(k) for k in s.diff)
    eager = s.bound(s.jax_fn, jnp.asarray, over=arrays)
    batch = [
        jnp.stack([v, v * 0.75 + 0.1 * np.sign(v) if k in s.diff else v])
        for k, v in ((k, np.asarray(s.values[k])) for k in arrays)
    ]
    mesh = Mesh(np.array(jax.devices()[:2]), ("calls",))

    def per_shard(*shards: Any) -> tuple[Any, ...]:
        return tuple(o[None] for o in eager(*[x[0] for x in shards]))

    sharded = shard_map(per_shard, mesh=mesh, in_specs=tuple(P("calls") for _ in batch), out_specs=P("calls"))

    def total(f: Any) -> Any:
        return lambda *b: sum(jnp.sum(o) for o in f(*b))

    got = jax.jit(sharded)(*batch)
    grads = jax.jit(jax.grad(total(sharded), wrt, holomorphic=call.rule.complex))(*batch)
    off = []
    for j in range(2):
        want = eager(*[b[j] for b in batch])
        want_grads = jax.grad(total(eager), wrt, holomorphic=call.rule.complex)(*[b[j] for b in batch])
        for named, found, expected in ((s.output_name, got, want), (s.partial, grads, want_grads)):
            for k, (g, w) in enumerate(zip(found, expected, strict=False)):
                error = np.abs(np.asarray(g[j]) - np.asarray(w))
                if (error > s.atol + s.rtol * np.abs(np.asarray(w))).any():
                    off.append(f"call {j} (device {j}), {named(k)}: off by {float(error.max()):.3g}")
    return off


def main(argv: list[str]) -> None:
    with open(argv[1], "rb") as handle:
        call = pickle.load(handle)
    print(json.dumps(shards_off(call)))


if __name__ == "__main__":
    main(sys.argv)
