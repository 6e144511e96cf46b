"""The durability check (`rulegen test --compile`): rules against eager under compile, export and shard_map.

Compiling and exporting take seconds per rule: one rule per route runs here
(slow lane); `rulegen test --compile rules/` runs them all.
"""

from __future__ import annotations

import types

import pytest
import torch

import generated.jax as gj
import generated.torch as gt
from rulegen.check import CheckFailed, run_checks, subject_of
from rulegen.check.durability import check_durability
from rulegen.spec.rules import read_rules
from tests.conftest import RULES

# One rule per route: symbolic custom_jvp (gelu), statics and a VJP that is no derivative
# (clip_gradient), a snippet linear_map (softmax), structures (point_vjp, a custom_vjp),
# complex (c_mobius), a host (NumPy) body (scipy_erfcx: jax.export n/a, with why).
ROUTES = ["gelu", "clip_gradient", "softmax", "point_vjp", "c_mobius", "scipy_erfcx"]


@pytest.mark.costly
@pytest.mark.slow
def test_a_rule_of_each_route_survives_compile_export_and_shard_map(bundled):
    rules = [r for r in read_rules(sorted(RULES.glob("*.yaml"))) if r.name in ROUTES]
    # The two checks `--compile` adds: the others, at this seed, are the fast lane's sweep of the bundled rules.
    outcomes = run_checks(rules, bundled, include_compile=True, only=("compile", "durability"))
    compiled = {o.rule: o for o in outcomes if o.check == "compile"}
    assert set(compiled) == set(ROUTES)
    for name, outcome in compiled.items():
        assert outcome.status == "pass", f"{name}: {outcome.detail}"
    found = {o.rule: o for o in outcomes if o.check == "durability"}
    assert set(found) == set(ROUTES)
    for name, outcome in found.items():
        assert outcome.status == "pass", f"{name}: {outcome.detail}"
        assert "torch.export" in outcome.detail and "shard_map" in outcome.detail, outcome.detail
    assert "jax.export cannot serialize the host callbacks" in found["scipy_erfcx"].detail


class _Clipped(torch.autograd.Function):
    """A clip_gradient written the usual way, applied as it is: Dynamo drops its backward under torch.func."""

    @staticmethod
    def forward(x):
        return x.clone()

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, g):
        return g.clamp(-0.5, 0.5)

    @staticmethod
    def jvp(ctx, x_dot):
        return x_dot


@pytest.mark.slow
def test_a_function_whose_rule_compile_drops_fails_the_check():
    rule = next(r for r in read_rules([RULES / "log1pexp.yaml"]))
    dropped = types.SimpleNamespace(log1pexp=lambda x: 3 * _Clipped.apply(x))
    subject = subject_of(rule, gj, dropped, seed=0)
    with pytest.raises(CheckFailed, match=r"compiled torch\.func\.grad, dout/dx vs eager: at x="):
        check_durability(subject, True, gj)
    assert "match eager" in check_durability(subject_of(rule, gj, gt, seed=0), True, gj)


def test_the_check_says_how_to_run_it(bundled):
    rule = next(r for r in read_rules([RULES / "log1pexp.yaml"]))
    outcome = next(o for o in run_checks([rule], bundled, only=("durability",)) if o.check == "durability")
    assert outcome.status == "n/a" and "--compile" in outcome.detail


# A log1pexp that counts the devices it is sharded over: right eagerly, twice the value under shard_map.
_COUNTING_JAX = """
import jax
import jax.numpy as jnp


def log1pexp(x):
    try:
        devices = jax.lax.psum(1, "calls")
    except Exception:  # no axis "calls" outside shard_map
        devices = 1
    return jnp.log1p(jnp.exp(x)) * devices
"""


def _shards_off(tmp_path, package: str) -> list[str]:
    """What `python -m rulegen.check.shard_map_worker` finds off for log1pexp in `package`, on two host devices."""
    import json
    import os
    import pickle
    import subprocess
    import sys

    from rulegen.check.shard_map_worker import ShardedCall
    from tests.conftest import ROOT

    rule = next(r for r in read_rules([RULES / "log1pexp.yaml"]) if r.name == "log1pexp")
    call = tmp_path / "call.pickle"
    call.write_bytes(pickle.dumps(ShardedCall(str(tmp_path), package, rule, 0, ("log1pexp",))))
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [sys.executable, "-m", "rulegen.check.shard_map_worker", str(call)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_shard_map_worker_is_a_module_that_finds_a_shard_off_eager(tmp_path):
    counting = tmp_path / "counting"
    counting.mkdir()
    (counting / "__init__.py").write_text("")
    (counting / "jax.py").write_text(_COUNTING_JAX)
    (counting / "torch.py").write_text("from generated.torch import log1pexp  # noqa: F401\n")
    off = _shards_off(tmp_path, "counting")
    assert off and all(line.startswith(("call 0 (device 0)", "call 1 (device 1)")) for line in off), off
    assert any(", out: off by" in line for line in off) and any("dout/dx: off by" in line for line in off), off
    assert _shards_off(tmp_path, "generated") == []
