"""Every check, once: its name, its two-letter code, what it needs beside the subject, and its function.

The order is the order of the outcomes and of the tables' columns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from rulegen.check import dtypes, numerical, transforms
from rulegen.check.accuracy import check_accuracy, check_admissible
from rulegen.check.accuracy_snippet import check_snippet_accuracy, hand_written
from rulegen.check.durability import check_durability
from rulegen.check.outcome import NotApplicable
from rulegen.check.subject import Subject

#: What a check may take beside the subject: whether `--compile` was given, the built JAX package.
Need = Literal["include_compile", "jax_package"]


@dataclass(frozen=True)
class Check:
    name: str
    #: The compact table's column head, spelled out in its legend.
    code: str
    #: Called with the subject and, by keyword, each of `needs`; returns what passed, raises
    #: `CheckFailed` or `NotApplicable`.
    function: Callable[..., str]
    needs: tuple[Need, ...] = ()


def _accuracy(s: Subject) -> str:
    """Section 3 of the contract: sympy bodies against mpmath, a rule with snippets against its forward's autodiff
    in float64."""
    if hand_written(s.rule):
        return check_snippet_accuracy(s)
    return check_accuracy(s)


def _admissible(s: Subject) -> str:
    """Section 3's first promise: finite wherever the exact value is; a rule with snippets has no exact value."""
    if hand_written(s.rule):
        raise NotApplicable("a body is a snippet: there is no exact expression to hold it to")
    return check_admissible(s)


REGISTRY: tuple[Check, ...] = (
    Check("forward", "fw", numerical.check_forward),
    Check("mpmath", "mp", numerical.check_mpmath),
    Check("wide", "wi", numerical.check_wide),
    Check("jvp_fd", "jf", numerical.check_jvp_fd),
    Check("vjp_dot", "vd", numerical.check_vjp_dot),
    Check("cross_backend", "cb", numerical.check_cross_backend),
    Check("second_order", "so", numerical.check_second_order),
    Check("transforms_jax", "tj", transforms.check_transforms_jax),
    Check("transforms_torch", "tt", transforms.check_transforms_torch),
    Check("broadcast", "bc", transforms.check_broadcast),
    Check("float32", "32", dtypes.check_float32),
    Check("low_precision", "lp", dtypes.check_low_precision),
    Check("dtype", "dt", dtypes.check_dtype),
    Check("scalars", "sc", dtypes.check_scalars),
    Check("points", "pt", numerical.check_points),
    Check("accuracy", "ac", _accuracy),
    Check("admissible", "ad", _admissible),
    Check("structures", "st", transforms.check_structures),
    Check("compile", "co", transforms.check_compile, needs=("include_compile",)),
    Check("durability", "du", check_durability, needs=("include_compile", "jax_package")),
)

#: The checks' names, in order.
CHECKS: tuple[str, ...] = tuple(check.name for check in REGISTRY)
