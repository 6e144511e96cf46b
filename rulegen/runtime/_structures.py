"""Structured arguments taken apart for both backends: a dict by its keys, an object by its fields.

The refusals name the rule, its structured argument and what was expected,
not a KeyError or AttributeError from inside.  Under jit they run when
tracing, at no cost to the computation.
"""

from collections.abc import Sequence
from typing import Any


def unpack_keys(rule: str, argument: str, value: Any, keys: Sequence[str]) -> tuple[Any, ...]:
    """The values of the dict `value` at `keys`, refused unless its keys are exactly those.

    The refusals name the rule and its structured argument, not a KeyError
    from inside.
    """
    listed = ", ".join(map(repr, keys))
    expected = f"{rule}: argument {argument} must be a dict with exactly the keys {listed}"
    try:
        values = tuple(value[key] for key in keys)
    except (KeyError, TypeError) as error:
        raise ValueError(f"{expected}: {error!r}") from None
    if value.keys() != set(keys):
        raise ValueError(f"{expected}, not {[*value]}")
    return values


def unpack_fields(rule: str, argument: str, value: Any, fields: Sequence[str]) -> tuple[Any, ...]:
    """The attributes `fields` of `value` (a named tuple or any object with them)."""
    try:
        return tuple(getattr(value, field) for field in fields)
    except AttributeError as error:
        listed = ", ".join(fields)
        raise TypeError(
            f"{rule}: argument {argument} must have the fields {listed}"
            f" (a named tuple or any object with them): {error}"
        ) from None


def unpack_tuple(rule: str, argument: str, value: Any, names: Sequence[str]) -> tuple[Any, ...]:
    """The items of `value`, a tuple of as many as `names`."""
    try:
        values = tuple(value)
    except TypeError as error:
        problem = str(error)
    else:
        if len(values) == len(names):
            return values
        problem = f"expected {len(names)} values, got {len(values)}"
    raise TypeError(
        f"{rule}: argument {argument} must be a tuple of {len(names)}: ({', '.join(names)})"
        f": {problem}"
    )
