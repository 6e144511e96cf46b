"""The accuracy checks' exact values are computed at a few working precisions, shared by every point."""

from __future__ import annotations

import mpmath

from rulegen.check import accuracy
from rulegen.derive.measure import exact_value


def test_exact_values_round_the_working_precision_up_to_a_step_and_keep_their_value():
    # mpmath keeps digamma's Bernoulli numbers per precision: a precision that followed each point's exponents
    # (4,000 distinct ones over a sweep) had them computed afresh at almost every point.
    asked, seen = [], []

    def digamma(x):
        seen.append(mpmath.mp.prec)
        return mpmath.digamma(x)

    def recorded(x):
        asked.append(mpmath.mp.prec)
        return mpmath.digamma(x)

    points = [0.3, 7.0, 1e5, 3.5e17, 1e30, 2.5e-20]
    for x in points:
        assert accuracy._exact_value(digamma, [x]) == exact_value(recorded, [x])
    assert len(seen) == len(asked)
    assert all(p % accuracy.PRECISION_STEP == 0 and p >= a for p, a in zip(seen, asked, strict=True))
    assert len(set(seen)) < len(set(asked))
