"""The points a rule is checked at: draws from its inputs' domains, and the structures its public function takes."""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from rulegen.check.outcome import CheckFailed, NotApplicable
from rulegen.spec import names
from rulegen.spec.rules import Input, Returned, Rule, SnippetBody, Structured

NUMPY_DTYPES = {"float": np.float64, "int": np.int64, "bool": np.bool_}


def sample(rule: Rule, rng: np.random.Generator) -> list[Any]:
    given: dict[str, Any] = {}
    if isinstance(rule.checks.sample, SnippetBody) and rule.checks.sample.numpy is not None:
        namespace: dict[str, Any] = {"np": np, "rng": rng}
        body = "def sample(rng):\n" + "".join(f"    {line}\n" for line in rule.checks.sample.numpy.value.splitlines())
        exec(compile(body, f"<{rule.name} checks.sample>", "exec"), namespace)
        given = dict(namespace["sample"](rng))
    values: list[Any] = []
    for spec in rule.inputs:
        if spec.name in given:
            value = given[spec.name]
            values.append(np.asarray(value, dtype=np.float64) if spec.dtype == "float" and not spec.static else value)
        elif spec.static:
            if spec.has_default:
                values.append(spec.default)
            elif rule.checks.points and spec.name in rule.checks.points[0].at:
                values.append(rule.checks.points[0].at[spec.name])
            else:
                raise NotApplicable(f"static input {spec.name!r} has no default, point or sample")
        else:
            values.append(_draw(spec, rng))
    if rule.domain is not None:
        _meet_joint_domain(rule, values, {spec.name for spec in rule.inputs if spec.name not in given}, rng)
    return values


def _draw(spec: Input, rng: np.random.Generator) -> Any:
    """Random values of an array input inside its domain."""
    lo, hi = spec.interval
    lo = lo if math.isfinite(lo) else (hi - 6 if math.isfinite(hi) else -3.0)
    hi = hi if math.isfinite(hi) else lo + 6
    margin = 0.02 * (hi - lo)
    if spec.dtype == "float":
        return rng.uniform(lo + margin, hi - margin, size=spec.shape)
    if spec.dtype == "complex":
        # The domain bounds the real and the imaginary part: a square of the complex plane.
        parts = rng.uniform(lo + margin, hi - margin, size=(2, *spec.shape))
        return parts[0] + 1j * parts[1]
    if spec.dtype == "bool":
        return rng.random(size=spec.shape) < 0.5
    return rng.integers(int(lo), int(hi) + 1, size=spec.shape)


#: Draws of the inputs before a rule's joint `domain` condition is given up on.
_JOINT_DOMAIN_DRAWS = 200


def joint_domain(rule: Rule) -> Callable[..., Any] | None:
    """The rule's `domain` condition on several inputs as a numpy function of every input; None if it has none."""

    from rulegen.derive.expr import lambdified, parse_expression
    from rulegen.derive.symbols import symbols_of

    if rule.domain is None:
        return None
    symbols = symbols_of(rule)
    indicator = parse_expression(rule.domain.value, symbols, rule.domain.loc, indicator=True)
    return lambdified([symbols[i.name] for i in rule.inputs], indicator, modules="numpy")


def _meet_joint_domain(rule: Rule, values: list[Any], drawn: set[str], rng: np.random.Generator) -> None:
    """Redraw, in place, the inputs drawn here at the sampled points where the rule's `domain` condition fails."""
    condition = joint_domain(rule)
    assert condition is not None
    arrays = [k for k, spec in enumerate(rule.inputs) if spec.name in drawn and not spec.static]
    for _ in range(_JOINT_DOMAIN_DRAWS):
        with np.errstate(all="ignore"):
            holds = np.asarray(condition(*values)) > 0.5
        if holds.all():
            return
        for k in arrays:
            fresh = _draw(rule.inputs[k], rng)
            failing = np.broadcast_to(~holds, np.shape(values[k])) if holds.ndim <= np.ndim(values[k]) else None
            values[k] = fresh if failing is None else np.where(failing, fresh, values[k])
    raise NotApplicable(
        f"the rule's domain `{rule.domain}` held at too few of the points drawn from its inputs' domains"
    )


def flat_call(rule: Rule, fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn`, a rule's public function, as a function of the rule's inputs returning its outputs in order.

    A structured rule's function takes named tuples, dicts and tuples and
    returns its structure: every check calls it through this, so the
    structures' code is checked with the rest, and a result of another
    structure than the rule's fails.
    """
    if not rule.structured:
        return fn

    def call(*values: Any) -> Any:
        arguments = structured_arguments(rule, values)
        found = fn(*arguments)
        if rule.returns is None:
            return found
        by_name = dict(_returned_leaves(rule.returns, found, "the result"))
        flat = tuple(by_name[o.name] for o in rule.outputs)
        return flat if len(flat) > 1 else flat[0]

    return call


_FIELD_TYPES: dict[tuple[str, ...], type] = {}


_LEFT_OUT = object()


def structured_arguments(rule: Rule, values: Sequence[Any]) -> list[Any]:
    """The public function's arguments for the rule's `values`: structures built around them.

    `values` has one per input, or fewer: the inputs left out take their defaults.
    """
    pending = iter(values)
    arguments: list[Any] = []
    for p in rule.parameters:
        if not isinstance(p, Structured):
            value = next(pending, _LEFT_OUT)
            if value is _LEFT_OUT:
                break
            arguments.append(value)
            continue
        leaves = {i.dict_key if p.kind == "keys" else i.name: next(pending) for i in p.leaves}
        if p.kind == "fields":
            key = (names.camel_case(p.name), *leaves)
            if key not in _FIELD_TYPES:
                _FIELD_TYPES[key] = collections.namedtuple(key[0], list(leaves))
            arguments.append(_FIELD_TYPES[key](**leaves))
        else:
            arguments.append(leaves if p.kind == "keys" else tuple(leaves.values()))
    return arguments


def _returned_leaves(returned: Returned, value: Any, where: str) -> Iterator[tuple[str, Any]]:
    """(output, its value) for each output in `value`, which must have the structure `returned` declares."""
    if returned.kind == "output":
        yield returned.name, value
        return
    if returned.kind == "tuple":
        if not isinstance(value, tuple) or len(value) != len(returned.items):
            raise CheckFailed(f"{where} is {type(value).__name__}, not a tuple of {len(returned.items)}")
        for k, ((_, item), part) in enumerate(zip(returned.items, value, strict=True)):
            yield from _returned_leaves(item, part, f"{where}[{k}]")
        return
    if returned.kind == "namedtuple":
        fields = [field for field, _ in returned.items]
        if type(value).__name__ != returned.name or getattr(value, "_fields", None) != tuple(fields):
            raise CheckFailed(f"{where} is {type(value).__name__}, not a named tuple {returned.name}{tuple(fields)}")
        for (field, item), part in zip(returned.items, value, strict=True):
            yield from _returned_leaves(item, part, f"{where}.{field}")
        return
    keys = [key for key, _ in returned.items]
    if not isinstance(value, dict) or list(value) != keys:
        raise CheckFailed(f"{where} is {type(value).__name__}, not a dict with keys {keys}")
    for key, item in returned.items:
        yield from _returned_leaves(item, value[key], f"{where}[{key!r}]")


def leaves_of_arguments(rule: Rule, arguments: Sequence[Any]) -> list[Any]:
    """The rule's inputs, one value each, from the public function's arguments (structures taken apart)."""
    leaves: list[Any] = []
    for p, a in zip(rule.parameters, arguments, strict=True):
        if not isinstance(p, Structured):
            leaves.append(a)
        elif p.kind == "fields":
            leaves += [getattr(a, i.name) for i in p.leaves]
        elif p.kind == "keys":
            leaves += [a[i.dict_key] for i in p.leaves]
        else:
            leaves += list(a)
    return leaves
