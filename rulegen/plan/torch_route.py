"""What both torch planners emit alike: how the public function applies its Function (eagerly,
compiled, exported), and what the Function's `setup_context` keeps.

The choice is made per call by the runtime helper `routed` makes (rulegen/runtime/torch/_route.py);
the planner decides which forms a rule has: always the Function and its compiled twin
(the Function without `jvp`), and the exported op where an op's schema can type every
argument.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rulegen.plan.code import Assign, Def, Expr, Pass, Statement, unpacking
from rulegen.spec.names import applier, ctx_attribute, shape_attribute
from rulegen.spec.rules import Input, Rule


@dataclass(frozen=True)
class TorchRoute:
    """The module-level statement that makes what applies a rule's Function, and the name it binds."""

    op: Assign
    route: str


#: An op schema's type of a static, by the Python type of its default.
_SCHEMA_TYPES = {bool: "bool", int: "int", float: "float", str: "str"}


def static_type(i: Input) -> str | None:
    """The type an op's schema gives static input `i`: its default's (a bool, int, float or str), else None.

    A static may be any Python value (a callable, a tuple), which no schema
    types; one with a number or string default is taken to stay of its kind.
    """
    if not i.has_default:
        return None
    return _SCHEMA_TYPES.get(type(i.default))


def torch_route(rule: Rule, values: int, host_op: str = "") -> TorchRoute:
    """How `rule`'s Function, whose forward returns `values` tensors, is applied (`routed` of the runtime).

    A host rule whose forward is the custom op `host_op` exports as that op
    (the runtime gives it the Function's autograd); another rule as an op
    of the schema given here.  A rule with a static its schema cannot type
    (see `static_type`) has no op, and export inlines its Function.
    """
    cls, apply, routed = rule.torch_class, applier(rule.name), rule.own_names["routed"]
    if host_op:
        return TorchRoute(Assign(apply, f"{routed}({cls}, op={host_op})"), apply)
    if any(i.static and static_type(i) is None for i in rule.inputs):
        return TorchRoute(Assign(apply, f"{routed}({cls})"), apply)
    arguments = ", ".join(f"{static_type(i) if i.static else 'Tensor'} {i.name}" for i in rule.inputs)
    returns = "Tensor" if values == 1 else f"({', '.join(['Tensor'] * values)})"
    schema = f"({arguments}) -> {returns}"
    return TorchRoute(Assign(apply, f"{routed}({cls}, {schema!r})"), apply)


@dataclass(frozen=True)
class Kept:
    """What a Function's setup_context keeps of its `inputs` and of the `values` forward returns.

    `shape` is an attribute set to code that reads `shape_reads` of the
    inputs (a host body's broadcast output shape), if any.
    """

    inputs: tuple[str, ...]
    values: tuple[str, ...]
    saved: tuple[str, ...]
    statics: tuple[str, ...] = ()
    shapes: tuple[str, ...] = ()  # values whose shapes are kept, as ctx.<name>_shape
    non_differentiable: tuple[str, ...] = ()
    unmaterialised: bool = False
    shape: tuple[str, str] | None = None
    shape_reads: tuple[str, ...] = ()


def setup_context_body(kept: Kept, own: Mapping[str, str]) -> tuple[Statement, ...]:
    """setup_context's statements: unpack what it keeps, then save it and set the context's attributes.

    The inputs are saved as `*inputs` where all of them are, first and in
    order, and a lone value of forward's is `output` itself: no
    unpacking that only renames.
    """
    ctx, inputs, output = own["ctx"], own["inputs"], own["output"]
    read_otherwise = {*kept.statics, *kept.shapes, *kept.shape_reads}
    named = {*kept.saved, *read_otherwise}
    all_saved_first = bool(kept.inputs) and kept.saved[: len(kept.inputs)] == kept.inputs
    splat = all_saved_first and not read_otherwise & set(kept.inputs)
    body: list[Statement] = []
    if named & set(kept.inputs) and not splat:
        body.append(Assign(unpacking([n if n in named else "_" for n in kept.inputs]), inputs))
    spelled: dict[str, str] = {}
    if len(kept.values) == 1:
        spelled[kept.values[0]] = output
    elif {*named, *kept.non_differentiable} & set(kept.values):
        out_named = {*named, *kept.non_differentiable}
        body.append(Assign(", ".join(n if n in out_named else "_" for n in kept.values), output))
    if kept.unmaterialised:
        body.append(Expr(f"{ctx}.set_materialize_grads(False)"))
    if kept.non_differentiable:
        marked = ", ".join(spelled.get(n, n) for n in kept.non_differentiable)
        body.append(Expr(f"{ctx}.mark_non_differentiable({marked})"))
    if kept.saved:
        rest = kept.saved[len(kept.inputs) :] if splat else kept.saved
        saved = [f"*{inputs}"] * splat + [spelled.get(n, n) for n in rest]
        body.append(Expr(f"{own['save_for_derivatives']}({ctx}, {', '.join(saved)})"))
    body += [Assign(f"{ctx}.{ctx_attribute(s)}", s) for s in kept.statics]
    body += [Assign(f"{ctx}.{shape_attribute(n)}", f"{spelled.get(n, n)}.shape") for n in kept.shapes]
    if kept.shape is not None:
        body.append(Assign(f"{ctx}.{kept.shape[0]}", kept.shape[1]))
    return tuple(body) or (Pass(),)


def values_saved(kept: Kept) -> tuple[tuple[int, ...], int] | None:
    """Where setup_context saves every input, then some of forward's values, and nothing else (unmaterialised,
    it leaves absent cotangents None): the positions of the values saved before forward's last ones, and how
    many of those last ones it saves (the runtime's `saves_inputs(residuals, outputs=...)`).  None otherwise.
    """
    if kept.statics or kept.shapes or kept.shape or kept.shape_reads or kept.non_differentiable:
        return None
    n = len(kept.inputs)
    rest = kept.saved[n:]
    if not kept.inputs or kept.saved[:n] != kept.inputs or not set(rest) <= set(kept.values):
        return None
    last = 0
    while last < len(rest) and rest[len(rest) - 1 - last] == kept.values[len(kept.values) - 1 - last]:
        last += 1
    positions = tuple(kept.values.index(v) for v in rest[: len(rest) - last])
    if list(positions) != sorted(positions) or any(k >= len(kept.values) - last for k in positions):
        return None
    return positions, last


def setup_context_method(kept: Kept, own: Mapping[str, str], decorators: tuple[str, ...]) -> Statement:
    """The Function's setup_context: the runtime's `saves_inputs` where it says all (`values_saved`), else
    a method of `setup_context_body`."""
    saved = values_saved(kept)
    if saved is None:
        params = (own["ctx"], own["inputs"], own["output"])
        return Def("setup_context", params, setup_context_body(kept, own), decorators)
    positions, residuals = saved
    arguments = [f"residuals={residuals}"] if residuals else []
    arguments += [f"outputs=({', '.join(map(str, positions))},)"] if positions else []
    arguments += ["materialize_grads=False"] if kept.unmaterialised else []
    return Assign("setup_context", f"{own['saves_inputs']}({', '.join(arguments)})")
