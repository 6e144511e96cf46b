"""Stage 3: decide what each backend computes where, and print it.

A plan is everything a template needs, already printed: the signature, which
values the forward pass saves, and each method's body as straight-line
assignments sharing subexpressions through `sympy.cse`.  Templates then only
lay the pieces out.  One planner per body kind and backend; the snippet
planners build the route `rulegen.routes` chose.
"""

from rulegen.plan.jax import plan_jax
from rulegen.plan.model import Function, Header, JaxPlan, Param, Reads, Result, SnippetPlan, TorchPlan
from rulegen.plan.snippet_jax import plan_jax_snippet
from rulegen.plan.snippet_torch import plan_torch_snippet
from rulegen.plan.torch import plan_torch

__all__ = [
    "Function",
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
