"""Stage 3: decide what each backend computes where, and print it.

A plan is every decision about a module: the signature, which values the
forward pass saves, each method's body as straight-line assignments sharing
subexpressions through `sympy.cse`, and the module's definitions as the code
model's statements (`rulegen.plan.code`), which the template prints through that
model's one printer.  One planner per body kind and backend; the snippet
planners build the route `rulegen.derive.routes` chose.
"""

from rulegen.derive.partials import Derivation
from rulegen.derive.snippet import SnippetDerivation
from rulegen.plan.jax import plan_jax
from rulegen.plan.model import Header, JaxPlan, ModulePlan, Param, Reads, Result, SnippetPlan, TorchPlan, module_plan
from rulegen.plan.snippet_jax import plan_jax_snippet
from rulegen.plan.snippet_torch import plan_torch_snippet
from rulegen.plan.torch import plan_torch


def plan_modules(derivation: Derivation | SnippetDerivation) -> tuple[ModulePlan, ModulePlan]:
    """The JAX and the torch module of one rule, as the render stage takes them."""
    if isinstance(derivation, SnippetDerivation):
        return module_plan(plan_jax_snippet(derivation)), module_plan(plan_torch_snippet(derivation))
    return module_plan(plan_jax(derivation)), module_plan(plan_torch(derivation))


__all__ = [
    "Header",
    "JaxPlan",
    "ModulePlan",
    "Param",
    "Reads",
    "Result",
    "SnippetPlan",
    "TorchPlan",
    "plan_jax",
    "plan_jax_snippet",
    "plan_modules",
    "plan_torch",
    "plan_torch_snippet",
]
