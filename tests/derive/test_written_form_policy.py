"""Under `fast` and `balanced` the forms the derivation rewrites a forward into before it searches (log1p, expm1,
erfc, softplus) are candidates beside the written form, the reference of their cost and accuracy; under `best`
the rewritten form stands as before."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp
from sympy.codegen.cfunctions import log1p

from rulegen.derive.functions import softplus
from rulegen.derive.partials import derive_rule
from rulegen.derive.stabilise import Sampling, stabilise
from rulegen.derive.stabilise.points import _numpy_function
from rulegen.derive.stabilise.policy import finite_as
from rulegen.spec.rules import Domain
from tests.conftest import rules_from

x = sp.Symbol("x", real=True)
LINE = Sampling(((x, Domain()),))
ABOVE_MINUS_ONE = Sampling(((x, Domain(gt=-1)),))


def test_the_cheap_written_form_is_kept_where_it_is_admissible():
    written = sp.log(1 + x)
    assert stabilise(log1p(x), ABOVE_MINUS_ONE, policy="best", written=written).chosen == log1p(x)
    for policy in ("fast", "balanced"):
        # log1p costs 1.7x log(1 + x) under jit: outside balanced's bound, and dearer than the written form.
        assert stabilise(log1p(x), ABOVE_MINUS_ONE, policy=policy, written=written).chosen == written


def test_no_policy_keeps_a_written_form_that_overflows_where_the_exact_value_is_finite():
    written = sp.log(1 + sp.exp(x))
    for policy in ("best", "fast", "balanced"):
        chosen = stabilise(softplus(x), LINE, policy=policy, written=written).chosen
        assert chosen != written
        assert finite_as(chosen, softplus(x), softplus(x), LINE, 0)


def _forward_and_partial(tmp_path, forward: str, accuracy: str, domain: str = "{}") -> tuple[sp.Expr, sp.Expr]:
    (rule,) = rules_from(
        tmp_path, f"name: r\ninputs: {{x: {domain}}}\naccuracy: {accuracy}\nforward: {forward}\n", f"r_{accuracy}.yaml"
    )
    d = derive_rule(rule, [rule.name])
    ((_, out),) = d.forward
    ((_, partial),) = d.jvp_partials.items()
    return out, partial


def test_a_rule_under_fast_computes_its_written_forward_and_under_best_the_rewritten_one(tmp_path):
    x_ = sp.Symbol("x", real=True)
    best, _ = _forward_and_partial(tmp_path, "log(1 + x)", "best", "{assume: positive}")
    assert best.has(log1p)
    for policy in ("fast", "balanced"):
        out, _ = _forward_and_partial(tmp_path, "log(1 + x)", policy, "{assume: positive}")
        assert not out.has(log1p) and out.has(sp.log), (policy, out)
    # softplus's written form overflows: every policy keeps a form finite wherever the exact value is.
    for policy in ("best", "fast", "balanced"):
        out, partial = _forward_and_partial(tmp_path, "log(1 + exp(x))", policy)
        for expr in (out, partial):
            assert finite_as(expr, expr, expr, Sampling(((next(iter(expr.free_symbols)), Domain()),)), 0)
        assert out != sp.log(1 + sp.exp(x_))


def test_the_planners_print_the_written_form_a_policy_kept_not_its_fused_form_again(tmp_path):
    """The planners bring every expression to the fused forms again (`with_fused_forms`): the written
    `log(1 + x/3)` a policy kept for its cost was printed as `log1p` all the same."""
    from rulegen.derive.saved import with_fused_forms
    from rulegen.plan.jax import plan_jax
    from rulegen.plan.torch import plan_torch

    for policy, fused in (("best", True), ("fast", False), ("balanced", False)):
        (rule,) = rules_from(
            tmp_path, f"name: r\ninputs: [x]\naccuracy: {policy}\nforward: log(1 + x/3)\n", f"r_{policy}.yaml"
        )
        d = derive_rule(rule, [rule.name])
        ((_, out),) = with_fused_forms(d).forward
        assert out.has(log1p) == fused, (policy, out)
        for plan in (plan_jax(d), plan_torch(d)):
            assert ("log1p" in repr(plan)) == fused, (policy, plan)


def test_no_policy_keeps_a_log_of_a_square_that_overflows(tmp_path):
    """log(1 + x**2) is inf past |x| = 1.3e154, where it is 2 log|x|: every policy computes log1p(x**2) where
    x**2 is finite and the logs of its factors where not (`fast` kept the written form, inf at x = 1e200)."""
    x_ = sp.Symbol("x", real=True)
    for policy in ("best", "fast", "balanced"):
        out, partial = _forward_and_partial(tmp_path, "log(1 + x**2)", policy)
        f = [_numpy_function(e, (x_,)) for e in (out, partial)]
        for x, value, slope in ((1e200, 2 * 200 * math.log(10), 2e-200), (-3e300, 2 * math.log(3e300), -2 / 3e300)):
            got = [float(g(np.array([x]))[0]) for g in f]
            assert got == pytest.approx([value, slope], rel=1e-14), (policy, out, partial)
