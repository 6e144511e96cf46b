"""`domain` and `assume` in built rules: the domain never changes the generated code, an assumption does.

An assumption read off the sample domain once changed the function itself:
`atan2(y, x)` with `x` sampled in [0.5, 3] was generated as `atan(y / x)`.
"""

from __future__ import annotations

import importlib
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.special as sps
import torch

from rulegen.render.build import generate_rule
from tests.conftest import built_package
from tests.spec.test_assume import _one_rule

RULES = """
rules:
  - name: polar
    inputs:
      x: {domain: [0.5, 3]}
      y: {}
    outputs: [r, theta]
    forward:
      r: hypot(x, y)
      theta: atan2(y, x)
  - name: magnitude
    inputs:
      x: {domain: [0.5, 3]}
    forward: sqrt(x**2) + Abs(x) * Max(x, 0)
  - name: i1e_of_negative
    inputs:
      x: {domain: [0.5, 3]}
    forward: bessel_i1e(x)
  - name: magnitude_assumed
    inputs:
      x: {assume: positive}
    forward: sqrt(x**2)
"""


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    with built_package(tmp_path_factory.mktemp("assume"), RULES, "rg_assume") as folder:
        yield folder, importlib.import_module("rg_assume.jax"), importlib.import_module("rg_assume.torch")


def _torch_value_and_grad(f, *args):
    tensors = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in args]
    out = f(*tensors)
    total = sum(o.sum() for o in out) if isinstance(out, tuple) else out.sum()
    total.backward()
    values = tuple(o.item() for o in out) if isinstance(out, tuple) else out.item()
    return values, [t.grad.item() for t in tensors]


def test_atan2_outside_the_sample_domain(package):
    _, jax_pkg, torch_pkg = package
    expected = (math.sqrt(2), 3 * math.pi / 4)
    np.testing.assert_allclose(jax_pkg.polar(-1.0, 1.0), expected, rtol=1e-15)
    values, grads = _torch_value_and_grad(torch_pkg.polar, -1.0, 1.0)
    np.testing.assert_allclose(values, expected, rtol=1e-15)
    # d(r + theta)/dx = x/r - y/r**2, d/dy = y/r + x/r**2 at (-1, 1)
    np.testing.assert_allclose(grads, [-1 / math.sqrt(2) - 0.5, 1 / math.sqrt(2) - 0.5], rtol=1e-14)
    jax_grads = jax.grad(lambda x, y: sum(jax_pkg.polar(x, y)), argnums=(0, 1))(-1.0, 1.0)
    np.testing.assert_allclose(jax_grads, grads, rtol=1e-14)


@pytest.mark.parametrize("x", [-2.0, -0.5])
def test_simplifications_the_domain_would_allow_are_not_made(package, x):
    _, jax_pkg, torch_pkg = package
    value, (grad,) = _torch_value_and_grad(torch_pkg.magnitude, x)
    assert value == pytest.approx(abs(x))
    assert grad == pytest.approx(-1.0)
    assert float(jax_pkg.magnitude(x)) == pytest.approx(abs(x))
    assert float(jax.grad(jax_pkg.magnitude)(x)) == pytest.approx(-1.0)


def test_a_derivative_is_right_on_the_whole_line(package):
    _, jax_pkg, torch_pkg = package
    x = -1.5
    # i1e(x) = exp(-|x|) i1(x): its derivative is i0e(x) - (sign(x) + 1/x) i1e(x).
    exact = sps.i0e(x) - (np.sign(x) + 1 / x) * sps.i1e(x)
    assert float(jax.grad(jax_pkg.i1e_of_negative)(x)) == pytest.approx(exact, rel=1e-13)
    _, (grad,) = _torch_value_and_grad(torch_pkg.i1e_of_negative, x)
    assert grad == pytest.approx(exact, rel=1e-13)


def test_an_explicit_assumption_simplifies(package):
    folder, jax_pkg, _ = package
    assert "sqrt" not in (folder / "jax" / "magnitude_assumed.py").read_text().split("def magnitude_assumed")[1]
    assert float(jax_pkg.magnitude_assumed(2.0)) == 2.0
    assert float(jnp.asarray(jax.grad(jax_pkg.magnitude_assumed)(2.0))) == 1.0


@pytest.mark.parametrize("domain", ["[0.5, 3]", "[-3, -1]", "[1e-3, 1e3]"])
def test_the_domain_never_changes_generated_code(tmp_path, domain):
    (default,) = _one_rule(tmp_path, "  x: {}\n  y: {}")
    (narrowed,) = _one_rule(tmp_path, f"  x: {{domain: {domain}}}\n  y: {{domain: {domain}}}")
    assert _without_header(generate_rule(narrowed)) == _without_header(generate_rule(default))


def _without_header(files: dict[str, str]) -> dict[str, str]:
    """The modules' code: less comments and docstrings, which name the source and the sampled domain."""
    import ast

    def code(text: str) -> str:
        tree = ast.parse(text)
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            first = body[0] if isinstance(body, list) and body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                body[0] = ast.Pass()
        return ast.unparse(tree)

    return {name: code(text) for name, text in files.items()}


def test_the_generated_docstrings_say_what_an_assumption_leaves_out(package):
    """Called outside its assumption, a rule silently computes another function: its help() says so."""
    _, jax_pkg, torch_pkg = package
    for module in (jax_pkg, torch_pkg):
        doc = " ".join(module.magnitude_assumed.__doc__.split())
        assert "Assumes x > 0: the formulas were simplified with this, so outside it the result" in doc, doc
        assert "Assumes" not in module.magnitude.__doc__


def test_no_bundled_rule_computes_otherwise_when_its_domains_are_taken_away():
    # The stabilising search once sampled the domain, so a narrower one chose other forms (the probe above at
    # [0.5, 3]): every rule of rules/ and of the shared examples is generated again with each input's domain the
    # default and no joint condition, and its code (less docstrings and comments) must not move.
    from pathlib import Path

    from rulegen.spec.rules import read_rules, rule_files

    root = Path(__file__).resolve().parents[2]
    moved = []
    for folder in (root / "rules", root.parent / "shared" / "examples"):
        rules = read_rules(rule_files([folder]))
        names = [r.name for r in rules]
        for rule in rules:
            inputs = tuple(i.model_copy(update={"domain": (-3.0, 3.0), "domain_given": False}) for i in rule.inputs)
            bare = rule.model_copy(update={"inputs": inputs, "domain": None})
            if _without_header(generate_rule(bare, names)) != _without_header(generate_rule(rule, names)):
                moved.append(rule.name)
    assert moved == []
