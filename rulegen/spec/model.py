"""The pydantic models of a rule file: frozen, strict about keys, and located.

The models mirror the YAML format (so `rulegen schema` can print its JSON
Schema and validation errors point at YAML paths) and carry the source
location of every object and every text, so that later stages report
problems at `file:line:col` without reaching back into the YAML.  What a
field may be written as is brought to one form by `rulegen.spec.normalise`;
what no field can check alone, `rulegen.spec.consistency` checks.
"""

from __future__ import annotations

import ast
import functools
import math
import textwrap
from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    WithJsonSchema,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from rulegen.spec import names
from rulegen.spec.errors import Loc
from rulegen.spec.normalise import (
    STRUCTURE_KINDS,
    UNKNOWN,
    Returned,
    StructureKind,
    Text,
    as_float64,
    complex_by_default,
    declares_complex,
    float64_array,
    float64_data,
    named_entries,
    outputs_returned,
    to_assumptions,
    to_body,
    to_class_name,
    to_default,
    to_name,
    to_returned,
    to_rule_name,
    to_target,
    to_text,
    updated,
)
from rulegen.spec.source import YamlMap

TextField = Annotated[Text, BeforeValidator(to_text, json_schema_input_type=str | float | int)]

Name = Annotated[str, BeforeValidator(to_name, json_schema_input_type=str)]

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


def _holds(assumption: str, domain: Domain) -> bool:
    lo, hi = domain.lo, domain.hi
    return {
        "positive": lo > 0 or (lo == 0 and domain.lo_open),
        "nonnegative": lo >= 0,
        "negative": hi < 0 or (hi == 0 and domain.hi_open),
        "nonpositive": hi <= 0,
        "nonzero": True,
    }[assumption]


class Node(BaseModel):
    """A YAML mapping: frozen, strict about keys, and aware of where it is."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    loc: SkipJsonSchema[Loc] = Field(default=UNKNOWN, exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _take_loc(cls, data: Any) -> Any:
        if isinstance(data, YamlMap):
            if "loc" in data:
                raise ValueError("unknown key 'loc'")
            return {**data, "loc": data.loc}
        return data


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


# Tags of the body union; pydantic puts them in error paths, where they are no YAML key.
SYMPY_TAG, SNIPPET_TAG = "<sympy body>", "<snippet body>"


def _body_form(value: Any) -> str:
    return SYMPY_TAG if isinstance(value, dict) and "sympy" in value else SNIPPET_TAG


Body = Annotated[
    Annotated[SympyBody, Tag(SYMPY_TAG)] | Annotated[SnippetBody, Tag(SNIPPET_TAG)],
    Discriminator(_body_form),
    BeforeValidator(to_body, json_schema_input_type=str | SympyBody | SnippetBody | dict[str, str]),
]


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
            if bound is not None and not math.isfinite(as_float64(bound)):
                raise ValueError(f"a domain's bounds and excluded points are finite numbers, not {bound}")
        if not (self.lo < self.hi or (self.lo == self.hi and not (self.lo_open or self.hi_open))):
            raise ValueError(f"domain {self.describe()} is empty")
        return self

    @property
    def lo(self) -> float:
        bound = self.gt if self.gt is not None else self.ge
        return -math.inf if bound is None else as_float64(bound)

    @property
    def hi(self) -> float:
        bound = self.lt if self.lt is not None else self.le
        return math.inf if bound is None else as_float64(bound)

    @property
    def lo_open(self) -> bool:
        return self.gt is not None

    @property
    def hi_open(self) -> bool:
        return self.lt is not None

    def describe(self) -> str:
        """`(0, inf]`-style, with the excluded points: for messages and tables."""
        text = f"{'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}{')' if self.hi_open else ']'}"
        return text + "".join(f" \\ {{{as_float64(x):g}}}" for x in self.exclude)


class Input(Node):
    """One argument of the generated function."""

    name: Name
    diff: bool = True
    static: bool = False
    default: Annotated[Any, BeforeValidator(to_default)] = None
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
        BeforeValidator(to_assumptions, json_schema_input_type=Assumption | list[Assumption]),
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
            data = updated(data, has_default=True)
        if isinstance(data, dict) and "domain" in data:
            data = updated(data, domain_given=True)
        if isinstance(data, dict) and "domain" not in data and data.get("assume"):
            # Sampling must respect what the rule assumes; the tightest assumption given decides.
            assumed = to_assumptions(data["assume"])
            domains = [ASSUMPTION_DOMAINS[a] for a in assumed if isinstance(a, str) and a in ASSUMPTION_DOMAINS]
            if domains:
                data = updated(data, domain=(max(lo for lo, _ in domains), min(hi for _, hi in domains)))
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
        return as_float64(lo), as_float64(hi)

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


InputList = Annotated[
    tuple[Input, ...],
    BeforeValidator(named_entries, json_schema_input_type=list[str] | dict[str, InputOptions | None]),
]

OutputList = Annotated[
    tuple[Output, ...],
    BeforeValidator(named_entries, json_schema_input_type=list[str] | dict[str, OutputOptions | None]),
]


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
        named_entries,
        json_schema_input_type=list[str] | dict[str, InputOptions | StructuredOptions | None],
    ),
]

# The JSON Schema of `returns`: names of outputs, nested in lists (tuples) and mappings (dicts).
_RETURNED_SCHEMA = {
    "$comment": "an output's name, or a list (tuple) or mapping (dict) of these, nested",
    "anyOf": [
        {"type": "string"},
        {"type": "array", "minItems": 1},
        {"type": "object", "minProperties": 1},
    ],
}


class Tolerance(Node):
    rtol: float = 1e-7
    atol: float = 1e-9


Float64Data = Annotated[Any, AfterValidator(float64_data)]

#: The outputs' values, a gradient, tangents: arrays of numbers (the inputs of `at` may be statics of any kind).
Float64Array = Annotated[Any, AfterValidator(float64_array)]


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
    against: Annotated[
        dict[Literal["jax", "torch"], Annotated[str, BeforeValidator(to_target, json_schema_input_type=str)]],
        Field(
            description="implementations you already have (MODULE:ATTR, importable from where the checks run), "
            "audited against this rule by `rulegen test` and the pytest plugin beside rulegen's own code"
        ),
    ] = Field(default_factory=dict)


#: The accuracy policies (rulegen.derive.stabilise.policy), and the one where neither a rule nor its build names one.
Accuracy = Literal["best", "balanced", "fast"]
DEFAULT_ACCURACY: Accuracy = "best"


class Rule(Node):
    """One differentiable function, as its rule file states it."""

    name: Annotated[str, BeforeValidator(to_rule_name, json_schema_input_type=str)]
    class_name: Annotated[str, BeforeValidator(to_class_name, json_schema_input_type=str)] | None = None
    doc: str = ""
    parameters: Annotated[
        ParameterList,
        Field(alias="inputs", description="the arguments, in order: arrays, statics, or structures of arrays"),
    ]
    outputs: OutputList = (Output(name="out"),)
    returns: Annotated[
        Returned | None,
        BeforeValidator(to_returned),
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
    accuracy: Annotated[
        Accuracy | None,
        Field(
            description="what the accuracy search keeps: best, the most accurate form; balanced, the most accurate "
            "costing at most 1.25x the derived form; fast, the cheapest no less accurate than the derived form "
            "(default: the build's, [tool.rulegen] accuracy or `rulegen build --accuracy`, else best)"
        ),
    ] = None
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

    @property
    def policy(self) -> Accuracy:
        """The accuracy policy the rule is built under: its own `accuracy`, else the default (a build's policy is
        each rule's own where the rule names none, `render.build.with_accuracy`)."""
        return self.accuracy or DEFAULT_ACCURACY

    @model_validator(mode="before")
    @classmethod
    def _complex_outputs(cls, data: Any) -> Any:
        # A holomorphic rule's outputs are complex unless declared otherwise.
        if isinstance(data, dict) and declares_complex(data.get("inputs")):
            data = updated(data, outputs=complex_by_default(data.get("outputs"), data.get("returns")))
        return data

    @model_validator(mode="before")
    @classmethod
    def _outputs_from_returns(cls, data: Any) -> Any:
        # `returns` alone names the outputs, in the order it holds them.
        if isinstance(data, dict) and "returns" in data and "outputs" not in data:
            outputs = outputs_returned(data["returns"])
            if outputs is not None:
                data = updated(data, outputs=outputs)
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
    def value_names(self) -> tuple[str, ...]:
        """The values the rule computes, by name: outputs, residuals, the differentiable inputs' tangents, the
        outputs' cotangents (beside its inputs, the names its expressions are written in)."""
        return (
            *(o.name for o in self.outputs),
            *self.residual_names,
            *(names.tangent(i.name) for i in self.inputs if i.differentiable),
            *(names.cotangent(o.name) for o in self.outputs),
        )

    @property
    def snippet_names(self) -> frozenset[str]:
        """Every name the rule's Python bodies read or bind (their modules, the rules they call, their locals)."""
        bodies = [self.forward, self.jvp, self.vjp, self.checks.sample, self.batching]
        if isinstance(self.residuals, dict):
            bodies += list(self.residuals.values())
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
        return frozenset(found - {"_body"})

    @property
    def taken_names(self) -> frozenset[str]:
        """Every name the rule's generated modules bind for the rule: its names, tangents and cotangents,
        structures, function and classes, and what its Python bodies call and bind (the modules they read are the
        generator's own: the bodies read them by their names)."""
        taken = {*(i.name for i in self.inputs), *self.value_names}
        taken |= {p.name for p in self.parameters if isinstance(p, Structured)}
        # The rule's function and classes are module-level names generated functions call.
        taken |= {self.name, self.torch_class}
        taken |= {n.name for n in (self.returns.named_tuples if self.returns is not None else ())}
        return frozenset(taken | (self.snippet_names - names.MODULE_NAMES))

    @functools.cached_property
    def own_names(self) -> Mapping[str, str]:
        """How the rule's modules spell each name generated code gives its own things, worked out once: its
        locals (`names.OWN_LOCALS`: `ctx`, `primals`, ...) and the modules, helpers and builtins it reads
        (`names.GLOBAL_NAMES`: `torch`, `plain`, `max`); `name`, or `name_` where the rule takes `name`."""
        taken = self.taken_names
        return MappingProxyType(
            {own: names.own_local(own, taken) for own in sorted(names.OWN_LOCALS | names.GLOBAL_NAMES)}
        )

    @property
    def torch_context(self) -> str:
        """The name of a torch Function's context parameter: `ctx`, renamed where one of the rule's names is `ctx`."""
        return self.own_names["ctx"]

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


class RuleFile(BaseModel):
    """A file of several rules."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rules: list[Rule]
