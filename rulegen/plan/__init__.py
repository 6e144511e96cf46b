"""Stage 3: decide what each backend computes where, and print it.

A plan is every decision about a module: the signature, which values the
forward pass saves, each method's body as straight-line assignments sharing
subexpressions through `sympy.cse`, and the module's definitions as the code
model's statements (`rulegen.plan.code`), which the template prints through that
model's one printer.  One planner per body kind and backend; the snippet
planners build the route `rulegen.derive.routes` chose.
"""

from rulegen.plan.jax import plan_jax
from rulegen.plan.model import Header, JaxPlan, Param, Reads, Result, SnippetPlan, TorchPlan
from rulegen.plan.snippet_jax import plan_jax_snippet
from rulegen.plan.snippet_torch import plan_torch_snippet
from rulegen.plan.torch import plan_torch

__all__ = [
    "Header",
    "JaxPlan",
    "Param",
    "Reads",
    "Result",
    "SnippetPlan",
    "TorchPlan",
    "plan_jax",
    "plan_jax_snippet",
    "plan_torch",
    "plan_torch_snippet",
]
