"""The sympy symbols a rule's names stand for: one definition that every body kind parses against."""

from __future__ import annotations

import sympy as sp

from rulegen.spec.names import cotangent, tangent
from rulegen.spec.rules import Input, Rule


def _input_symbol(spec: Input) -> sp.Symbol:
    # Only what the rule states may let sympy simplify: an assumption taken
    # from the sample domain would change the function outside it (atan2(y, x)
    # became atan(y/x) for x sampled in [0.5, 3]).
    assumptions: dict[str, bool] = dict.fromkeys(spec.assume, True)
    assumptions["complex" if spec.dtype == "complex" else "real"] = True
    if spec.dtype == "int":
        assumptions["integer"] = True
    return sp.Symbol(spec.name, **assumptions)


def value_symbol(rule: Rule, name: str) -> sp.Symbol:
    """The symbol of a value the rule computes (an output, residual, tangent or cotangent): complex in a complex rule.

    Real elsewhere, so that sympy simplifies as real arithmetic; never real
    in a complex rule, where that would let it drop a conjugate.
    """
    return sp.Symbol(name, complex=True) if rule.complex else sp.Symbol(name, real=True)


def symbols_of(rule: Rule) -> dict[str, sp.Symbol]:
    """Inputs (with their stated assumptions), outputs, residuals, tangents and cotangents, by name."""
    symbols = {i.name: _input_symbol(i) for i in rule.inputs}
    symbols |= {name: value_symbol(rule, name) for name in rule.value_names}
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
        names |= {tangent(n) for n in diff_inputs}
    if role == "vjp":
        names |= {cotangent(n) for n in diff_outputs}
    order = [i.name for i in rule.inputs] + [o.name for o in rule.outputs] + list(rule.residual_names)
    order += [tangent(n) for n in diff_inputs] + [cotangent(n) for n in diff_outputs]
    return [n for n in order if n in names]
