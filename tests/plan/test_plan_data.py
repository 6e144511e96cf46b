"""A plan holds data, not code printed ahead: the conditions a torch Function tests (every cotangent present,
plain tensors, every gradient wanted), the names its wrapper unpacks and the call of a JAX rule's primal
function are written where the definitions are built, from names and positions the plan holds."""

from __future__ import annotations

import dataclasses
import typing

from rulegen.plan.model import JaxPlan, TorchPlan

#: The plain strings a torch plan may hold: names, and the wrapper's return annotation.
_NAMES = frozenset({"name", "class_name", "returns", "route", "shape_kept"})


def test_a_torch_plan_s_only_strings_are_names() -> None:
    hints = typing.get_type_hints(TorchPlan)
    strings = {f.name for f in dataclasses.fields(TorchPlan) if hints[f.name] is str}
    assert strings == _NAMES, strings - _NAMES


def test_the_tensors_plain_checks_are_names() -> None:
    hints = typing.get_type_hints(TorchPlan)
    assert hints["forward_plain"] == tuple[str, ...]
    assert hints["backward_plain"] == tuple[str, ...]
    assert hints["gradients_wanted"] == tuple[int, ...]


def test_a_jax_plan_s_only_strings_are_names() -> None:
    # The call of the primal function, which the custom_vjp's forward half makes, is written where it is built.
    hints = typing.get_type_hints(JaxPlan)
    strings = {f.name for f in dataclasses.fields(JaxPlan) if hints[f.name] is str}
    assert strings == {"name", "returns", "custom"}, strings
