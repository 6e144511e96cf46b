"""Stage 1: read rule files into validated, immutable models.

The pydantic models here mirror the YAML format (so `rulegen schema` can print
its JSON Schema and validation errors point at YAML paths) and carry the
source location of every object and every text, so that later stages report
problems at `file:line:col` without reaching back into the YAML.
"""

from __future__ import annotations

import ast
import difflib
import functools
import hashlib
import keyword
import math
import re
import textwrap
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    ValidationError,
    WithJsonSchema,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import ErrorDetails

from rulegen.spec import names
from rulegen.spec.errors import Loc, SpecError, SpecErrors
from rulegen.spec.source import YamlList, YamlMap, load_yaml, locate

#: Keys that mark a body's form (names.RESERVED holds them too).
SNIPPET_KEYS = ("python", "jax", "torch", "numpy")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SNAKE = re.compile(r"^[a-z_][a-z0-9_]*$")
_UNKNOWN = Loc("<unknown>")


@dataclass(frozen=True)
class Text:
    """A string from a rule file and where its first character is."""

    value: str
    loc: Loc = _UNKNOWN

    def __str__(self) -> str:
        return self.value


def _to_text(value: object) -> Text:
    if isinstance(value, Text):
        return value
    if isinstance(value, str):
        return Text(str(value), getattr(value, "loc", _UNKNOWN))
    # A bare number is an expression too (`x: 1` for a constant partial).
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = int(value) if isinstance(value, int) else float(value)
        return Text(repr(number), getattr(value, "loc", _UNKNOWN))
    raise ValueError(f"expected an expression string, got {type(value).__name__}")


def _usable(value: str, what: str) -> str:
    why = names.unusable(value)
    if why is not None:
        raise ValueError(f"{what} {value!r} {why}; choose another name")
    return str(value)


def _to_name(value: object) -> str:
    if not isinstance(value, str) or not _IDENTIFIER.match(value) or keyword.iskeyword(value):
        raise ValueError(f"{value!r} is not a valid Python identifier")
    return _usable(value, "the name")


def _to_rule_name(value: object) -> str:
    if not isinstance(value, str) or not _SNAKE.match(value) or keyword.iskeyword(value):
        raise ValueError(f"a rule name is a snake_case identifier (it names a Python function), not {value!r}")
    _usable(value, "the rule name")
    if value in names.MODULE_NAMES:
        # Python bodies call the rules of their build by name: a body reading the module would call the rule.
        raise ValueError(f"the rule name {value!r} is the name Python bodies use for a module; choose another name")
    _usable(names.camel_case(value), f"the torch class name of {value!r},")
    return str(value)


def _to_class_name(value: object) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[A-Z][A-Za-z0-9]*", value):
        raise ValueError(f"class_name is a CamelCase identifier, not {value!r}")
    return _usable(value, "class_name")


def _to_default(value: object) -> object:
    """A default as the plain Python value generated code spells: a list becomes a (hashable) tuple."""
    if value is None or isinstance(value, bool):
        return value
    for kind in (int, float, str):
        if isinstance(value, kind):
            return kind(value)
    if isinstance(value, list):
        return tuple(_to_default(item) for item in value)
    raise ValueError("a default is a number, a string, a bool, null, or a list of these")


TextField = Annotated[Text, BeforeValidator(_to_text, json_schema_input_type=str | float | int)]
Name = Annotated[str, BeforeValidator(_to_name, json_schema_input_type=str)]
Number = float | int

#: Sign assumptions an input may carry (`assume:`), with the interval
#: `rulegen test` samples when the rule gives no `domain` of its own.
ASSUMPTION_DOMAINS: dict[str, tuple[float, float]] = {
    "positive": (0.25, 3.0),
    "nonnegative": (0.0, 3.0),
    "negative": (-3.0, -0.25),
    "nonpositive": (-3.0, 0.0),
    "nonzero": (-3.0, 3.0),
}
Assumption = Literal["positive", "nonnegative", "negative", "nonpositive", "nonzero"]
#: Each assumption as the condition on the input it names, for the generated docstrings.
ASSUMPTION_CONDITIONS: dict[str, str] = {
    "positive": "{} > 0",
    "nonnegative": "{} >= 0",
    "negative": "{} < 0",
    "nonpositive": "{} <= 0",
    "nonzero": "{} != 0",
}


def _to_assumptions(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


def _holds(assumption: str, domain: Domain) -> bool:
    lo, hi = domain.lo, domain.hi
    return {
        "positive": lo > 0 or (lo == 0 and domain.lo_open),
        "nonnegative": lo >= 0,
        "negative": hi < 0 or (hi == 0 and domain.hi_open),
        "nonpositive": hi <= 0,
        "nonzero": True,
    }[assumption]


def _updated(data: dict[Any, Any], **changes: Any) -> dict[Any, Any]:
    """`data` with `changes`; a mapping read from YAML stays one, keeping where it and its keys are.

    A validator that rebuilt it as a plain dict dropped the rule's location:
    a complex rule defined twice was 'already defined at <unknown>:1:1'.
    """
    if not isinstance(data, YamlMap):
        return {**data, **changes}
    updated = YamlMap({**data, **changes})
    updated.loc, updated.key_locs, updated.value_locs = data.loc, data.key_locs, data.value_locs
    return updated


class Node(BaseModel):
    """A YAML mapping: frozen, strict about keys, and aware of where it is."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    loc: SkipJsonSchema[Loc] = Field(default=_UNKNOWN, exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _take_loc(cls, data: Any) -> Any:
        if isinstance(data, YamlMap):
            if "loc" in data:
                raise ValueError("unknown key 'loc'")
            return {**data, "loc": data.loc}
        return data


# ---------------------------------------------------------------- bodies


class SympyBody(Node):
    """One sympy expression, or one per output (or per input for a VJP)."""

    sympy: TextField | dict[Name, TextField]

    @property
    def exprs(self) -> dict[str | None, Text]:
        if isinstance(self.sympy, Text):
            return {None: self.sympy}
        return {name: text for name, text in self.sympy.items()}


class SnippetBody(Node):
    """Python function bodies: array-API (`python`), per backend, or host (`numpy`)."""

    python: TextField | None = None
    jax: TextField | None = None
    torch: TextField | None = None
    numpy: TextField | None = None

    @model_validator(mode="after")
    def _one_form(self) -> SnippetBody:
        if self.numpy is not None and any((self.python, self.jax, self.torch)):
            raise ValueError("a `numpy` body runs outside autodiff and cannot sit beside other bodies")
        if not any((self.python, self.jax, self.torch, self.numpy)):
            raise ValueError("an empty body")
        # A torch-only body is usable from JAX through a callback (a later
        # stage decides); a JAX-only body has no torch counterpart.
        if self.python is None and self.numpy is None and self.jax is not None and self.torch is None:
            raise ValueError("a `jax` body needs a `torch` (or `python`) body beside it")
        return self


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


def _to_body(value: Any) -> Any:
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


# Tags of the body union; pydantic puts them in error paths, where they are no YAML key.
SYMPY_TAG, SNIPPET_TAG = "<sympy body>", "<snippet body>"


def _body_form(value: Any) -> str:
    return SYMPY_TAG if isinstance(value, dict) and "sympy" in value else SNIPPET_TAG


Body = Annotated[
    Annotated[SympyBody, Tag(SYMPY_TAG)] | Annotated[SnippetBody, Tag(SNIPPET_TAG)],
    Discriminator(_body_form),
    BeforeValidator(_to_body, json_schema_input_type=str | SympyBody | SnippetBody | dict[str, str]),
]


# ---------------------------------------------------------------- inputs and outputs


class Domain(Node):
    """An input's domain as bounds, each open (`gt`, `lt`) or closed (`ge`, `le`), less excluded points.

    A bound left out is that end of the float line (the largest finite
    float of the dtype sampled): `{}` is the whole line, `{gt: 0}` the
    positive floats, `{exclude: [0]}` every float but zero.
    """

    gt: Number | None = None
    ge: Number | None = None
    lt: Number | None = None
    le: Number | None = None
    exclude: tuple[Number, ...] = ()

    @model_validator(mode="after")
    def _one_bound_per_end(self) -> Domain:
        if self.gt is not None and self.ge is not None:
            raise ValueError("a domain takes `gt` or `ge` for its lower end, not both")
        if self.lt is not None and self.le is not None:
            raise ValueError("a domain takes `lt` or `le` for its upper end, not both")
        for bound in (self.gt, self.ge, self.lt, self.le, *self.exclude):
            if bound is not None and not math.isfinite(_as_float64(bound)):
                raise ValueError(f"a domain's bounds and excluded points are finite numbers, not {bound}")
        if not (self.lo < self.hi or (self.lo == self.hi and not (self.lo_open or self.hi_open))):
            raise ValueError(f"domain {self.describe()} is empty")
        return self

    @property
    def lo(self) -> float:
        bound = self.gt if self.gt is not None else self.ge
        return -math.inf if bound is None else _as_float64(bound)

    @property
    def hi(self) -> float:
        bound = self.lt if self.lt is not None else self.le
        return math.inf if bound is None else _as_float64(bound)

    @property
    def lo_open(self) -> bool:
        return self.gt is not None

    @property
    def hi_open(self) -> bool:
        return self.lt is not None

    def describe(self) -> str:
        """`(0, inf]`-style, with the excluded points: for messages and tables."""
        text = f"{'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}{')' if self.hi_open else ']'}"
        return text + "".join(f" \\ {{{_as_float64(x):g}}}" for x in self.exclude)


class Input(Node):
    """One argument of the generated function."""

    name: Name
    diff: bool = True
    static: bool = False
    default: Annotated[Any, BeforeValidator(_to_default)] = None
    has_default: SkipJsonSchema[bool] = Field(default=False, exclude=True)
    # Whether the rule wrote the domain, rather than leaving the default or its `assume`'s interval.
    domain_given: SkipJsonSchema[bool] = Field(default=False, exclude=True)
    dtype: Annotated[
        Literal["float", "complex", "int", "bool"],
        Field(description="`complex`: a holomorphic rule's complex argument (its outputs are complex too)"),
    ] = "float"
    domain: Annotated[
        tuple[Number, Number] | Domain,
        Field(
            description="where `rulegen test` and `rulegen accuracy` sample this input: `[lo, hi]`, or bounds "
            "(`{gt: 0, le: 1, exclude: [0.5]}`; a bound left out is the float line's end); "
            "it never changes the generated code"
        ),
    ] = (-3.0, 3.0)
    assume: Annotated[
        tuple[Assumption, ...],
        BeforeValidator(_to_assumptions, json_schema_input_type=Assumption | list[Assumption]),
        Field(
            description="what the rule's author vouches for about this input: sympy may simplify with it, "
            "and calling the function where it fails is the caller's error"
        ),
    ] = ()
    shape: tuple[Annotated[int, Field(ge=0)], ...] = (3, 4)
    key: Annotated[
        Annotated[str, Field(min_length=1)] | None,
        Field(
            description="in a `keys` structure, the dict key holding this array where it is no Python name "
            "(`layer.weight`); by default the array's own name"
        ),
    ] = None

    @property
    def dict_key(self) -> str:
        """The key of a `keys` structure that holds this array."""
        return self.name if self.key is None else self.key

    @model_validator(mode="before")
    @classmethod
    def _note_default(cls, data: Any) -> Any:
        if isinstance(data, dict) and "default" in data:
            data = _updated(data, has_default=True)
        if isinstance(data, dict) and "domain" in data:
            data = _updated(data, domain_given=True)
        if isinstance(data, dict) and "domain" not in data and data.get("assume"):
            # Sampling must respect what the rule assumes; the tightest assumption given decides.
            assumed = _to_assumptions(data["assume"])
            domains = [ASSUMPTION_DOMAINS[a] for a in assumed if isinstance(a, str) and a in ASSUMPTION_DOMAINS]
            if domains:
                data = _updated(data, domain=(max(lo for lo, _ in domains), min(hi for _, hi in domains)))
        return data

    @model_validator(mode="after")
    def _consistent(self) -> Input:
        lo, hi = self.interval
        if isinstance(self.domain, tuple):
            if not lo < hi:
                raise ValueError(f"domain [{lo}, {hi}] is empty")
            if not math.isfinite(hi - lo):
                raise ValueError(
                    f"domain [{lo}, {hi}] is not a finite float64 interval (its width must be below 1.8e308; "
                    "bounds such as `{gt: 0}` reach the end of the float line)"
                )
        if self.static and "diff" in self.model_fields_set and self.diff:
            raise ValueError("a static input is never differentiated; drop `diff: true`")
        if self.dtype == "complex" and self.assume:
            raise ValueError("a complex input takes no sign assumptions (`assume`)")
        for assumption in self.assume:
            if not _holds(assumption, self.bounds):
                where = self.bounds.describe() if isinstance(self.domain, Domain) else f"[{lo}, {hi}]"
                raise ValueError(f"domain {where} has points where `assume: {assumption}` fails")
        return self

    @property
    def interval(self) -> tuple[float, float]:
        """The domain's two ends (open or closed; infinite where a bound form leaves one out)."""
        if isinstance(self.domain, Domain):
            return self.domain.lo, self.domain.hi
        lo, hi = self.domain
        return _as_float64(lo), _as_float64(hi)

    @property
    def bounds(self) -> Domain:
        """The domain as bounds: `[lo, hi]` is `{ge: lo, le: hi}`."""
        if isinstance(self.domain, Domain):
            return self.domain
        lo, hi = self.interval
        return Domain(ge=lo, le=hi)

    @property
    def differentiable(self) -> bool:
        return self.diff and not self.static and self.dtype in ("float", "complex")


class Output(Node):
    """One result of the generated function."""

    name: Name
    diff: bool = True
    dtype: Literal["float", "complex", "int", "bool"] = "float"

    @property
    def differentiable(self) -> bool:
        return self.diff and self.dtype in ("float", "complex")


class InputOptions(Input):
    """An input's options in the mapping form `{x: {...}}`: the key is its name."""

    name: SkipJsonSchema[Name] = ""


class OutputOptions(Output):
    """An output's options in the mapping form `{y: {...}}`: the key is its name."""

    name: SkipJsonSchema[Name] = ""


def _named_entries(value: Any) -> Any:
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


InputList = Annotated[
    tuple[Input, ...],
    BeforeValidator(_named_entries, json_schema_input_type=list[str] | dict[str, InputOptions | None]),
]
OutputList = Annotated[
    tuple[Output, ...],
    BeforeValidator(_named_entries, json_schema_input_type=list[str] | dict[str, OutputOptions | None]),
]


# ---------------------------------------------------------------- structures

#: How a structured argument holds its arrays: a named tuple's fields, a dict's keys, a tuple's items.
StructureKind = Literal["fields", "keys", "items"]
STRUCTURE_KINDS: tuple[StructureKind, ...] = ("fields", "keys", "items")


class Structured(Node):
    """An argument that is a named tuple, dict or tuple of array inputs (`pt: {fields: [x, y]}`).

    Its arrays are inputs of the rule like any other (bodies read `x` and
    `y`); only the public function sees the structure, taking it apart on
    the way in, so every transform of either framework sees plain arrays.
    """

    name: Name
    fields: InputList | None = None
    keys: InputList | None = None
    items: InputList | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Structured:
        given = [k for k in STRUCTURE_KINDS if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"a structured input takes one of `fields`, `keys` or `items`, not {given}")
        leaves = getattr(self, given[0])
        if not leaves:
            raise ValueError(f"`{given[0]}` names no arrays")
        for leaf in leaves:
            if leaf.static or leaf.has_default:
                raise ValueError(f"{leaf.name!r}: a structure holds arrays; a static or defaulted input stands alone")
            if leaf.key is not None and given[0] != "keys":
                raise ValueError(f"{leaf.name!r}: `key` names a dict's key; a {given[0]} structure has none")
        keys = [leaf.dict_key for leaf in leaves]
        twice = sorted({k for k in keys if keys.count(k) > 1})
        if twice:
            raise ValueError(f"the dict's key {twice[0]!r} holds two arrays")
        return self

    @property
    def kind(self) -> StructureKind:
        return next(k for k in STRUCTURE_KINDS if getattr(self, k) is not None)

    @property
    def leaves(self) -> tuple[Input, ...]:
        return tuple(getattr(self, self.kind))


class StructuredOptions(Structured):
    """A structured input's options in the mapping form `{pt: {fields: [...]}}`: the key is its name."""

    name: SkipJsonSchema[Name] = ""


INPUT_TAG, STRUCTURE_TAG = "<input>", "<structure>"


def _parameter_form(value: Any) -> str:
    return STRUCTURE_TAG if isinstance(value, dict) and any(k in value for k in STRUCTURE_KINDS) else INPUT_TAG


Parameter = Annotated[
    Annotated[Input, Tag(INPUT_TAG)] | Annotated[Structured, Tag(STRUCTURE_TAG)],
    Discriminator(_parameter_form),
]
ParameterList = Annotated[
    tuple[Parameter, ...],
    BeforeValidator(
        _named_entries,
        json_schema_input_type=list[str] | dict[str, InputOptions | StructuredOptions | None],
    ),
]


@dataclass(frozen=True)
class Returned:
    """The structure the public function returns its outputs in: an output, or a tuple, dict or named tuple of them.

    A named tuple is a class the generated module defines (`typing.NamedTuple`), `name` its
    class name and its items' keys its fields.
    """

    kind: Literal["output", "tuple", "dict", "namedtuple"]
    name: str = ""  # the output, for kind "output"; the class, for kind "namedtuple"
    items: tuple[tuple[str, Returned], ...] = ()  # (key, structure); keys of a tuple are ""
    loc: Loc = _UNKNOWN

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


def _to_returned(value: Any, depth: int = 0) -> Returned:
    loc = getattr(value, "loc", _UNKNOWN)
    if depth > _MAX_RETURN_DEPTH:
        raise ValueError(f"`returns` nests deeper than {_MAX_RETURN_DEPTH} levels")
    if isinstance(value, str):
        return Returned("output", name=_to_name(value), loc=loc)
    if isinstance(value, list) and value:
        return Returned("tuple", items=tuple(("", _to_returned(v, depth + 1)) for v in value), loc=loc)
    if isinstance(value, dict) and NAMED_TUPLE_KEY in value:
        return _to_named_tuple(value, depth, loc)
    if isinstance(value, dict) and value:
        for key in value:
            if not isinstance(key, str):
                raise ValueError(f"a dict returned has string keys, not {key!r}")
        return Returned("dict", items=tuple((k, _to_returned(v, depth + 1)) for k, v in value.items()), loc=loc)
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
        items = tuple((f, _to_returned(f, depth + 1)) for f in fields)
    elif isinstance(fields, dict) and fields:
        items = tuple((str(f), _to_returned(v, depth + 1)) for f, v in fields.items())
    else:
        raise ValueError(
            "a named tuple's `fields` is a non-empty list of outputs (each field named as its output) "
            f"or a mapping of field names to what they hold, not {fields!r}"
        )
    for field, _ in items:
        if not field.isidentifier() or keyword.iskeyword(field) or field.startswith("_"):
            raise ValueError(f"a named tuple's field is an identifier not starting with `_`, not {field!r}")
    return Returned("namedtuple", name=name, items=items, loc=loc)


# The JSON Schema of `returns`: names of outputs, nested in lists (tuples) and mappings (dicts).
_RETURNED_SCHEMA = {
    "$comment": "an output's name, or a list (tuple) or mapping (dict) of these, nested",
    "anyOf": [
        {"type": "string"},
        {"type": "array", "minItems": 1},
        {"type": "object", "minProperties": 1},
    ],
}


# ---------------------------------------------------------------- checks


class Tolerance(Node):
    rtol: float = 1e-7
    atol: float = 1e-9


def _as_float64(value: float) -> float:
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"an integer of {int(value).bit_length()} bits is beyond float64's range") from None


def _float64_data(value: Any) -> Any:
    """Numbers of a check (nested in lists, or by name) must be float64 values; anything else passes."""
    if isinstance(value, dict | list):
        for item in value.values() if isinstance(value, dict) else value:
            _float64_data(item)
    elif isinstance(value, int) and not isinstance(value, bool):
        _as_float64(value)
    return value


Float64Data = Annotated[Any, AfterValidator(_float64_data)]


def _float64_array(value: Any) -> Any:
    """A known value of a point (outputs, gradients, tangents): a number, or lists of numbers nested."""
    if isinstance(value, list):
        for item in value:
            _float64_array(item)
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"a point's known values are numbers or lists of numbers, not {value!r}")
    elif isinstance(value, int):
        _as_float64(value)
    return value


#: The outputs' values, a gradient, tangents: arrays of numbers (the inputs of `at` may be statics of any kind).
Float64Array = Annotated[Any, AfterValidator(_float64_array)]


class PointJvp(Node):
    """The outputs' tangents for given input tangents at a point."""

    tangents: dict[str, Float64Array]  # input name -> its tangent; inputs left out have zero tangents
    value: Float64Array  # every differentiable output's tangent, concatenated in order as for a point's `value`


class Point(Node):
    """A point where the rule's value, gradient or JVP is known."""

    at: dict[str, Float64Data]
    value: Float64Array | None = None
    grad: dict[str, Float64Array] | None = None
    jvp: PointJvp | None = None
    hessian: Annotated[
        dict[str, dict[str, Float64Array]] | None,
        Field(
            description="second derivatives: {x: {y: value}} is the gradient with respect to y of the sum of "
            "grad[x], shaped like y (at a scalar point, d2(sum of outputs)/dx dy)"
        ),
    ] = None


class Checks(Node):
    points: tuple[Point, ...] = ()
    sample: Body | None = None
    tolerance: Tolerance | None = None
    skip: dict[str, str] = Field(default_factory=dict)
    true_derivative: bool = True


# ---------------------------------------------------------------- rules


class Rule(Node):
    """One differentiable function, as its rule file states it."""

    name: Annotated[str, BeforeValidator(_to_rule_name, json_schema_input_type=str)]
    class_name: Annotated[str, BeforeValidator(_to_class_name, json_schema_input_type=str)] | None = None
    doc: str = ""
    parameters: Annotated[
        ParameterList,
        Field(alias="inputs", description="the arguments, in order: arrays, statics, or structures of arrays"),
    ]
    outputs: OutputList = (Output(name="out"),)
    returns: Annotated[
        Returned | None,
        BeforeValidator(_to_returned),
        WithJsonSchema(_RETURNED_SCHEMA),
        Field(description="the outputs in a tuple or dict structure (a list or mapping of output names, nested)"),
    ] = None
    forward: Body
    derivatives: dict[Name, TextField | dict[Name, TextField]] | None = None
    jvp: Body | None = None
    vjp: Body | None = None
    residuals: dict[Name, Body] | list[Name] | None = None
    mode: Literal["auto", "jvp", "vjp"] = "auto"
    batching: Literal["elementwise", "sequential"] | Body = "sequential"
    depth: Annotated[int, Field(ge=1, le=8)] = 2
    # torch: compile the Function's forward and first-order backward (torch.compile) where possible
    fuse: bool = False
    stabilise: Annotated[
        bool,
        Field(
            description="search each derived expression (forward, partials, residuals) for the form with the least "
            "measured error (rulegen.derive.stabilise); false: compute each as derived"
        ),
    ] = True
    domain: Annotated[
        TextField | None,
        Field(
            description="a condition on several inputs (`b**2 >= 4*a*c`) that the points `rulegen accuracy` "
            "samples meet, beside each input's own domain; it never changes the generated code"
        ),
    ] = None
    checks: Checks = Field(default_factory=Checks)
    source: SkipJsonSchema[str] = Field(default="", exclude=True)
    source_hash: SkipJsonSchema[str] = Field(default="", exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _complex_outputs(cls, data: Any) -> Any:
        # A holomorphic rule's outputs are complex unless declared otherwise.
        if isinstance(data, dict) and _declares_complex(data.get("inputs")):
            data = _updated(data, outputs=_complex_by_default(data.get("outputs"), data.get("returns")))
        return data

    @model_validator(mode="before")
    @classmethod
    def _outputs_from_returns(cls, data: Any) -> Any:
        # `returns` alone names the outputs, in the order it holds them.
        if isinstance(data, dict) and "returns" in data and "outputs" not in data:
            outputs = _outputs_returned(data["returns"])
            if outputs is not None:
                data = _updated(data, outputs=outputs)
        return data

    @functools.cached_property
    def inputs(self) -> tuple[Input, ...]:
        """The rule's array and static inputs, a structure's arrays in its place: what every body reads."""
        return tuple(leaf for p in self.parameters for leaf in (p.leaves if isinstance(p, Structured) else (p,)))

    @property
    def complex(self) -> bool:
        """Whether the rule is holomorphic in complex inputs (see `consistency_errors` for what that asks)."""
        return any(i.dtype == "complex" for i in self.inputs)

    @property
    def structured(self) -> bool:
        """Whether the public function takes or returns a structure (and so takes apart or builds one)."""
        return self.returns is not None or any(isinstance(p, Structured) for p in self.parameters)

    @property
    def torch_class(self) -> str:
        return self.class_name or names.camel_case(self.name)

    @property
    def residual_names(self) -> tuple[str, ...]:
        if self.residuals is None:
            return ()
        return tuple(self.residuals)

    # The unions of the format in one form each, for every stage after this one.

    @property
    def partials(self) -> dict[str, dict[str, Text]]:
        """`derivatives` as output -> {input: partial}; a flat table is the one output's.

        A flat table beside nested ones, or with several outputs, is refused
        by `consistency_errors`; only the nested ones are given here.
        """
        if self.derivatives is None:
            return {}
        flat = {k: v for k, v in self.derivatives.items() if isinstance(v, Text)}
        nested = {k: dict(v) for k, v in self.derivatives.items() if isinstance(v, dict)}
        if flat and not nested and len(self.outputs) == 1:
            return {self.outputs[0].name: flat}
        return nested

    @property
    def returned_residuals(self) -> tuple[str, ...]:
        """Residuals the forward body returns after the outputs (`residuals: [r]`)."""
        return tuple(self.residuals) if isinstance(self.residuals, list) else ()

    @property
    def residual_bodies(self) -> dict[str, SympyBody | SnippetBody]:
        """Residuals computed by bodies of their own (`residuals: {r: body}`)."""
        return dict(self.residuals) if isinstance(self.residuals, dict) else {}


def _declares_complex(inputs: Any, depth: int = 0) -> bool:
    """Whether raw `inputs` (a list of names, or options by name, structures nested) declare a complex one."""
    if not isinstance(inputs, dict) or depth > 2:
        return False
    for options in inputs.values():
        if not isinstance(options, dict):
            continue
        if options.get("dtype") == "complex":
            return True
        if any(_declares_complex(options.get(k), depth + 1) for k in STRUCTURE_KINDS):
            return True
    return False


def _complex_by_default(outputs: Any, returns: Any) -> Any:
    """Raw `outputs` with `dtype: complex` where an output declares no dtype of its own."""
    if outputs is None:
        named = _outputs_returned(returns) if returns is not None else None
        outputs = named if named is not None else ["out"]
    if isinstance(outputs, list) and all(isinstance(n, str) for n in outputs):
        located = YamlMap({n: YamlMap({"dtype": "complex"}) for n in outputs})
        located.loc = getattr(outputs, "loc", _UNKNOWN)
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


def _outputs_returned(returns: Any) -> YamlList | None:
    """The outputs a raw `returns` names, in its order and at its places (None where it is malformed:
    its own validation says how)."""
    try:
        leaves = _to_returned(returns).outputs
    except ValueError:
        return None
    outputs = YamlList(leaf.name for leaf in leaves)
    outputs.loc = getattr(returns, "loc", _UNKNOWN)
    outputs.item_locs = [leaf.loc for leaf in leaves]
    return outputs


def consistency_errors(rule: Rule) -> list[SpecError]:
    """What pydantic cannot see field by field: names clashing, defaults out of order."""
    errors: list[SpecError] = []
    places: dict[str, Loc] = {}
    named = [(p.name, p.loc) for p in rule.parameters if isinstance(p, Structured)]
    # The default output `out` is written nowhere: it stands where the forward does.
    implied = getattr(rule.forward, "loc", rule.loc)
    named += [(i.name, i.loc) for i in rule.inputs]
    named += [(o.name, implied if o.loc == _UNKNOWN else o.loc) for o in rule.outputs]
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


class RuleFile(BaseModel):
    """A file of several rules."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rules: list[Rule]


# ---------------------------------------------------------------- reading


def _yaml_path(root: object, path: Sequence[str | int]) -> list[str | int]:
    """Turn a pydantic error path into a path through the YAML document.

    Inputs and outputs are validated as lists even when the YAML gives a
    mapping; an index into such a mapping stands for its index-th key.
    """
    node = root
    out: list[str | int] = []
    for part in path:
        if isinstance(node, dict):
            key = part
            if isinstance(part, int) and part not in node:
                keys = list(node)
                if part >= len(keys):
                    break
                key = keys[part]
            if key not in node:
                out.append(key)
                break
            out.append(key)
            node = node[key]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            out.append(part)
            node = node[part]
        else:
            break
    return out


def _message(error: ErrorDetails) -> str:
    kind = error["type"]
    msg = str(error["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix) :]
    if kind == "extra_forbidden":
        return f"unknown key {error['loc'][-1]!r}"
    if kind == "missing":
        return f"missing required key {error['loc'][-1]!r}"
    field = next((p for p in reversed(error["loc"]) if isinstance(p, str) and not p.startswith("<")), None)
    return f"{field}: {msg}" if field and msg.startswith("Input should") else msg


def _located_errors(root: object, error: ValidationError, path_prefix: Sequence[str | int]) -> list[SpecError]:
    found: list[SpecError] = []
    seen: set[tuple[Loc, str]] = set()
    for e in error.errors():
        # Tagged unions add their tag to the path; it is no key of the document.
        loc_path = [p for p in e["loc"] if p not in (SYMPY_TAG, SNIPPET_TAG, INPUT_TAG, STRUCTURE_TAG)]
        yaml_path = _yaml_path(root, [*path_prefix, *loc_path])
        loc = locate(root, yaml_path) or getattr(root, "loc", None) or _UNKNOWN
        if e["type"] == "extra_forbidden":
            parent = locate(root, yaml_path[:-1])
            node = root
            for part in yaml_path[:-1]:
                node = node[part]  # type: ignore[index]
            key = yaml_path[-1] if yaml_path else None
            if isinstance(node, YamlMap) and isinstance(key, str) and key in node.key_locs:
                loc = node.key_locs[key]
                message = f"unknown key {key!r}"
                close = difflib.get_close_matches(key, _allowed_keys(), n=1)
                if close and close[0] != key:
                    message += f"; did you mean {close[0]!r}?"
                _add(found, seen, loc, message)
                continue
            loc = parent or loc
        _add(found, seen, loc, _message(e))
    return found


def _allowed_keys() -> list[str]:
    keys: set[str] = set()
    for model in (Rule, Input, Domain, Structured, Output, Checks, Point, PointJvp, Tolerance, SnippetBody):
        keys |= {field.alias or name for name, field in model.model_fields.items()}
    return sorted(keys - {"loc", "source", "source_hash", "has_default", "domain_given"})


def _add(found: list[SpecError], seen: set[tuple[Loc, str]], loc: Loc, message: str) -> None:
    if (loc, message) not in seen:
        seen.add((loc, message))
        found.append(SpecError(loc, message))


def read_rule_file(path: Path, source_name: str | None = None) -> tuple[Rule, ...]:
    """Every rule of one file, or SpecErrors naming every problem in it.

    Errors name `path` as given; `source_name` (default: the same) is what
    generated code records as the rule's source.
    """
    try:
        raw_bytes = path.read_bytes()
    except OSError as exc:
        raise SpecErrors([SpecError(Loc(str(path)), f"cannot read: {exc.strerror}")]) from None
    digest = hashlib.sha256(raw_bytes).hexdigest()
    try:
        text = raw_bytes.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    root = load_yaml(path, text)
    file_loc = Loc(str(path))
    if not isinstance(root, YamlMap):
        raise SpecErrors(
            [
                SpecError(
                    getattr(root, "loc", file_loc), "a rule file holds a mapping: one rule, or `rules:` with a list"
                )
            ]
        )
    if "rules" in root:
        entries = root["rules"]
        if set(root) != {"rules"}:
            extra = sorted(set(root) - {"rules"})
            raise SpecErrors([SpecError(root.key_locs[extra[0]], "a file with `rules:` holds nothing else")])
        if not isinstance(entries, list) or not entries:
            raise SpecErrors([SpecError(root.value_locs["rules"], "`rules:` must be a non-empty list of rules")])
        items: list[tuple[object, list[str | int]]] = [(entry, ["rules", i]) for i, entry in enumerate(entries)]
    else:
        items = [(root, [])]
    rules: list[Rule] = []
    errors: list[SpecError] = []
    for entry, prefix in items:
        data = entry
        if isinstance(entry, YamlMap):
            data = YamlMap({**entry, "source": source_name or str(path), "source_hash": digest})
            data.loc, data.key_locs, data.value_locs = entry.loc, entry.key_locs, entry.value_locs
        try:
            rule = Rule.model_validate(data)
        except ValidationError as exc:
            errors.extend(_located_errors(root, exc, prefix))
            continue
        errors.extend(consistency_errors(rule))
        rules.append(rule)
    if errors:
        raise SpecErrors(errors)
    return tuple(rules)


def read_rules(paths: Iterable[Path]) -> tuple[Rule, ...]:
    """All rules of all files; SpecErrors lists the problems of every file."""
    rules: list[Rule] = []
    errors: list[SpecError] = []
    for path in paths:
        try:
            rules.extend(read_rule_file(path))
        except SpecErrors as exc:
            errors.extend(exc.errors)
    errors += clash_errors([(r.name, r.torch_class, r.loc) for r in rules])
    if errors:
        raise SpecErrors(errors)
    return tuple(rules)


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


def rule_files(paths: Iterable[Path]) -> list[Path]:
    """The rule files named by `paths`: files as given, directories searched for *.yaml.

    A file named twice (`rules/ rules/a.yaml`, or by two spellings of its
    path) is one file, read once: its rules are not another file's.
    """
    found: dict[Path, Path] = {}
    for path in paths:
        named = sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml")) if path.is_dir() else [path]
        for file in named:
            try:
                same = file.resolve()
            except (OSError, RuntimeError):
                same = file
            found.setdefault(same, file)
    return list(found.values())


def json_schema() -> dict[str, Any]:
    """The JSON Schema of a rule file (one rule, or `rules:` with several), for editors' YAML support."""
    schema = TypeAdapter(Rule | RuleFile).json_schema(mode="validation")
    schema["title"] = "rulegen rule file"
    return schema
