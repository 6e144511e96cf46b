"""Every name generated code introduces, stated once, so that no rule's own names can collide with them.

Generated modules bind names of their own beside the rule's (the `primals`
a JAX JVP unpacks, the `ctx` of a torch Function, the modules they import,
the helpers of the package, the builtins they call).  None of them is
refused: each is spelled `name_` (`own_local`) in a module where the rule
takes `name`, the locals (`OWN_LOCALS`) in the functions that bind them,
the module-level names (`GLOBAL_NAMES`) in the module's imports and every
reference (`Rule.own_names` states the spelling once per rule).  The
rule format refuses only:

- a Python keyword, and the names of the rule format's own keys (`RESERVED`);
- any name that starts with `_`: the underscore namespace belongs to the
  generator (hidden residuals `_r`, unread tangents `_x_dot`, per-rule
  helpers `_f_jvp`, helper modules `_util`, the low-precision flag `_low`);
- a name that equals a name the generator derives from another
  (`GENERATED_FROM_NAME`, `GENERATED_FROM_RULE`): an input `x_dot` beside
  an input `x`, a residual `f_rule` in rule `f`;
- a rule named like a module Python bodies see (`MODULE_NAMES`): bodies call
  the rules of their build by name, so a body reading the module would call
  the rule;
- in a rule with Python bodies, a name of the rule that a body also reads as
  one of the modules it sees (`xp`, `math`): the body would read the one
  where it means the other.

A static input is kept on torch's Function context by its name, or where
torch's context has an attribute of that name (`CTX_ATTRIBUTES`), by
another (`ctx_attribute`).

Temporaries (`TEMPORARY`: `t0`, a point's slopes `s0`, `saved_exp`, `saved_exp_bar`, the
partial `dr_dx`) need no reservation: the planner numbers or prefixes them past
every name the rule takes.
`tests/package/test_names.py` builds every bundled rule and checks that each
identifier of the generated code is the rule's own, one of the generator's
names here as spelled for the rule, or derived by the patterns here;
and builds rules whose names are every one of the generator's.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Iterable, Iterator

#: Modules generated code and snippet bodies see, by the names they use.
MODULE_NAMES = frozenset({"functools", "jax", "jnp", "lax", "math", "np", "scipy", "torch", "xp"})

#: Names the package's helper modules export to generated rule modules.
HELPER_NAMES = frozenset(
    {
        "HostRule",
        "RuleFunction",
        "TorchBridge",
        "as_arrays",
        "as_lifted_arrays",
        "as_opmath_tensors",
        "as_tensors",
        "atan2",
        "atan2_slope",
        "bessel_i0",
        "bessel_i1",
        "bessel_i1_slope",
        "sigmoid_slope",
        "ndtri_slope",
        "bessel_i1_curvature",
        "bessel_ie_series",
        "beta_slope",
        "binade",
        "broadcast",
        "broadcast_tangents",
        "check_statics",
        "digamma",
        "erfcx",
        "erfcx_series",
        "in_float32",
        "rounded",
        "routed",
        "fresh_outputs",
        "from_host",
        "fused",
        "host_op",
        "hurwitz_zeta",
        "hypot_slope",
        "power_slope",
        "power_product",
        "power_log",
        "xlogy",
        "linear_map",
        "no_forward_mode",
        "no_tangent",
        "nth_root",
        "output_from_host",
        "plain",
        "plane_slopes",
        "hypot_slopes",
        "atan2_slopes",
        "polygamma",
        "present",
        "quotient",
        "residual_dtypes",
        "route",
        "rule_op",
        "save_for_derivatives",
        "saves_inputs",
        "sharded",
        "silu_backward",
        "summed_like",
        "tangent_or_zero",
        "tanh_backward",
        "tanh_expm1",
        "to_host",
        "unbroadcast",
        "unpack_fields",
        "unpack_keys",
        "unpack_tuple",
        "vmap_elementwise",
        "vmap_sequential",
    }
)

#: Methods and class attributes of a torch Function: attributes, which no name of a rule meets.
ATTRIBUTE_NAMES = frozenset({"backward", "forward", "generate_vmap_rule", "jvp", "setup_context", "vmap"})

#: Locals of generated code renamed where a rule takes their name (`own_local`), so reserved no more.
OWN_LOCALS = frozenset(
    {
        "cotangents",
        "ctx",
        "dtypes",
        "function",
        "in_dims",
        "info",
        "inputs",
        "jvp",
        "output",
        "primals",
        "saved",
        "tangents",
        "transpose",
        "vjp",
    }
)

#: Builtins generated code calls (a rule name or input would shadow them); the
#: printers write `max`/`min`/`abs` of static (Python number) arguments, and
#: annotations `float`, `complex`, `int`, `bool`, `tuple`, and `dict` and `str` of a structured argument or result;
#: a named tuple returned is a `typing.NamedTuple`; a structured argument given wrongly raises the exceptions named.
BUILTIN_NAMES = frozenset(
    {
        "AttributeError",
        "KeyError",
        "NamedTuple",
        "NotImplementedError",
        "TypeError",
        "ValueError",
        "abs",
        "all",
        "bool",
        "complex",
        "dict",
        "float",
        "int",
        "max",
        "min",
        "staticmethod",
        "str",
        "tuple",
    }
)

#: Keys of the rule format that a body's names could be mistaken for (an output `jax` of a
#: forward given per output would read as a `jax:` body), and the generator of a `checks.sample` body.
FORMAT_NAMES = frozenset({"sympy", "python", "numpy", "jax", "torch", "rng"})

#: The module-level names generated code reads, spelled `name_` in a module where the rule takes `name`.
GLOBAL_NAMES = MODULE_NAMES | HELPER_NAMES | BUILTIN_NAMES

#: The names no rule may take: they would read as keys of the rule format.
RESERVED = FORMAT_NAMES

#: Attributes of torch's Function context: a static input is kept as `ctx.<name>`.
CTX_ATTRIBUTES = frozenset(
    {
        "apply",
        "apply_boxed",
        "apply_jvp",
        "dirty_tensors",
        "mark_dirty",
        "mark_non_differentiable",
        "mark_shared_storage",
        "materialize_grads",
        "maybe_clear_saved_tensors",
        "metadata",
        "name",
        "needs_input_grad",
        "next_functions",
        "non_differentiable",
        "register_hook",
        "register_prehook",
        "requires_grad",
        "save_for_backward",
        "save_for_forward",
        "saved_for_forward",
        "saved_tensors",
        "saved_variables",
        "set_materialize_grads",
        "to_save",
    }
)

#: Fixed names of the underscore namespace (module-level functions of the bodies).
PRIVATE_NAMES = frozenset(
    {
        "_",
        "_forward",
        "_jvp",
        "_vjp",
        "_bridge",
        "_backward",
        "_forward_compiled",
        "_backward_compiled",
        "_sum_to_shape",
        "_host_op",
        "_host_shapes",
        "__name__",  # names a host rule's custom op after its module
        "_low",
        "_numbers",
        "_partials",
    }
)

#: What generated code appends to an input's name for its tangent and to an output's for its cotangent.
TANGENT, COTANGENT = "_dot", "_bar"


def tangent(name: str) -> str:
    """The name of the tangent of `name` in generated code (`x_dot`)."""
    return name + TANGENT


def cotangent(name: str) -> str:
    """The name of the cotangent of `name` in generated code (`out_bar`)."""
    return name + COTANGENT


def hidden(name: str) -> str:
    """A value generated code has but does not hand on: a residual the public function drops, a tangent or
    cotangent parameter a method does not read (`_saved_sin`, `_x_dot`); for a rule, its private function."""
    return f"_{name}"


def applier(rule: str) -> str:
    """What a torch rule's public function calls to apply its Function (the runtime's `routed`)."""
    return f"_apply_{rule}"


def jvp_rule(rule: str) -> str:
    """A JAX rule's `defjvp` function."""
    return f"_{rule}_jvp"


def vjp_halves(rule: str) -> tuple[str, str]:
    """A JAX `custom_vjp`'s forward and backward functions (`defvjp`)."""
    return f"_{rule}_fwd", f"_{rule}_bwd"


def host_rule(rule: str) -> str:
    """A JAX host rule's primitive (the runtime's `HostRule`)."""
    return f"_{rule}_rule"


def linear_map_half(rule: str, kind: str) -> str:
    """One half, `kind` `jvp` or `vjp`, of the `linear_map` a JAX rule with a given JVP and VJP applies."""
    return f"_{rule}_{kind}_map"


def bridged(rule: str) -> str:
    """The torch function a torch-only rule's JAX module calls through the bridge, as that module imports it."""
    return f"_torch_{rule}"


def shape_attribute(name: str) -> str:
    """The attribute of torch's Function context keeping the shape of `name`."""
    return f"{name}_shape"


def partial_name(output: str, input_: str) -> str:
    """The name of the partial of `output` in `input_` where a torch Function computes it once (`dr_dx`)."""
    return f"d{output}_d{input_}"


#: Temporaries: numbered shared subexpressions, the numbered slopes of a point one runtime call gives
#: (`s0, s1 = hypot_slopes(x, y)`), saved intermediates named for their functions (and their tangents and
#: cotangents), partials, each
#: prefixed with `_` until no rule name starts so (a partial: is so).
TEMPORARY = re.compile(rf"_*(t\d+|s\d+|saved(_[a-z0-9]+)+|d\w+_d\w+)({TANGENT}|{COTANGENT})?")

#: Names the generator derives from each name of a rule (input, output, residual).
GENERATED_FROM_NAME = (
    tangent("{}"),
    cotangent("{}"),
    shape_attribute("{}"),
    hidden(tangent("{}")),
    hidden(cotangent("{}")),
)
#: Names the generator derives from a residual's name only: a residual the public function does not return.
GENERATED_FROM_RESIDUAL = (hidden("{}"),)

#: Names the generator derives from a rule's function name.
GENERATED_FROM_RULE = (
    hidden("{}"),
    applier("{}"),
    jvp_rule("{}"),
    *vjp_halves("{}"),
    host_rule("{}"),
    linear_map_half("{}", "jvp"),
    linear_map_half("{}", "vjp"),
    bridged("{}"),
)


def own_local(local: str, taken: Iterable[str]) -> str:
    """The name of one of generated code's own locals (torch's `ctx`): `local`, or where a rule's name in
    the same function (`taken`) is `local`, `local` with `_` appended until it is free (`ctx_`)."""
    taken = set(taken)
    while local in taken:
        local += "_"
    return local


def ctx_attribute(static: str) -> str:
    """The attribute of torch's Function context that keeps the static input `static`.

    Its own name, unless torch's context has an attribute of that name
    (`ctx.name`, `ctx.metadata`); then a name in the underscore namespace,
    which no rule name takes, and which no attribute of torch's context ends with.
    """
    return f"_{static}_static" if static in CTX_ATTRIBUTES else static


def camel_case(name: str) -> str:
    """The torch class name of a rule named `name`: `sin_mul` -> `SinMul`."""
    return "".join(part.capitalize() for part in name.split("_") if part)


def unusable(name: str) -> str | None:
    """Why generated code cannot take `name` for one of the rule's own, or None if it can."""
    if keyword.iskeyword(name):
        return "is a Python keyword"
    if name.startswith("_"):
        return "starts with `_`, which generated code keeps for its own names"
    if name in RESERVED:
        return "is a key of the rule format"
    return None


def derived_names(rule: str, names: Iterable[str], residuals: Iterable[str] = ()) -> Iterator[tuple[str, str]]:
    """(generated name, what it is derived from) for every name generated code derives for one rule.

    `names` are all of the rule's names, `residuals` those among them that name residuals.
    """
    for name in names:
        for pattern in GENERATED_FROM_NAME:
            yield pattern.format(name), name
    for name in residuals:
        for pattern in GENERATED_FROM_RESIDUAL:
            yield pattern.format(name), name
    for pattern in GENERATED_FROM_RULE:
        yield pattern.format(rule), rule
    for name in PRIVATE_NAMES:
        yield name, "the generator"
