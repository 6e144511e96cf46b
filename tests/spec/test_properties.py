"""Property tests over large input spaces: the YAML loader, the expression parser, the printers."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import sympy as sp
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rulegen.derive.expr import MAX_INT_DIGITS, parse_expression
from rulegen.plan.code import import_statements
from rulegen.plan.printers import print_jax, print_torch
from rulegen.spec.errors import Loc, SpecError
from rulegen.spec.source import YamlStr, load_yaml

X, Y = sp.symbols("x y", real=True)
SYMBOLS = {"x": X, "y": Y}

names = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True).filter(
    lambda s: s not in {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}
)
scalars = st.one_of(
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.text(alphabet="abcdefghij klmnop_()+*-/", min_size=1, max_size=12).filter(lambda s: s.strip() == s),
)
documents = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(names, inner, max_size=4)),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(document=st.dictionaries(names, documents, min_size=1, max_size=5))
def test_loader_reads_what_safe_load_reads_and_locates_every_string(document):
    text = yaml.safe_dump(document, sort_keys=False)
    loaded = load_yaml(Path("doc.yaml"), text)
    assert loaded == yaml.safe_load(text)
    lines = text.splitlines()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
        elif isinstance(node, YamlStr) and "\n" not in node and not node.block:
            line = lines[node.loc.line - 1]
            assert line[node.loc.col - 1 :].startswith(str(node)[:1]), (node, node.loc, line)

    walk(loaded)


def _expressions() -> st.SearchStrategy[sp.Expr]:
    leaves = st.one_of(
        st.sampled_from([X, Y]),
        st.integers(-5, 5).map(sp.Integer),
        st.fractions(min_value=-3, max_value=3, max_denominator=7).map(sp.Rational),
    )
    unary = st.sampled_from([sp.sin, sp.cos, sp.exp, sp.tanh, sp.atan, sp.erf, sp.Abs])

    def extend(inner: st.SearchStrategy[sp.Expr]) -> st.SearchStrategy[sp.Expr]:
        return st.one_of(
            st.tuples(unary, inner).map(lambda p: p[0](p[1])),
            st.tuples(inner, inner).map(lambda p: p[0] + p[1]),
            st.tuples(inner, inner).map(lambda p: p[0] * p[1]),
            st.tuples(inner, inner).map(lambda p: p[0] - p[1]),
            st.tuples(inner, st.integers(1, 4)).map(lambda p: p[0] ** p[1]),
        )

    return st.recursive(leaves, extend, max_leaves=8)


@settings(max_examples=200, deadline=None)
@given(expr=_expressions())
# Powers of powers multiply out to an integer longer than a rule may write (hypothesis found 5**44-sized ones).
@example(expr=X + (sp.Integer(5) ** 4) ** 4 * (sp.Integer(5) ** 4) ** 4 * sp.Integer(5) ** 13)
def test_printed_expressions_parse_back_to_themselves(expr):
    text = sp.sstr(expr)
    if max((len(digits) for digits in re.findall(r"\d+", text)), default=0) > MAX_INT_DIGITS:
        # Outside what a rule file may write: refused at its place, never parsed (an untrusted file's bomb).
        with pytest.raises(SpecError, match=rf"p\.yaml:1:\d+: integer literal longer than {MAX_INT_DIGITS} digits"):
            parse_expression(text, SYMBOLS, Loc("p.yaml", 1, 1))
        return
    parsed = parse_expression(text, SYMBOLS, Loc("p.yaml", 1, 1))
    assert sp.simplify(parsed - expr) == 0


@settings(max_examples=120, deadline=None)
@given(expr=_expressions())
# Integers beyond int64, which the frameworks refuse as Python ints (JAX: OverflowError).
@example(expr=X + sp.Integer(2**64))
@example(expr=X * sp.Integer(-(2**70)) + Y)
# A number beyond float, which Python's math.exp refuses (OverflowError) where the frameworks give inf.
@example(expr=sp.exp(sp.Integer(729)))
@example(expr=X - sp.exp(sp.Integer(729)))
def test_both_printers_compute_what_sympy_computes(expr):
    import jax.numpy as jnp
    import torch

    points = {"x": np.array([-1.3, 0.4, 2.1]), "y": np.array([0.7, -0.2, 1.5])}
    reference = sp.lambdify([X, Y], expr, "mpmath")
    expected = np.array([float(reference(a, b)) for a, b in zip(points["x"], points["y"], strict=True)])
    for printer, convert in ((print_jax, jnp.asarray), (print_torch, torch.from_numpy)):
        value, imports = printer(expr)
        code = value.text
        namespace: dict = {}
        exec("\n".join(import_statements(imports)) + f"\ndef f(x, y):\n    return {code}\n", namespace)
        got = namespace["f"](convert(points["x"]), convert(points["y"]))
        got = np.broadcast_to(np.asarray(got.numpy() if hasattr(got, "numpy") else got, dtype=float), (3,))
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12, err_msg=code)


@pytest.mark.parametrize("text", ["x * (x / where(x != 0, x, 1))", "(x / where(x != 0, x, 1)) * x"])
def test_a_written_quotient_beside_a_factor_of_its_own_is_computed_as_written(text):
    # sympy made x * (x / w) into x**2 / w: inf past |x| = 1.3e154, where the written order gives x.
    import torch

    value, imports = print_torch(parse_expression(text, SYMBOLS, Loc("p.yaml", 1, 1)))
    code = value.text
    namespace: dict = {}
    exec("\n".join(import_statements(imports)) + f"\ndef f(x):\n    return {code}\n", namespace)
    x = torch.tensor([6.4e266, -1.5, 0.0], dtype=torch.float64)
    assert namespace["f"](x).tolist() == [6.4e266, -1.5, 0.0]


def test_a_quotient_that_shares_nothing_with_its_factor_is_sympy_s():
    # Canonical forms read sympy's products (exp(x) / (1 + exp(x)) is a sigmoid).
    assert parse_expression("x * (y / 2)", SYMBOLS, Loc("p.yaml", 1, 1)) == X * Y / 2
    parsed = parse_expression("exp(x) * (1 / (1 + exp(x)))", SYMBOLS, Loc("p.yaml", 1, 1))
    assert parsed == sp.exp(X) / (1 + sp.exp(X))
