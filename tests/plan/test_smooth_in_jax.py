"""A function the JAX planner lets JAX differentiate must be differentiated right by JAX at every order.

`plan/jax.py` computes a rule's outputs inside its JVP rule only where the
forward's functions are `_SMOOTH`: JAX's derivative of each is then sympy's.
JAX differentiates Gamma by its own digamma, which is nan at tiny negative
x, and log Gamma's second derivative by its own polygamma, 0 past 1e20: the
registry replaces both, so a function whose derivatives call a replaced one
is not smooth in JAX (gamma'' was nan at the largest floats).
"""

from __future__ import annotations

import sympy as sp

from rulegen.derive.functions import REGISTRY
from rulegen.plan.jax import _SMOOTH

_REPLACED_IN_JAX = {f.sympy for f in REGISTRY if f.jax_replacement is not None}


def _calls(expr: sp.Expr) -> set[type]:
    return {node.func for node in sp.preorder_traversal(expr) if isinstance(node, sp.Function)}


def test_no_smooth_function_is_differentiated_through_a_function_the_registry_replaces() -> None:
    x = sp.Symbol("x", real=True)
    found = {}
    for function in _SMOOTH:
        try:
            applied = function(x)
        except TypeError:
            continue  # two arguments (logaddexp, divided): their derivatives are elementary
        first = sp.diff(applied, x)
        replaced = (_calls(first) | _calls(sp.diff(first, x))) & _REPLACED_IN_JAX
        if replaced:
            found[function.__name__] = sorted(f.__name__ for f in replaced)
    assert not found, found


def test_gamma_and_log_gamma_are_differentiated_by_the_rule() -> None:
    assert not {sp.gamma, sp.loggamma} & _SMOOTH
