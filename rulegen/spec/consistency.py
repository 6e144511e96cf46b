"""What the models cannot check field by field: a rule's fields against one another.

Names used twice or clashing with those generated code derives, defaults
out of order, the unions of `derivatives`, `residuals` and `returns` in
forms later stages cannot read, and what a complex (holomorphic) rule asks.
"""

from __future__ import annotations

from collections.abc import Sequence

from rulegen.spec import names
from rulegen.spec.errors import Loc, SpecError
from rulegen.spec.model import (
    Rule,
    SnippetBody,
    Structured,
    SympyBody,
)
from rulegen.spec.normalise import (
    UNKNOWN,
    Text,
)


def consistency_errors(rule: Rule) -> list[SpecError]:
    """What pydantic cannot see field by field: names clashing, defaults out of order."""
    errors: list[SpecError] = []
    places: dict[str, Loc] = {}
    named = [(p.name, p.loc) for p in rule.parameters if isinstance(p, Structured)]
    # The default output `out` is written nowhere: it stands where the forward does.
    implied = getattr(rule.forward, "loc", rule.loc)
    named += [(i.name, i.loc) for i in rule.inputs]
    named += [(o.name, implied if o.loc == UNKNOWN else o.loc) for o in rule.outputs]
    named += [(n, rule.loc) for n in rule.residual_names]
    # A named tuple's class is a module-level name of the generated modules, beside the rule's function.
    named += [(n.name, n.loc) for n in (rule.returns.named_tuples if rule.returns is not None else ())]
    for name, loc in named:
        if name in places:
            default = " (the forward's one output is named `out` unless `outputs` names it)" * (loc == implied)
            errors.append(SpecError(loc, f"the name {name!r} is used twice (first at {places[name]}){default}"))
        places.setdefault(name, loc)
    errors += _generated_name_errors(rule, named, places)
    errors += [
        SpecError(
            p.loc, f"{p.name!r}: `key` names the dict key of an array in a `keys` structure; this input stands alone"
        )
        for p in rule.parameters
        if not isinstance(p, Structured) and p.key is not None
    ]
    errors += _union_errors(rule)
    errors += _returns_errors(rule)
    errors += _complex_errors(rule)
    defaulted = False
    for i in rule.inputs:
        if i.has_default:
            defaulted = True
        elif defaulted:
            errors.append(
                SpecError(
                    i.loc, f"input {i.name!r} has no default but follows one that has: inputs with defaults come last"
                )
            )
    return errors


def _complex_errors(rule: Rule) -> list[SpecError]:
    """A complex rule is holomorphic, written in sympy, in complex arrays only: what its derivatives assume."""
    if not rule.complex:
        return []
    errors: list[SpecError] = []
    bodies = [("forward", rule.forward), ("jvp", rule.jvp), ("vjp", rule.vjp), *rule.residual_bodies.items()]
    for role, body in bodies:
        if isinstance(body, SnippetBody):
            errors.append(
                SpecError(
                    body.loc,
                    f"a complex rule's {role} is a sympy expression: its derivatives are derived "
                    "as complex derivatives (holomorphic functions only)",
                )
            )
    for i in rule.inputs:
        if i.dtype == "float" and not i.static:
            errors.append(
                SpecError(
                    i.loc,
                    f"{i.name!r} is real in a rule with complex inputs: declare it `dtype: complex` "
                    "(a holomorphic rule's arrays are all complex)",
                )
            )
    for o in rule.outputs:
        if o.dtype == "float":
            errors.append(
                SpecError(
                    o.loc,
                    f"{o.name!r} is real: a real output of complex inputs is not holomorphic, and so has "
                    "no complex derivative",
                )
            )
    return errors


def _returns_errors(rule: Rule) -> list[SpecError]:
    """`returns` must hold every output once, and nothing else."""
    if rule.returns is None:
        return []
    errors: list[SpecError] = []
    outputs = {o.name for o in rule.outputs}
    seen: set[str] = set()
    for leaf in rule.returns.outputs:
        if leaf.name not in outputs:
            errors.append(SpecError(leaf.loc, f"`returns` names {leaf.name!r}, which is no output of the rule"))
        elif leaf.name in seen:
            errors.append(SpecError(leaf.loc, f"`returns` holds the output {leaf.name!r} twice"))
        seen.add(leaf.name)
    missing = [o for o in rule.outputs if o.name not in seen]
    if missing:
        errors.append(
            SpecError(
                rule.returns.loc,
                f"`returns` leaves out the output{'s' * (len(missing) > 1)} {', '.join(repr(o.name) for o in missing)}",
            )
        )
    return errors


def _union_errors(rule: Rule) -> list[SpecError]:
    """Forms of `derivatives` and `residuals` that `Rule.partials` and `Rule.residual_bodies` cannot normalise."""
    errors: list[SpecError] = []
    flat = [v for v in (rule.derivatives or {}).values() if isinstance(v, Text)]
    if flat and (len(flat) != len(rule.derivatives or {}) or len(rule.outputs) != 1):
        errors.append(
            SpecError(flat[0].loc, "with several outputs, `derivatives` maps each output to {input: partial}")
        )
    if rule.returned_residuals and isinstance(rule.forward, SympyBody):
        errors.append(SpecError(rule.loc, "residuals returned by the forward body need a snippet forward"))
    body = rule.forward
    if rule.structured and isinstance(body, SnippetBody) and body.torch is not None and not (body.python or body.jax):
        errors.append(
            SpecError(
                body.loc,
                "a torch-only rule takes and returns flat arrays (JAX calls its torch function through "
                "callbacks); give a `python` or `jax` body too, or drop the structures",
            )
        )
    return errors


def _generated_name_errors(rule: Rule, named: Sequence[tuple[str, Loc]], places: dict[str, Loc]) -> list[SpecError]:
    """A rule's names against those generated code derives from them (see rulegen.spec.names)."""
    errors: list[SpecError] = []
    for name, loc in named:
        if name in (rule.name, rule.torch_class):
            errors.append(SpecError(loc, f"{name!r} is the rule's own function or class name; choose another name"))
    derived: dict[str, str] = {}
    for generated, origin in names.derived_names(rule.name, places, rule.residual_names):
        if generated in places and generated != origin:
            errors.append(
                SpecError(
                    places[generated],
                    f"{generated!r} clashes with the name generated code derives from {origin!r}; choose another name",
                )
            )
        elif derived.get(generated, origin) != origin:
            other = derived[generated]
            user = origin if origin in places else other
            errors.append(
                SpecError(
                    places.get(user, rule.loc),
                    f"{user!r} gives generated code the name {generated!r}, which it also derives from "
                    f"{other if user == origin else origin!r}; choose another name",
                )
            )
        derived.setdefault(generated, origin)
    return errors
