"""The JAX planner writes `1 - tanh(u)**2` as `(1 - tanh(u)) * (1 + tanh(u))`, and leaves other expressions be."""

from __future__ import annotations

import sympy as sp

from rulegen.plan.jax import _tanh_derivative_factored

x, y = sp.symbols("x y")


def test_one_minus_a_squared_tanh_is_factored():
    factored = _tanh_derivative_factored(y * (1 - sp.tanh(2 * x) ** 2))
    assert factored == y * (1 - sp.tanh(2 * x)) * (1 + sp.tanh(2 * x))


def test_an_expression_without_tanh_is_not_searched_for_the_pattern(monkeypatch):
    # The pattern's match at every subexpression was a third of a build's time, tanh or not.
    searched = []
    replace = sp.Basic.replace
    monkeypatch.setattr(sp.Basic, "replace", lambda self, *a, **k: searched.append(self) or replace(self, *a, **k))
    expr = sp.exp(x) * sp.sin(y) / (1 + sp.exp(-x)) ** 2
    assert _tanh_derivative_factored(expr) is expr
    assert not searched
