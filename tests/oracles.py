"""Reference implementations for the tests: the frameworks' own autodiff of a rule's forward.

A rule's forward expression is printed with the same printers the generator
uses, but without any custom derivative: whatever jax.grad or torch.func.grad
make of it is the oracle the generated rules must match.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from rulegen.check.accuracy import array_function
from rulegen.derive.partials import derive_rule
from rulegen.spec.rules import Rule


def _compile(rule: Rule, backend: str) -> Callable[..., Any]:
    forward = [expr for _, expr in derive_rule(rule).forward]
    computed = array_function(rule, forward, backend)
    # One output bare, as the generated function returns it.
    return (lambda *args: computed(*args)[0]) if len(forward) == 1 else computed


def jax_reference(rule: Rule) -> Callable[..., Any]:
    return _compile(rule, "jax")


def torch_reference(rule: Rule) -> Callable[..., Any]:
    return _compile(rule, "torch")


def sample_inputs(rule: Rule, shape: tuple[int, ...], seed: int = 0, statics: dict | None = None) -> list[Any]:
    """NumPy float64 arrays inside each input's domain; statics from `statics` or defaults."""
    rng = np.random.default_rng(seed)
    values: list[Any] = []
    for spec in rule.inputs:
        if spec.static:
            values.append((statics or {}).get(spec.name, spec.default if spec.has_default else 1.0))
            continue
        lo, hi = spec.domain
        lo = lo if math.isfinite(lo) else (hi - 6 if math.isfinite(hi) else -3.0)
        hi = hi if math.isfinite(hi) else lo + 6
        # Keep away from the ends, where some functions (acosh, atanh) have kinks or poles.
        width = hi - lo
        values.append(rng.uniform(lo + 0.05 * width, hi - 0.05 * width, size=shape))
    return values
