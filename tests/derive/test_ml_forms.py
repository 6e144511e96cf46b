"""Losses and activations as ML code writes them, searched into forms that are finite and accurate.

A log-cosh loss, `log(cosh(x))`: cosh overflows from |x| = 710 in float64 (89 in float32), where
log(cosh(x)) is about |x| - log 2: the value was inf there, and its derivative sinh(x) / cosh(x),
inf / inf = nan, where it is tanh(x) = +-1.

Softsign, `x / (1 + |x|)`: sympy's derivative keeps |x| - x sign(x) + 1 apart, 9 bits off in torch.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import sympy as sp
from sympy.codegen.cfunctions import log1p

from rulegen.derive.expr import lambdified
from rulegen.derive.functions import softplus
from rulegen.derive.partials import derive_rule
from rulegen.derive.stabilise.families import _identities
from rulegen.derive.stabilise.points import _numpy_implementations
from tests.conftest import rules_from

x = sp.Symbol("x", real=True)


def test_the_log_of_a_cosh_is_taken_without_the_cosh() -> None:
    found = _identities(sp.log(sp.cosh(x)))
    assert found == sp.Abs(x) + softplus(-2 * sp.Abs(x)) - sp.log(2), found
    assert _identities(3 * sp.sinh(x) / sp.cosh(x)) == 3 * sp.tanh(x)
    assert _identities(sp.sinh(x) / sp.cosh(x) ** 2) == sp.tanh(x) / sp.cosh(x)
    # A sinh over another argument's cosh is no tanh.
    assert not _identities(sp.sinh(x) / sp.cosh(2 * x)).has(sp.tanh)


def test_log_cosh_is_finite_where_cosh_overflows(tmp_path: Path) -> None:
    (rule,) = rules_from(tmp_path, "name: log_cosh\ninputs: [x]\nforward: log(cosh(x))\n", "log_cosh.yaml")
    d = derive_rule(rule)
    chosen = {c.quantity: c.chosen for c in d.choices}
    points = np.array([-1e300, -800.0, -100.0, 1e-3, 0.5, 100.0, 800.0, 1e300])
    with np.errstate(all="ignore"):
        value = lambdified((x,), chosen["out"], [_numpy_implementations(), "numpy"])(points)
        slope = lambdified((x,), chosen["dout/dx"], [_numpy_implementations(), "numpy"])(points)
    np.testing.assert_allclose(value[[1, -2]], 800 - np.log(2), rtol=1e-15)
    assert np.isfinite(value).all() and np.isfinite(slope).all(), (value, slope)
    np.testing.assert_allclose(slope, np.tanh(points), rtol=1e-15)


def test_a_variable_times_its_sign_is_its_magnitude() -> None:
    y = sp.Symbol("y", real=True)
    assert _identities(3 * x * sp.sign(x)) == 3 * sp.Abs(x)
    assert _identities(sp.Abs(x) - x * sp.sign(x) + 1) == 1
    assert _identities(y * sp.sign(x)) == y * sp.sign(x)


def test_a_root_of_one_plus_a_squared_ratio_is_a_hypot() -> None:
    # A smooth Huber loss's partial in x, x/sqrt(1 + x**2/delta**2): the squared ratio overflows past
    # |x/delta| = 1.3e154 and the partial was 0 there, where it is delta (62 bits, 10.4 mean over the ML suite's
    # points).  1 is 1**2 and x**2/delta**2 is (x/delta)**2: the root is hypot(1, x/delta).
    from rulegen.derive.functions import hypot
    from rulegen.derive.stabilise.families import _norm_form

    delta = sp.Symbol("delta", positive=True)
    form = _norm_form(x / sp.sqrt(1 + x**2 / delta**2))
    assert form.has(hypot), form
    fn = lambdified((x, delta), form, modules=[_numpy_implementations(), "numpy"])
    got = fn(np.asarray([5.78e177, -4.44e259, 3.0]), np.asarray([1.92, 0.95, 4.0]))
    np.testing.assert_allclose(got, [1.92, -0.95, 3.0 / np.sqrt(1 + (3.0 / 4.0) ** 2)], rtol=1e-15)
    assert _norm_form(x / sp.sqrt(4 + x**2)).has(hypot)  # 4 is 2**2
    assert not _norm_form(x / sp.sqrt(2 + x**2)).has(hypot)  # 2 is no rational's square


def test_an_identity_s_constant_term_is_expanded_only_where_it_can_be_one(monkeypatch) -> None:
    # `c f + k` joins where k is another term equal to -c times a constant; `expand` decided it for every pair of
    # terms, and over a Beta KL's series that took 650 s of CPU, past the rule's time limit.  A ratio at one point
    # that is no such constant now says no first.
    from rulegen.derive.stabilise import families

    s, loc = sp.symbols("s loc", positive=True)
    expanded = []
    expand = sp.expand
    monkeypatch.setattr(families.sp, "expand", lambda e, *a, **k: expanded.append(e) or expand(e, *a, **k))
    c = (loc - x) / s**2
    assert families._constant_ratio((x - loc) / s**2, c) == 1
    assert expanded
    expanded.clear()
    assert families._constant_ratio((x + loc) ** 3 / s, c) is None
    assert families._constant_ratio(sp.loggamma(x + loc) * s, c) is None
    assert not expanded
    # Where no number comes of it (a function numpy knows and sympy does not evaluate), expand decides as before.
    assert families._constant_ratio(-softplus(x / s) * loc, softplus(x / s) * loc) == 1


def test_a_sum_s_pairs_are_expanded_only_where_an_identity_can_join_them(monkeypatch) -> None:
    # Each pair of a sum's terms was expanded to ask whether their coefficients cancel, whatever their functions:
    # over a Beta KL's series terms, most of its cold build.  Two calls of different functions, or coefficients
    # whose ratio at a point is not -1, are no pair, and nothing is expanded for them.
    from rulegen.derive.stabilise import families

    a, b = sp.symbols("a b", positive=True)
    expanded = []
    expand = sp.expand
    monkeypatch.setattr(families.sp, "expand", lambda e, *a, **k: expanded.append(e) or expand(e, *a, **k))
    unlike = a * b * sp.sin(x) - a * b * sp.cos(a) + (a + b) * sp.exp(b)
    assert families._rewrite_sum(unlike) == unlike
    not_opposite = a * sp.log(x) + b * sp.log(a) + (a + b) ** 2 * sp.log(b)
    assert families._rewrite_sum(not_opposite) == not_opposite
    assert not expanded
    # A pair that does cancel is still joined: (a + b) (log(x) - log(a)), by how close x and a are.
    joined = families._rewrite_sum((a + b) * sp.log(x) - (a + b) * sp.log(a) + b)
    assert joined.has(log1p((x - a) / a))
