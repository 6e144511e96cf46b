"""Rules of one build read together: names they take from one another, the rules they call."""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterable, Iterator, Sequence

from pydantic import BaseModel

from rulegen.spec.errors import Loc, SpecError
from rulegen.spec.model import Rule
from rulegen.spec.normalise import Text


def clash_errors(rules: Sequence[tuple[str, str, Loc]]) -> list[SpecError]:
    """Rules of one build, as (function name, torch class name, location), that take another's name.

    The package exports every function and class by its name: a second one
    would silently stand for the first.
    """
    errors: list[SpecError] = []
    functions: dict[str, Loc] = {}
    classes: dict[str, tuple[str, Loc]] = {}
    for name, cls, loc in rules:
        if name in functions:
            errors.append(SpecError(loc, f"rule {name!r} is already defined at {functions[name]}"))
            continue
        functions[name] = loc
        if cls in classes:
            other, where = classes[cls]
            errors.append(
                SpecError(
                    loc,
                    f"rule {name!r} has the torch class name {cls!r} of rule {other!r} at {where}; "
                    "give one of them another `class_name`",
                )
            )
        classes.setdefault(cls, (name, loc))
    return errors


def _texts(value: object) -> Iterator[Text]:
    """Every text inside a body, a mapping of bodies or a model's fields."""
    if isinstance(value, Text):
        yield value
    elif isinstance(value, dict | list | tuple):
        for item in value.values() if isinstance(value, dict) else value:
            yield from _texts(item)
    elif isinstance(value, BaseModel):
        for field in type(value).model_fields:
            yield from _texts(getattr(value, field))


def read_names(rule: Rule) -> set[str]:
    """Every name the rule's expressions and bodies read: among them, the other rules it calls."""
    found: set[str] = set()
    for text in _texts([rule.forward, rule.derivatives, rule.jvp, rule.vjp, rule.residuals, rule.batching]):
        try:
            tree = ast.parse("def _body():\n" + textwrap.indent(text.value, "    "))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue  # the derivation reports it where it is
        found |= {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    return found


def callees(rules: Sequence[Rule], others: Iterable[Rule]) -> tuple[Rule, ...]:
    """The rules among `others` that `rules` call, directly or through one another."""
    available = {r.name: r for r in others}
    for rule in rules:
        available.pop(rule.name, None)
    wanted: dict[str, Rule] = {}
    pending = list(rules)
    while pending:
        for name in read_names(pending.pop()) & available.keys() - wanted.keys():
            wanted[name] = available[name]
            pending.append(available[name])
    return tuple(wanted.values())
