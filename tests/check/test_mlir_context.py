"""A rule's checks lower JAX programs into one shared MLIR context (`rulegen.check.lowering.one_mlir_context`)."""

from __future__ import annotations

import threading

import jax
from jax._src.interpreters import mlir

from rulegen.check import lowering as running
from rulegen.check.lowering import one_mlir_context
from rulegen.check.run import check_rule, chosen_checks
from rulegen.spec.rules import read_rules
from tests.conftest import RULES


def _counting(made: list) -> object:
    make = mlir.make_ir_context

    def counting():
        made.append(threading.get_ident())
        return make()

    return counting


def test_a_rule_s_checks_lower_in_one_mlir_context(monkeypatch):
    import generated.jax as jax_pkg
    import generated.torch as torch_pkg

    (gelu,) = read_rules([RULES / "gelu.yaml"])
    made: list = []
    counting = _counting(made)
    monkeypatch.setattr(mlir, "make_ir_context", counting)
    monkeypatch.setattr(running, "_SHARED_CONTEXT", threading.local())
    jax.clear_caches()  # every primitive the checks run eagerly is lowered again
    outcomes = list(check_rule(gelu, jax_pkg, torch_pkg, 0, False, checks=chosen_checks(["forward", "wide"])))
    assert [o.status for o in outcomes] == ["pass", "pass"], outcomes
    assert len(made) == 1, f"{len(made)} MLIR contexts made for one rule's checks"
    assert mlir.make_ir_context is counting  # JAX's own again once the checks are done
    # Outside the block, each lowering gets a context of its own, as JAX makes them.
    jax.jit(lambda x: x * 3.0)(1.0)
    assert len(made) == 2


def test_another_thread_gets_contexts_of_its_own(monkeypatch):
    made: list = []
    monkeypatch.setattr(mlir, "make_ir_context", _counting(made))
    monkeypatch.setattr(running, "_SHARED_CONTEXT", threading.local())
    with one_mlir_context():
        first, second = mlir.make_ir_context(), mlir.make_ir_context()
        other: list = []
        thread = threading.Thread(target=lambda: other.append(mlir.make_ir_context()))
        thread.start()
        thread.join()
        with one_mlir_context():  # a block inside a block shares the outer one's context
            inner = mlir.make_ir_context()
    assert first is second is inner
    assert other[0] is not first
    assert len(made) == 2 and made[1] != made[0]


def test_measuring_a_rule_s_accuracy_lowers_in_one_mlir_context(monkeypatch):
    """`rulegen accuracy` and the accuracy benchmark measure outside the checks, in a block of their own."""
    import generated.jax as jax_pkg
    import generated.torch as torch_pkg
    from rulegen.check.accuracy import measure_rule

    (gelu,) = read_rules([RULES / "gelu.yaml"])
    made: list = []
    monkeypatch.setattr(mlir, "make_ir_context", _counting(made))
    monkeypatch.setattr(running, "_SHARED_CONTEXT", threading.local())
    jax.clear_caches()
    assert measure_rule(gelu, jax_pkg, torch_pkg, points=8).series
    assert len(made) == 1, f"{len(made)} MLIR contexts made for one rule's measure"
