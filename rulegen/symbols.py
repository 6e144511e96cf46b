"""The sympy symbols a rule's names stand for: one definition that every body kind parses against."""

from __future__ import annotations

import sympy as sp

from rulegen import names
from rulegen.spec import Input, Rule, Structured


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
    for name in [o.name for o in rule.outputs] + list(rule.residual_names):
        symbols[name] = value_symbol(rule, name)
    for i in rule.inputs:
        if i.differentiable:
            symbols[f"{i.name}_dot"] = value_symbol(rule, f"{i.name}_dot")
    for name in [o.name for o in rule.outputs]:
        symbols[f"{name}_bar"] = value_symbol(rule, f"{name}_bar")
    return symbols


def own_locals(rule: Rule) -> dict[str, str]:
    """Each local generated code names for itself (`names.OWN_LOCALS`: `ctx`, `primals`, ...), as spelled in
    `rule`'s modules: renamed (`ctx_`) where one of the rule's names, or its tangents' and cotangents', takes it."""
    taken = {*symbols_of(rule), *(p.name for p in rule.parameters if isinstance(p, Structured))}
    # The rule's function and a named tuple's class are module-level names generated functions call.
    taken |= {rule.name, *(n.name for n in (rule.returns.named_tuples if rule.returns is not None else ()))}
    return {local: names.own_local(local, taken) for local in sorted(names.OWN_LOCALS)}


def torch_context(rule: Rule) -> str:
    """The name of a torch Function's context parameter: `ctx`, renamed where one of the rule's names is `ctx`."""
    return own_locals(rule)["ctx"]


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
