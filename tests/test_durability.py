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
from rulegen.check import CheckFailed, _subject, run_checks
from rulegen.durability import check_durability
from rulegen.spec import read_rules
from tests.conftest import RULES

# One rule per route: symbolic custom_jvp (gelu), statics and a VJP that is no derivative
# (clip_gradient), a snippet linear_map (softmax), structures (point_vjp, a custom_vjp),
# complex (c_mobius), a host (NumPy) body (scipy_erfcx: jax.export n/a, with why).
ROUTES = ["gelu", "clip_gradient", "softmax", "point_vjp", "c_mobius", "scipy_erfcx"]


@pytest.mark.slow
def test_a_rule_of_each_route_survives_compile_export_and_shard_map():
    rules = [r for r in read_rules(sorted(RULES.glob("*.yaml"))) if r.name in ROUTES]
    outcomes = run_checks(rules, include_compile=True)
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
    subject = _subject(rule, gj, dropped, seed=0)
    with pytest.raises(CheckFailed, match=r"compiled torch\.func\.grad, dout/dx vs eager: at x="):
        check_durability(subject, True, gj)
    assert "match eager" in check_durability(_subject(rule, gj, gt, seed=0), True, gj)


def test_the_check_says_how_to_run_it():
    rule = next(r for r in read_rules([RULES / "log1pexp.yaml"]))
    outcome = next(o for o in run_checks([rule]) if o.check == "durability")
    assert outcome.status == "n/a" and "--compile" in outcome.detail
