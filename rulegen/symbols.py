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


def scope(rule: Rule, role: str) -> list[str]:
    """The names a body of `role` may read, in one order for every body kind.

    `role` is `forward`, `residual <name>`, `derivatives`, `jvp` or `vjp`:
    a forward reads the inputs; a residual also the outputs; partials also
    the residuals; a JVP also the differentiable inputs' tangents, a VJP
    the differentiable outputs' cotangents.  Symbolic and snippet bodies
    see the same names.
    """
    diff_inputs = [i.name for i in rule.inputs if i.differentiable]
    diff_outputs = [o.name for o in rule.outputs if o.differentiable]
    names = {i.name for i in rule.inputs}
    if role != "forward":
        names |= {o.name for o in rule.outputs}
    if role in ("derivatives", "jvp", "vjp"):
        names |= set(rule.residual_names)
    if role == "jvp":
        names |= {f"{n}_dot" for n in diff_inputs}
    if role == "vjp":
        names |= {f"{n}_bar" for n in diff_outputs}
    order = [i.name for i in rule.inputs] + [o.name for o in rule.outputs] + list(rule.residual_names)
    order += [f"{n}_dot" for n in diff_inputs] + [f"{n}_bar" for n in diff_outputs]
    return [n for n in order if n in names]
