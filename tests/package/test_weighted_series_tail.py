"""A gamma series' tail weighted by another input, as the generated code computes it."""

from __future__ import annotations

import mpmath
import numpy as np
import torch

from tests.conftest import built_package
from tests.derive.test_stats_forms import bits

RULES = (
    "rules:\n  - name: weighted_tail\n"
    "    inputs: {p: {assume: positive, domain: {gt: 0}}, q: {assume: positive, domain: {gt: 0}}}\n"
    "    forward: (p - q) * digamma(p) - loggamma(p) + loggamma(q)\n"
)


def test_a_series_tail_weighted_by_another_input_is_one_polynomial_times_the_weight(tmp_path):
    # -691 q/(32760 p**12), a term of (p - q) digamma(p)'s series (a KL divergence of two Gammas'), is printed
    # 691 * q / 32760 ...: inf from q = 4.9e35 in float32, nan in a sum where the value and its partial in p are
    # finite.  The tail weighted by q is q times one polynomial in 1/p (Horner), no number multiplying q.
    point = (2.9198186743555196e24, 5.303026534605576e35)
    with mpmath.workprec(2000):
        p_, q_ = (mpmath.mpf(float(np.float32(v))) for v in point)
        value = (p_ - q_) * mpmath.digamma(p_) - mpmath.loggamma(p_) + mpmath.loggamma(q_)
        partial = (p_ - q_) * mpmath.polygamma(1, p_)
    with built_package(tmp_path, RULES, "rg_weighted_tail"):
        from rg_weighted_tail.torch import weighted_tail

        p, q = (torch.tensor([v], dtype=torch.float32, requires_grad=True) for v in point)
        out = weighted_tail(p, q)
        (dp,) = torch.autograd.grad(out.sum(), p)
    assert bits(float(out.detach()[0]), value, np.float32) <= 4, float(out.detach()[0])
    assert bits(float(dp[0]), partial, np.float32) <= 4, float(dp[0])
