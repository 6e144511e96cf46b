"""derive/saved.py: what the planners read beyond the partials is derived once, on the forms the search chose."""

from __future__ import annotations

from pathlib import Path

import pytest
import sympy as sp

from rulegen.derive.partials import Derivation, derive_rule
from rulegen.derive.saved import as_factor
from tests.conftest import rules_from


def _derived(tmp_path: Path, text: str) -> Derivation:
    (rule,) = rules_from(tmp_path, text, "r.yaml")
    d = derive_rule(rule)
    assert isinstance(d, Derivation)
    return d


@pytest.mark.parametrize(
    ("derivative", "derived"),
    [("cos(x) * exp(x) + sin(x) * exp(x)", True), ("exp(x) * (sin(x) + cos(x))", True), ("exp(x)", False)],
)
def test_whether_a_given_partial_is_sympys_is_in_the_derivation(tmp_path: Path, derivative: str, derived: bool) -> None:
    d = _derived(tmp_path, f"name: r\ninputs: [x]\nforward: sin(x) * exp(x)\nderivatives:\n  x: {derivative}\n")
    assert d.given_are_derived is derived


def test_the_intermediates_torch_saves_and_their_partials_are_in_the_derivation(tmp_path: Path) -> None:
    d = _derived(tmp_path, "name: r\ninputs: [x]\nforward: tanh(x) * x\n")
    ((expr, symbol),) = d.saved
    assert str(expr) == "tanh(x)" and str(symbol) == "saved_tanh"
    assert dict(d.saved_partials) == {("saved_tanh", "x"): 1 - symbol**2}


def test_an_outputs_tangent_chained_through_a_saved_intermediate_is_in_the_derivation(tmp_path: Path) -> None:
    d = _derived(tmp_path, "name: r\ninputs: [x, y]\nforward: sin(x) * y\n")
    ((_, saved),) = d.saved
    ((output, terms),) = d.chained_tangents
    dot = d.value_symbol
    assert output == "out" and set(terms) == {(saved, dot("y_dot")), (d.symbols["y"], dot(f"{saved}_dot"))}


def test_a_given_partial_not_sympys_is_not_chained(tmp_path: Path) -> None:
    d = _derived(tmp_path, "name: r\ninputs: [x, y]\nforward: sin(x) * y\nderivatives:\n  x: cos(x) * y\n  y: 1.0\n")
    assert d.chained_tangents == ()


def test_an_output_torch_s_autodiff_would_keep_is_read_where_the_backward_computes_it_again(tmp_path: Path) -> None:
    # torch's hypot backward reads its result (`grad * self / result`): the output is kept, not computed again
    # for the partials of y / hypot(x, y), which divide by hypot(x, y)**2 (atan2's are over their binade).
    d = _derived(
        tmp_path,
        "name: pol\ninputs: [x, y]\noutputs: [r, theta]\nforward:\n  r: hypot(x, y)\n  theta: y / hypot(x, y)\n",
    )
    ((expr, symbol),) = d.saved
    assert str(expr) == "hypot(x, y)" and str(symbol) == "r"


def test_reading_a_saved_value_leaves_the_parts_without_it_as_they_are(monkeypatch: pytest.MonkeyPatch) -> None:
    # Rebuilt, each Piecewise and Max/Min of a partial re-runs sympy's evaluation: minutes for a Beta KL's partials.
    x, y, s = sp.symbols("x y s")
    shared = sp.Piecewise((sp.Max(x, y), x > 0), (sp.Min(x, y), True))
    expr = sp.exp(x) * sp.sin(y) + sp.cos(shared) + shared**2
    evaluated = []
    monkeypatch.setattr(sp.Piecewise, "eval", classmethod(lambda cls, *a: evaluated.append(a)))
    assert as_factor(expr, sp.sin(y), s) == sp.exp(x) * s + sp.cos(shared) + shared**2
    assert as_factor(expr, sp.tan(y), s) is expr
    assert evaluated == []
