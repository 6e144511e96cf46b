"""A difference of two softplus calls, which a log-likelihood's partial in its label is
(log(sigmoid(z)) - log(1 - sigmoid(z)) = -softplus(-z) + softplus(z)): the search finds it without cancellation."""

from __future__ import annotations

import sympy as sp

from rulegen.derive.functions import sigmoid, softplus
from rulegen.derive.stabilise import Sampling, admissible, stabilise
from rulegen.derive.stabilise.families import _identities
from rulegen.spec.rules import Domain

z = sp.Symbol("z", real=True)
WHOLE_LINE = Sampling(((z, Domain()),))


def test_softplus_of_opposite_arguments_differ_by_the_argument():
    # At z = 1e-20 both softplus calls are log(2) to every digit and their difference is 0 for 1e-20: over the
    # whole line the derived form measures 12.6 bits (float64), 5.9 (float32).
    derived = -softplus(-z) + softplus(z)
    choice = stabilise(derived, WHOLE_LINE, quantity="dout/dy")
    assert choice.chosen == z, choice.chosen
    assert choice.bits_after[0] < 0.5 and choice.bits_before[0] > 10, (choice.bits_before, choice.bits_after)
    assert admissible(z, derived, WHOLE_LINE, 0)


def test_softplus_of_other_arguments_differ_by_a_log1p():
    # (1 + exp(a)) / (1 + exp(b)) is 1 + sigmoid(b) expm1(a - b): a - b is taken symbolically first.
    joined = _identities(softplus(z + sp.Rational(1, 1024)) - softplus(z))
    assert not joined.has(softplus) and joined.has(sigmoid), joined
    for at in (-3.0, 0.0, 1e-3, 5.0):
        exact = sp.log(1 + sp.exp(sp.Float(at, 50) + sp.Rational(1, 1024))) - sp.log(1 + sp.exp(sp.Float(at, 50)))
        value = joined.subs(z, sp.Float(at, 50)).rewrite(sp.exp).evalf(50)
        assert abs(value - exact) <= 1e-40 * abs(exact), (at, value, exact)
