"""A one-framework audit: every check that can run on the framework installed runs on it alone.

The framework left out is blocked as an uninstalled one is (`sys.modules[name] = None`, so that `import name`
raises ImportError); the implementations are plain functions of the other, so nothing is built.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rulegen.check.against import Audit, audit_outcomes, chosen_audit_checks
from rulegen.check.dtypes import check_dtype, check_low_precision
from rulegen.check.outcome import CheckFailed
from rulegen.spec.rules import read_rule_file

TESTS = Path(__file__).resolve().parents[1]
EXAMPLES = TESTS.parent.parent / "shared" / "examples"
CANCELLING = TESTS / "wrong_rules" / "cancellation_low_precision.yaml"
OTHER = {"jax": "torch", "torch": "jax"}


def jax_version(form: str) -> Callable[[Any], Any]:
    import jax.numpy as jnp

    def f(x: Any) -> Any:
        if form == "cancelling":
            return (1 - jnp.cos(x)) / x**2
        # In float32 and back, as rulegen computes low precision: the half-angle form keeps every bit.
        wide = jnp.asarray(x, dtype=jnp.promote_types(x.dtype, jnp.float32))
        return (2 * jnp.sin(wide / 2) ** 2 / wide**2).astype(x.dtype)

    return f


def torch_version(form: str) -> Callable[[Any], Any]:
    import torch

    def f(x: Any) -> Any:
        if form == "cancelling":
            return (1 - torch.cos(x)) / x**2
        wide = x.to(torch.promote_types(x.dtype, torch.float32))
        return (2 * torch.sin(wide / 2) ** 2 / wide**2).to(x.dtype)

    return f


def audit_of(path: Path, kept: str, fn: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> Audit:
    """An audit of `fn` in `kept` alone against the rule of `path`, the other framework blocked."""
    (rule,) = read_rule_file(path)
    monkeypatch.setitem(sys.modules, OTHER[kept], None)
    return Audit(rule, {kept: f"tests:{rule.name}"}, {kept: fn}, {}, (rule.name,))


@pytest.mark.parametrize("kept", ["jax", "torch"])
def test_low_precision_and_dtype_run_on_the_one_framework_installed(kept: str, monkeypatch: pytest.MonkeyPatch) -> None:
    make = jax_version if kept == "jax" else torch_version
    importlib.import_module(kept)
    right = audit_of(CANCELLING, kept, make("exact"), monkeypatch).subject(0)
    assert right.backends == (kept,)
    assert check_low_precision(right.fresh()).endswith(f"of float64 ({kept})")
    assert f"{OTHER[kept]} is not installed" in check_dtype(right.fresh())
    wrong = audit_of(CANCELLING, kept, make("cancelling"), monkeypatch).subject(0)
    with pytest.raises(CheckFailed, match=rf"^{kept}: (bfloat16|float16) output out is .* eps from float64"):
        check_low_precision(wrong.fresh())


def test_a_scalar_rule_audited_in_jax_alone_is_checked_at_one_point(monkeypatch: pytest.MonkeyPatch) -> None:
    """fixed_point runs a scalar while_loop: its subject falls back to one point by calling JAX alone."""
    sys.path.insert(0, str(TESTS / "implementations"))
    try:
        fixed_point = importlib.import_module("right_fixed_point").fixed_point
    finally:
        sys.path.remove(str(TESTS / "implementations"))
    audit = audit_of(EXAMPLES / "fixed_point.yaml", "jax", fixed_point, monkeypatch)
    assert "at one point of the sample" in audit.subject(0).note
    checks = ["second_order", "float32", "low_precision", "dtype", "broadcast", "transforms_torch"]
    found = {o.check: o for o in audit_outcomes(audit, checks=chosen_audit_checks(checks))}
    assert {c: o.status for c, o in found.items()} == {
        "second_order": "pass",
        "float32": "pass",
        "low_precision": "pass",
        "dtype": "pass",
        "broadcast": "n/a",
        "transforms_torch": "n/a",
    }, found
    assert found["low_precision"].detail.endswith("(jax)")
    assert found["transforms_torch"].detail == "torch is not installed"
    assert "needs torch" not in found["broadcast"].detail
    assert np.ndim(audit.subject(0).values[1]) == 0
