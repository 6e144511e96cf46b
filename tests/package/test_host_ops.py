"""A host (NumPy) forward is a torch custom op with a fake: torch.compile sees one op, not a graph break.

Before, `torch._dynamo.explain` of scipy_erfcx found a graph break at the
NumPy call (two graphs); now one graph.  Ops are named by the generated
module, so two packages holding the same rule import side by side.
"""

from __future__ import annotations

import importlib
import sys

import pytest
import torch

from rulegen.render.build import build

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_a_host_rule_compiles_into_one_graph():
    from generated.torch import scipy_erfcx

    x = torch.linspace(-1, 2, 5, dtype=torch.float64)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(scipy_erfcx)(x)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    compiled = torch.compile(scipy_erfcx, fullgraph=True)
    leaf = x.clone().requires_grad_()
    compiled(leaf).sum().backward()
    reference = x.clone().requires_grad_()
    scipy_erfcx(reference).sum().backward()
    torch.testing.assert_close(leaf.grad, reference.grad)


def test_two_packages_with_the_same_host_rule_import_side_by_side(tmp_path, monkeypatch):
    for name in ("first_pkg", "second_pkg"):
        build([ROOT / "rules" / "scipy_erfcx.yaml"], tmp_path / name)
    monkeypatch.syspath_prepend(str(tmp_path))
    x = torch.linspace(-1, 2, 5, dtype=torch.float64)
    values = [importlib.import_module(f"{name}.torch").scipy_erfcx(x) for name in ("first_pkg", "second_pkg")]
    torch.testing.assert_close(values[0], values[1])
    for name in ("first_pkg", "second_pkg"):
        for module in [m for m in sys.modules if m.startswith(name)]:
            del sys.modules[module]


@pytest.mark.slow
def test_a_host_rule_with_statics_and_returned_residuals_compiles_once_for_all_sizes():
    # numpy_sort (a static `dim`, integer permutations returned as residuals) ran its NumPy body
    # inside the traced Function: Dynamo specialized every size (5 graphs for 5 sizes). As an op
    # whose fake learns the residuals' dtypes from one call on ones, it goes dynamic as any op does.
    import torch._dynamo
    from torch._dynamo.utils import counters

    from generated.torch import numpy_sort

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(lambda x: numpy_sort(x).sum())
    for n in (5, 6, 7, 8, 9):
        x = torch.randn(3, n, dtype=torch.float64, requires_grad=True)
        compiled(x).backward()
        torch.testing.assert_close(x.grad, torch.ones_like(x))
    assert counters["stats"]["unique_graphs"] <= 2
    assert not counters["graph_break"]


def test_eager_host_and_bridged_jax_rules_compile_once_per_signature():
    # Each eager call passed jax.pure_callback a fresh closure, which JAX keys its compiled
    # callbacks by: a new executable on every call (10-20 ms and 1.4 MiB each).
    import jax
    import jax.numpy as jnp

    from generated.jax import host_mul_sin_jvp, numpy_sort, scipy_erfcx, torch_mish

    compiles = []

    def listener(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            compiles.append(event)

    x = jnp.linspace(-1.0, 1.0, 12).reshape(3, 4)
    calls = [
        lambda: scipy_erfcx(x),
        lambda: torch_mish(x),
        lambda: numpy_sort(x, 0),
        lambda: numpy_sort(x, -1),
        # The backward's and the JVP's callbacks, and vmap's batched one, compiled on every eager call too.
        lambda: jax.grad(lambda v: scipy_erfcx(v).sum())(x),
        lambda: jax.grad(lambda v: torch_mish(v).sum())(x),
        lambda: jax.grad(lambda v: numpy_sort(v, 0).sum())(x),
        lambda: jax.jvp(lambda v: host_mul_sin_jvp(v, x), (x,), (x,)),
        lambda: jax.vmap(scipy_erfcx)(x),
    ]
    for call in calls:
        call()
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        for _ in range(3):
            for call in calls:
                jax.block_until_ready(call())
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert compiles == []
    # The statics still choose the executable: dim 0 and dim -1 sort different axes.
    assert not jnp.array_equal(numpy_sort(x[::-1], 0), numpy_sort(x[::-1], -1))
