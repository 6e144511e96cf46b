"""The series family skips the expansion at infinity of an expression that grows or decays exponentially in the
variable: there is no expansion in powers of 1/v, and sympy's search for one takes minutes of CPU (a log-likelihood
written log(1 - 1/(1 + exp(-z))) was refused by the derive stage's time limit)."""

from __future__ import annotations

import sympy as sp

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
