"""Stage 6: check generated rules against the mathematics and against each other.

Every rule is built, imported and exercised in float64 at seeded random
points of its inputs' domains: values against the other backend and against
mpmath, derivatives against finite differences, JVP against VJP, each
backend's JVP and VJP against the other's, second order, the frameworks'
transforms, broadcasting, float32, and the rule's own `checks.points`.  Each
check reports pass, fail with the numbers, or n/a with the reason; an
exception inside a check is a failure of that check, never of the run.

The modules, by concern: `outcome` (what a check finds), `points` (where a
rule is checked, the structures it takes), `subject` (one rule with its two
implementations and its sample, built once per rule), `derivatives`,
`numerical`, `transforms`, `dtypes` and `durability` (the checks),
`registry` (every check once), `run` (sessions and workers), `report`,
`against` (hand-written implementations audited against a rule).
"""

from rulegen.check.derivatives import jax_grad, sum_of, torch_grads, torch_total
from rulegen.check.numerical import (
    WIDE_POINTS,
    check_cross_backend,
    check_forward,
    check_jvp_fd,
    check_mpmath,
    check_points,
    check_second_order,
    check_vjp_dot,
    check_wide,
    lambdified_derivative,
)
from rulegen.check.outcome import ATOL, RTOL, CheckFailed, NotApplicable, Outcome, Status, compare
from rulegen.check.points import flat_call, joint_domain, sample, structured_arguments
from rulegen.check.registry import CHECKS, REGISTRY, Check
from rulegen.check.report import compact_table, legend, outcomes_json, report_table, summary
from rulegen.check.run import CheckSession, check_rule, run_checks
from rulegen.check.subject import Subject, derived, subject_of, to_numpy

__all__ = [
    "ATOL",
    "CHECKS",
    "REGISTRY",
    "RTOL",
    "WIDE_POINTS",
    "Check",
    "CheckFailed",
    "CheckSession",
    "NotApplicable",
    "Outcome",
    "Status",
    "Subject",
    "check_cross_backend",
    "check_forward",
    "check_jvp_fd",
    "check_mpmath",
    "check_points",
    "check_rule",
    "check_second_order",
    "check_vjp_dot",
    "check_wide",
    "compact_table",
    "compare",
    "derived",
    "flat_call",
    "jax_grad",
    "joint_domain",
    "lambdified_derivative",
    "legend",
    "outcomes_json",
    "report_table",
    "run_checks",
    "sample",
    "structured_arguments",
    "subject_of",
    "sum_of",
    "summary",
    "to_numpy",
    "torch_grads",
    "torch_total",
]
