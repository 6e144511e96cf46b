"""The sympy symbols a rule's names stand for: one definition that every body kind parses against."""

from __future__ import annotations

import sympy as sp

from rulegen.spec import Input, Rule


def _input_symbol(spec: Input) -> sp.Symbol:
    # Only what the rule states may let sympy simplify: an assumption taken
    # from the sample domain would change the function outside it (atan2(y, x)
    # became atan(y/x) for x sampled in [0.5, 3]).
    assumptions: dict[str, bool] = dict.fromkeys(spec.assume, True)
    assumptions["real"] = True
    if spec.dtype == "int":
        assumptions["integer"] = True
    return sp.Symbol(spec.name, **assumptions)


def symbols_of(rule: Rule) -> dict[str, sp.Symbol]:
    """Inputs (with their stated assumptions), outputs, residuals, tangents and cotangents, by name."""
    symbols = {i.name: _input_symbol(i) for i in rule.inputs}
    for name in [o.name for o in rule.outputs] + list(rule.residual_names):
        symbols[name] = sp.Symbol(name, real=True)
    for i in rule.inputs:
        if i.differentiable:
            symbols[f"{i.name}_dot"] = sp.Symbol(f"{i.name}_dot", real=True)
    for name in [o.name for o in rule.outputs]:
        symbols[f"{name}_bar"] = sp.Symbol(f"{name}_bar", real=True)
    return symbols
