"""The sympy symbols a rule's names stand for: one definition that every body kind parses against."""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Mapping
from types import MappingProxyType

import sympy as sp

from rulegen.spec import names
from rulegen.spec.names import cotangent, tangent
from rulegen.spec.rules import Input, Rule, SnippetBody, Structured


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
            symbols[tangent(i.name)] = value_symbol(rule, tangent(i.name))
    for name in [o.name for o in rule.outputs]:
        symbols[cotangent(name)] = value_symbol(rule, cotangent(name))
    return symbols


def snippet_names(rule: Rule) -> set[str]:
    """Every name the rule's Python bodies read or bind (their modules, the rules they call, their locals)."""
    bodies = [rule.forward, rule.jvp, rule.vjp, rule.checks.sample, rule.batching]
    if isinstance(rule.residuals, dict):
        bodies += list(rule.residuals.values())
    found: set[str] = set()
    for body in bodies:
        if not isinstance(body, SnippetBody):
            continue
        for text in (body.python, body.jax, body.torch, body.numpy):
            if text is None:
                continue
            try:
                tree = ast.parse("def _body():\n" + textwrap.indent(text.value, "    "))
            except (SyntaxError, RecursionError, MemoryError, ValueError):
                continue  # reported where the body is parsed
            found |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
            found |= {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)}
            found |= {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    return found - {"_body"}


def taken_names(rule: Rule) -> frozenset[str]:
    """Every name a rule's generated modules bind for the rule: its names, tangents and cotangents, structures,
    function and classes, and what its Python bodies call and bind (the modules they read are the generator's
    own: the bodies read them by their names)."""
    taken = {*symbols_of(rule), *(p.name for p in rule.parameters if isinstance(p, Structured))}
    # The rule's function and classes are module-level names generated functions call.
    taken |= {rule.name, rule.torch_class}
    taken |= {n.name for n in (rule.returns.named_tuples if rule.returns is not None else ())}
    return frozenset(taken | (snippet_names(rule) - names.MODULE_NAMES))


def own_names(rule: Rule) -> Mapping[str, str]:
    """How the rule's modules spell each name generated code gives its own things: its locals
    (`names.OWN_LOCALS`: `ctx`, `primals`, ...) and the modules, helpers and builtins it reads
    (`names.GLOBAL_NAMES`: `torch`, `plain`, `max`); `name`, or `name_` where the rule takes `name`."""
    taken = taken_names(rule)
    return MappingProxyType({own: names.own_local(own, taken) for own in sorted(names.OWN_LOCALS | names.GLOBAL_NAMES)})


def torch_context(rule: Rule) -> str:
    """The name of a torch Function's context parameter: `ctx`, renamed where one of the rule's names is `ctx`."""
    return own_names(rule)["ctx"]


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
