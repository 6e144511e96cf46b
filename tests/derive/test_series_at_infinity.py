"""The series family skips the expansion at infinity of an expression that grows or decays exponentially in the
variable: there is no expansion in powers of 1/v, and sympy's search for one takes minutes of CPU (a log-likelihood
written log(1 - 1/(1 + exp(-z))) was refused by the derive stage's time limit)."""

from __future__ import annotations

import sympy as sp

from rulegen.derive.stabilise.asymptotic import _guarded, _highest_order_first
from rulegen.derive.stabilise.families import _candidates, _grows_exponentially

z = sp.Symbol("z", real=True)


def test_an_exponential_of_the_variable_has_no_series_at_infinity():
    assert _grows_exponentially(sp.log(1 - 1 / (1 + sp.exp(-z))), z)
    assert _grows_exponentially(sp.tanh(z) / z, z)
    assert not _grows_exponentially(sp.sqrt(z + 1) - sp.sqrt(z), z)
    assert not _grows_exponentially(sp.exp(sp.Symbol("w")) * z, z)


def test_the_families_of_a_written_log_sigmoid_complement_skip_it():
    families = [family for family, _ in _candidates(sp.log(1 - 1 / (1 + sp.exp(-z))), (z,))]
    assert "series at 0" in families and "series at infinity" not in families, families


def test_a_root_difference_keeps_its_series_at_infinity():
    families = [family for family, _ in _candidates(sp.sqrt(z + 1) - sp.sqrt(z), (z,))]
    assert "series at infinity" in families, families


def test_a_series_term_s_conditions_are_in_the_raw_arguments():
    # A series term is fed its argument where it is past the threshold (64 elsewhere); the conditions of its own
    # `where` (the highest order alone where both orders are huge) take the argument as it is.  Fed into a
    # condition, the `where` was folded by sympy into if-then-elses over every branch: seconds per term, garbage
    # constants in the generated code ((0 + 32)/1), or a RecursionError that left the family out.
    a = sp.Symbol("a", positive=True)
    b = sp.Dummy("b", positive=True)
    series = _highest_order_first([(2, 1 / b**2), (1, -sp.Rational(1, 2) / b)]) + sp.log(b)
    _, guarded = _guarded(series, {a: b}, a > 32, [], None)
    (where,) = (t for t in guarded if isinstance(t, sp.Piecewise))
    fed = sp.Piecewise((a, a > 32), (64, True))
    assert not any(c.has(sp.Piecewise, sp.ITE) for _, c in where.args)
    assert where.args[0].cond.free_symbols == {a}
    assert where.args[0].expr.has(fed) and where.args[1].expr.has(fed)
    assert any(t.has(sp.log(fed)) for t in guarded)
