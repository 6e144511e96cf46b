"""Rules under `shard_map` with its default `check_vma=True`, on two host devices.

The `linear_map` primitive and host rules built their results' types from
shape and dtype alone, dropping the mesh axes the values vary along:
softmax, l2_normalize, logsumexp, host and bridged rules failed to trace.
JAX reads the device count once, so the check runs in a fresh process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import ROOT

# Rules that act along the last axis (or elementwise): each shard of rows is a call of its own.
ROW_WISE = [
    "softmax",  # linear_map
    "l2_normalize",
    "logsumexp",
    "scipy_erfcx",  # host (NumPy) primitive
    "numpy_sort",
    "torch_mish",  # bridged to torch
    "f_softplus",
    "clip_gradient",
]

SCRIPT = """
import json, sys
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, PartitionSpec as P
import generated.jax as rules

shard_map = getattr(jax, "shard_map", None)
if shard_map is None:
    from jax.experimental.shard_map import shard_map
mesh = Mesh(np.array(jax.devices()), ("rows",))
x = jnp.asarray(np.random.default_rng(0).normal(size=(4, 5)))
w = jnp.asarray(np.random.default_rng(1).normal(size=(4, 5)))
found = {}
for name in sys.argv[1:]:
    rule = getattr(rules, name)
    call = (lambda a: rule(-0.5, 0.5, a)) if name == "clip_gradient" else rule
    sharded = shard_map(call, mesh=mesh, in_specs=P("rows"), out_specs=P("rows"))
    try:
        value = jax.jit(sharded)(x)
        grad = jax.jit(jax.grad(lambda a: jnp.sum(w * jnp.broadcast_to(sharded(a).T, w.T.shape).T)))(x)
        want_grad = jax.grad(lambda a: jnp.sum(w * jnp.broadcast_to(call(a).T, w.T.shape).T))(x)
        found[name] = [float(jnp.max(jnp.abs(value - call(x)))), float(jnp.max(jnp.abs(grad - want_grad)))]
    except Exception as exc:
        found[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
print(json.dumps(found))
"""


def _on_two_devices(script: str, *args: str) -> dict:
    """What `script` prints last (JSON), run where JAX sees two host devices."""
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
        "JAX_PLATFORMS": "cpu",
        "JAX_ENABLE_X64": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", script, *args], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_rules_under_shard_map_match_the_unsharded_call():
    found = _on_two_devices(SCRIPT, *ROW_WISE)
    failed = {name: r for name, r in found.items() if not (isinstance(r, list) and max(r) < 1e-12)}
    assert not failed, failed


JIT_SCRIPT = """
import collections, json, sys
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import generated.jax as rules

mesh = Mesh(np.array(jax.devices()), ("rows",))
x = jax.device_put(jnp.linspace(-1.0, 1.0, 20).reshape(4, 5), NamedSharding(mesh, P("rows")))
point = collections.namedtuple("Point", ["x", "y"])
calls = {
    "gelu": rules.gelu,
    "sin_mul": lambda a: rules.sin_mul(a, 2 * a),
    "softmax": rules.softmax,
    "logsumexp": rules.logsumexp,
    "point_jvp": lambda a: rules.point_jvp(point(a, a))["b"][0],
    "c_exp": lambda a: rules.c_exp(a).real,
}
found = {}
for name, call in calls.items():
    value = jax.jit(call)(x)
    grad = jax.jit(jax.grad(lambda a: jnp.sum(call(a))))(x)
    found[name] = [str(value.sharding.spec), str(grad.sharding.spec)]
print(json.dumps(found))
"""


def test_rules_of_array_code_keep_their_sharding_under_jit_on_a_mesh():
    # Host and bridged rules gather to one device here (jax.pure_callback's maximal sharding outside
    # shard_map); per shard they run under shard_map (above), see the guide.
    found = _on_two_devices(JIT_SCRIPT)
    wrong = {name: specs for name, specs in found.items() if specs[0] != specs[1] or "rows" not in specs[0]}
    assert not wrong, found


ARGMAX = """
name: max_index
doc: The maximum over the last axis and where it lies.
inputs: [x]
outputs:
  m: {}
  i: {diff: false, dtype: int}
forward:
  python: |
    i = xp.argmax(x, axis=-1)
    return xp.max(x, axis=-1), i
vjp:
  python: return xp.where(xp.arange(x.shape[-1]) == i[..., None], m_bar[..., None], xp.zeros_like(x))
"""


def test_an_integer_output_differentiates_under_shard_map(tmp_path, monkeypatch):
    # The JVP gave an integer output's tangent as a bare NumPy float0 array, which carries no mesh
    # axes: "primal int64[3]{V:calls} with tangent float0[3]" (--compile found it, its message cut
    # at "but got:"). The plain check runs shard_map on one device, which types values as two do.
    from rulegen.check.run import run_checks
    from rulegen.render.build import build
    from rulegen.spec.rules import read_rules

    (tmp_path / "max_index.yaml").write_text(ARGMAX)
    files = [tmp_path / "max_index.yaml", ROOT / "tests" / "right_rules" / "integer_output.yaml"]
    build(files, tmp_path / "rg_int_aux")
    monkeypatch.syspath_prepend(str(tmp_path))
    outcomes = run_checks(read_rules(files), "rg_int_aux", only=["transforms_jax"])
    failed = {o.rule: o.detail for o in outcomes if o.status != "pass"}
    assert not failed, failed
    assert all("shard_map(grad)" in o.detail for o in outcomes)
