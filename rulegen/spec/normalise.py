"""The forms a rule file may write a field in, brought to the one the models validate.

YAML pre-normalisation: each function here is a pydantic `BeforeValidator`
(or a `mode="before"` model validator's helper) of `rulegen.spec.model`,
taking what the YAML reader made (located strings, mappings and lists,
`rulegen.spec.source`) to the plain form its field holds, or raising the
ValueError that becomes the error at its place.  `Text` and `Returned` are
the values it makes: a located string, and the structure a rule returns.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass
from typing import Any, Literal

from rulegen.spec import names
from rulegen.spec.errors import Loc
from rulegen.spec.source import YamlList, YamlMap

#: Keys that mark a body's form (names.RESERVED holds them too).
SNIPPET_KEYS = ("python", "jax", "torch", "numpy")

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

_SNAKE = re.compile(r"^[a-z_][a-z0-9_]*$")

UNKNOWN = Loc("<unknown>")


@dataclass(frozen=True)
class Text:
    """A string from a rule file and where its first character is."""

    value: str
    loc: Loc = UNKNOWN

    def __str__(self) -> str:
        return self.value


def to_text(value: object) -> Text:
    if isinstance(value, Text):
        return value
    if isinstance(value, str):
        return Text(str(value), getattr(value, "loc", UNKNOWN))
    # A bare number is an expression too (`x: 1` for a constant partial).
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = int(value) if isinstance(value, int) else float(value)
        return Text(repr(number), getattr(value, "loc", UNKNOWN))
    raise ValueError(f"expected an expression string, got {type(value).__name__}")


def _usable(value: str, what: str) -> str:
    why = names.unusable(value)
    if why is not None:
        raise ValueError(f"{what} {value!r} {why}; choose another name")
    return str(value)


def to_name(value: object) -> str:
    if not isinstance(value, str) or not _IDENTIFIER.match(value) or keyword.iskeyword(value):
        raise ValueError(f"{value!r} is not a valid Python identifier")
    return _usable(value, "the name")


def to_rule_name(value: object) -> str:
    if not isinstance(value, str) or not _SNAKE.match(value) or keyword.iskeyword(value):
        raise ValueError(f"a rule name is a snake_case identifier (it names a Python function), not {value!r}")
    _usable(value, "the rule name")
    if value in names.MODULE_NAMES:
        # Python bodies call the rules of their build by name: a body reading the module would call the rule.
        raise ValueError(f"the rule name {value!r} is the name Python bodies use for a module; choose another name")
    _usable(names.camel_case(value), f"the torch class name of {value!r},")
    return str(value)


_TARGET = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def to_target(value: object) -> str:
    """`MODULE:ATTR`, an implementation to audit (a dotted module, a colon, a dotted attribute)."""
    if not isinstance(value, str) or not _TARGET.fullmatch(value):
        raise ValueError(f"an implementation is MODULE:ATTR (a dotted module, a colon, a name), not {value!r}")
    return value


def to_class_name(value: object) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[A-Z][A-Za-z0-9]*", value):
        raise ValueError(f"class_name is a CamelCase identifier, not {value!r}")
    return _usable(value, "class_name")


def to_default(value: object) -> object:
    """A default as the plain Python value generated code spells: a list becomes a (hashable) tuple."""
    if value is None or isinstance(value, bool):
        return value
    for kind in (int, float, str):
        if isinstance(value, kind):
            return kind(value)
    if isinstance(value, list):
        return tuple(to_default(item) for item in value)
    raise ValueError("a default is a number, a string, a bool, null, or a list of these")


def to_assumptions(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


def updated(data: dict[Any, Any], **changes: Any) -> dict[Any, Any]:
    """`data` with `changes`; a mapping read from YAML stays one, keeping where it and its keys are.

    A validator that rebuilt it as a plain dict dropped the rule's location:
    a complex rule defined twice was 'already defined at <unknown>:1:1'.
    """
    if not isinstance(data, YamlMap):
        return {**data, **changes}
    updated = YamlMap({**data, **changes})
    updated.loc, updated.key_locs, updated.value_locs = data.loc, data.key_locs, data.value_locs
    return updated


def _located_sympy(value: Any) -> dict[str, Any]:
    """`{sympy: value}`, located where `value` is, so that errors about the body point at it."""
    body: dict[str, Any] = {"sympy": value}
    loc = getattr(value, "loc", None)
    if loc is not None:
        body = YamlMap(body)
        body.loc = loc
        body.key_locs = {"sympy": loc}
        body.value_locs = {"sympy": loc}
    return body


def to_body(value: Any) -> Any:
    if isinstance(value, str):
        return _located_sympy(value)
    if isinstance(value, dict):
        if "sympy" in value:
            return value
        if value and all(k in SNIPPET_KEYS for k in value):
            return value
        if not value:
            raise ValueError("an empty body")
        if any(k in SNIPPET_KEYS for k in value):
            extra = sorted(k for k in value if k not in SNIPPET_KEYS)
            raise ValueError(f"a snippet body takes only {', '.join(SNIPPET_KEYS)}; got {extra}")
        return _located_sympy(value)
    raise ValueError("a body is an expression string or a mapping")


def named_entries(value: Any) -> Any:
    """`[x, y]` or `{x: {...}, y: {...}}` -> a list of mappings with names."""
    if isinstance(value, list):
        entries = []
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise ValueError(f"expected a name, got {item!r}; give options as a mapping name -> options")
            entry: dict[str, Any] = {"name": item}
            if isinstance(value, YamlList):
                entry["loc"] = value.item_locs[i]
            entries.append(entry)
        return entries
    if isinstance(value, dict):
        entries = []
        for key, options in value.items():
            if options is None:
                options = {}
            if not isinstance(options, dict):
                raise ValueError(f"options of {key!r} must be a mapping")
            entry = {"name": key, **options}
            if isinstance(value, YamlMap):
                entry["loc"] = value.key_locs[key]
            entries.append(entry)
        return entries
    raise ValueError("expected a list of names or a mapping of name -> options")


#: How a structured argument holds its arrays: a named tuple's fields, a dict's keys, a tuple's items.
StructureKind = Literal["fields", "keys", "items"]

STRUCTURE_KINDS: tuple[StructureKind, ...] = ("fields", "keys", "items")


@dataclass(frozen=True)
class Returned:
    """The structure the public function returns its outputs in: an output, or a tuple, dict or named tuple of them.

    A named tuple is a class the generated module defines (`typing.NamedTuple`), `name` its
    class name and its items' keys its fields.
    """

    kind: Literal["output", "tuple", "dict", "namedtuple"]
    name: str = ""  # the output, for kind "output"; the class, for kind "namedtuple"
    items: tuple[tuple[str, Returned], ...] = ()  # (key, structure); keys of a tuple are ""
    loc: Loc = UNKNOWN

    @property
    def outputs(self) -> tuple[Returned, ...]:
        """The outputs in it, in order (the order of the flat outputs it is built from)."""
        if self.kind == "output":
            return (self,)
        return tuple(leaf for _, item in self.items for leaf in item.outputs)

    @property
    def named_tuples(self) -> tuple[Returned, ...]:
        """The named tuples in it, each before those it holds (the order their classes are defined in)."""
        own = (self,) if self.kind == "namedtuple" else ()
        return own + tuple(n for _, item in self.items for n in item.named_tuples)


_MAX_RETURN_DEPTH = 8


def to_returned(value: Any, depth: int = 0) -> Returned:
    loc = getattr(value, "loc", UNKNOWN)
    if depth > _MAX_RETURN_DEPTH:
        raise ValueError(f"`returns` nests deeper than {_MAX_RETURN_DEPTH} levels")
    if isinstance(value, str):
        return Returned("output", name=to_name(value), loc=loc)
    if isinstance(value, list) and value:
        return Returned("tuple", items=tuple(("", to_returned(v, depth + 1)) for v in value), loc=loc)
    if isinstance(value, dict) and NAMED_TUPLE_KEY in value:
        return _to_named_tuple(value, depth, loc)
    if isinstance(value, dict) and value:
        for key in value:
            if not isinstance(key, str):
                raise ValueError(f"a dict returned has string keys, not {key!r}")
        return Returned("dict", items=tuple((k, to_returned(v, depth + 1)) for k, v in value.items()), loc=loc)
    raise ValueError(
        "`returns` is an output's name, a non-empty list (a tuple), a non-empty mapping (a dict) "
        f"or a named tuple (`{{namedtuple: Name, fields: [...]}}`), not {value!r}"
    )


#: The key that makes a mapping in `returns` a named tuple rather than a dict: `{namedtuple: Polar, fields: [r, t]}`.
NAMED_TUPLE_KEY = "namedtuple"


def _to_named_tuple(value: dict[Any, Any], depth: int, loc: Loc) -> Returned:
    """A named tuple of `returns`: its class name, and fields named as outputs (a list) or given structures."""
    extra = sorted(str(k) for k in value if k not in (NAMED_TUPLE_KEY, "fields"))
    if extra:
        raise ValueError(f"a named tuple takes `namedtuple` (its class name) and `fields`, not {extra}")
    name, fields = value[NAMED_TUPLE_KEY], value.get("fields")
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"a named tuple's class name is a Python identifier, not {name!r}")
    why = names.unusable(name)
    if why is not None:
        raise ValueError(f"a named tuple's class name {name!r} {why}")
    if isinstance(fields, list) and fields and all(isinstance(f, str) for f in fields):
        items = tuple((f, to_returned(f, depth + 1)) for f in fields)
    elif isinstance(fields, dict) and fields:
        items = tuple((str(f), to_returned(v, depth + 1)) for f, v in fields.items())
    else:
        raise ValueError(
            "a named tuple's `fields` is a non-empty list of outputs (each field named as its output) "
            f"or a mapping of field names to what they hold, not {fields!r}"
        )
    for field, _ in items:
        if not field.isidentifier() or keyword.iskeyword(field) or field.startswith("_"):
            raise ValueError(f"a named tuple's field is an identifier not starting with `_`, not {field!r}")
    return Returned("namedtuple", name=name, items=items, loc=loc)


def as_float64(value: float) -> float:
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"an integer of {int(value).bit_length()} bits is beyond float64's range") from None


def float64_data(value: Any) -> Any:
    """Numbers of a check (nested in lists, or by name) must be float64 values; anything else passes."""
    if isinstance(value, dict | list):
        for item in value.values() if isinstance(value, dict) else value:
            float64_data(item)
    elif isinstance(value, int) and not isinstance(value, bool):
        as_float64(value)
    return value


def float64_array(value: Any) -> Any:
    """A known value of a point (outputs, gradients, tangents): a number, or lists of numbers nested."""
    if isinstance(value, list):
        for item in value:
            float64_array(item)
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"a point's known values are numbers or lists of numbers, not {value!r}")
    elif isinstance(value, int):
        as_float64(value)
    return value


def declares_complex(inputs: Any, depth: int = 0) -> bool:
    """Whether raw `inputs` (a list of names, or options by name, structures nested) declare a complex one."""
    if not isinstance(inputs, dict) or depth > 2:
        return False
    for options in inputs.values():
        if not isinstance(options, dict):
            continue
        if options.get("dtype") == "complex":
            return True
        if any(declares_complex(options.get(k), depth + 1) for k in STRUCTURE_KINDS):
            return True
    return False


def complex_by_default(outputs: Any, returns: Any) -> Any:
    """Raw `outputs` with `dtype: complex` where an output declares no dtype of its own."""
    if outputs is None:
        named = outputs_returned(returns) if returns is not None else None
        outputs = named if named is not None else ["out"]
    if isinstance(outputs, list) and all(isinstance(n, str) for n in outputs):
        located = YamlMap({n: YamlMap({"dtype": "complex"}) for n in outputs})
        located.loc = getattr(outputs, "loc", UNKNOWN)
        item_locs = getattr(outputs, "item_locs", [located.loc] * len(outputs))
        located.key_locs = dict(zip(outputs, item_locs, strict=True))
        located.value_locs = dict(located.key_locs)
        for n, loc in located.key_locs.items():
            located[n].loc, located[n].key_locs, located[n].value_locs = loc, {}, {}
        return located
    if isinstance(outputs, dict):
        completed = YamlMap(
            {
                n: {"dtype": "complex", **o} if isinstance(o, dict) else (o if o is not None else {"dtype": "complex"})
                for n, o in outputs.items()
            }
        )
        completed.__dict__.update(getattr(outputs, "__dict__", {}))
        return completed
    return outputs


def outputs_returned(returns: Any) -> YamlList | None:
    """The outputs a raw `returns` names, in its order and at its places (None where it is malformed:
    its own validation says how)."""
    try:
        leaves = to_returned(returns).outputs
    except ValueError:
        return None
    outputs = YamlList(leaf.name for leaf in leaves)
    outputs.loc = getattr(returns, "loc", UNKNOWN)
    outputs.item_locs = [leaf.loc for leaf in leaves]
    return outputs
