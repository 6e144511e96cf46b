"""The route table of `rulegen.derive.routes`, row by row, and the routes bundled rules take."""

from __future__ import annotations

import pytest

from rulegen.derive.routes import Gives, JaxRoute, Source, choose_routes

ROWS = [
    # (what the rule gives, JAX route, torch jvp, torch backward, backends without forward mode)
    (Gives("r", symbolic=False, jvp=False, vjp=True, torch_only=True), "bridge", "transpose", "given", {"jax"}),
    (Gives("r", symbolic=False, jvp=True, vjp=False, host=True), "primitive", "given", "transpose", set()),
    (Gives("r", symbolic=False, jvp=False, vjp=True, host=True), "primitive", "transpose", "given", set()),
    (
        Gives("r", symbolic=False, jvp=False, vjp=True, host=True, true_derivative=False),
        "primitive",
        "none",
        "given",
        {"jax", "torch"},
    ),
    (Gives("r", symbolic=False, jvp=False, vjp=False), "plain", "none", "none", set()),
    (Gives("r", symbolic=False, jvp=True, vjp=True, mode="vjp"), "custom_vjp", "given", "given", {"jax"}),
    (Gives("r", symbolic=False, jvp=True, vjp=True), "linear_map", "given", "given", set()),
    (Gives("r", symbolic=False, jvp=True, vjp=False), "custom_jvp", "given", "transpose", set()),
    (Gives("r", symbolic=False, jvp=False, vjp=True), "transpose", "transpose", "given", set()),
    (
        Gives("r", symbolic=False, jvp=False, vjp=True, true_derivative=False),
        "custom_vjp",
        "none",
        "given",
        {"jax", "torch"},
    ),
    (Gives("r", symbolic=True, jvp=False, vjp=False), "custom_jvp", "derived", "derived", set()),
    (Gives("r", symbolic=True, jvp=True, vjp=True), "linear_map", "given", "given", set()),
    (Gives("r", symbolic=True, jvp=False, vjp=False, mode="vjp"), "custom_vjp", "derived", "derived", {"jax"}),
]


@pytest.mark.parametrize(("gives", "jax", "torch_jvp", "torch_backward", "no_forward"), ROWS)
def test_the_route_table(gives, jax, torch_jvp, torch_backward, no_forward):
    routes = choose_routes(gives)
    assert (routes.jax, routes.torch_jvp, routes.torch_backward) == (jax, torch_jvp, torch_backward)
    assert set(routes.no_forward_mode) == no_forward
    assert isinstance(routes.jax, JaxRoute) and isinstance(routes.torch_jvp, Source)


@pytest.mark.parametrize(
    ("name", "route"),
    [
        ("log1pexp", "custom_jvp"),
        ("clip_gradient", "custom_vjp"),
        ("softmax", "transpose"),
        ("l2_normalize", "linear_map"),
        ("scipy_erfcx", "primitive"),
        ("torch_mish", "bridge"),
    ],
)
def test_bundled_rules_take_the_routes_their_bodies_call_for(name, route):
    from rulegen.derive.partials import derive_rule
    from rulegen.spec.rules import read_rules, rule_files
    from tests.conftest import RULES

    rules = {r.name: r for r in read_rules(rule_files([RULES]))}
    assert derive_rule(rules[name], rules).routes.jax == route


def test_show_prints_the_routes_above_the_code(monkeypatch):
    from typer.testing import CliRunner

    from rulegen.cli import app
    from tests.conftest import ROOT

    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(app, ["show", "clip_gradient", "--backend", "jax"])
    assert result.exit_code == 0, result.output
    first = result.output.splitlines()[0]
    assert first.startswith("routes: JAX: custom_vjp; torch: jvp none, backward given")
    assert "no forward mode in jax or torch: clip_gradient has no forward mode" in first
