"""How a torch rule's public function applies its Function: eagerly, compiled, exported.

The choice is made per call by the runtime helper `routed` makes (rulegen/runtime/torch/_route.py);
the planner decides which forms a rule has: always the Function and its compiled twin
(the Function without `jvp`), and the exported op where an op's schema can type every
argument.
"""

from __future__ import annotations

from dataclasses import dataclass

from rulegen.derive.symbols import own_names
from rulegen.plan.code import Assign
from rulegen.spec.names import applier
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


def torch_route(rule: Rule, values: int) -> TorchRoute:
    """How `rule`'s Function, whose forward returns `values` tensors, is applied (`routed` of the runtime).

    A rule with a static its schema cannot type (see `static_type`) has no
    op, and export inlines its Function.
    """
    cls, apply, routed = rule.torch_class, applier(rule.name), own_names(rule)["routed"]
    if any(i.static and static_type(i) is None for i in rule.inputs):
        return TorchRoute(Assign(apply, f"{routed}({cls})"), apply)
    arguments = ", ".join(f"{static_type(i) if i.static else 'Tensor'} {i.name}" for i in rule.inputs)
    returns = "Tensor" if values == 1 else f"({', '.join(['Tensor'] * values)})"
    schema = f"({arguments}) -> {returns}"
    return TorchRoute(Assign(apply, f"{routed}({cls}, {rule.name + '_rule'!r}, {schema!r})"), apply)
