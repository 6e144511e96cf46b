"""Structured arguments and results: named tuples, dicts and tuples of arrays (issue 16).

A rule's bodies read arrays by their own names; the public function takes
the structures apart and builds its result's structure, so each framework's
transforms see pytrees, as with a hand-written `custom_jvp` over a named tuple.
"""

from __future__ import annotations

import collections
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import generated.jax as gj
import generated.torch as gt
from rulegen.check import CheckFailed, flat_call
from rulegen.spec.errors import SpecErrors
from rulegen.spec.rules import read_rule_file, read_rules
from tests.conftest import RULES

Point = collections.namedtuple("Point", ["x", "y"])
X = np.array([0.5, 1.0, -2.0])
Y = np.array([2.0, 0.3, 1.5])


def _point_total(f, xp):
    def total(pt):
        out = f(pt)
        return xp.sum(out["a"]) + 2 * xp.sum(out["b"][0]) + 3 * xp.sum(out["b"][1])

    return total


def _expected_grad():
    return 2 * X + 2 * np.cos(X), -3 * np.sin(Y)


@pytest.mark.parametrize("name", ["point_jvp", "point_vjp"])
def test_the_point_rule_takes_a_named_tuple_and_returns_a_dict_in_torch(name):
    f = getattr(gt, name)
    x = torch.tensor(X, requires_grad=True)
    y = torch.tensor(Y, requires_grad=True)
    _point_total(f, torch)(Point(x, y)).backward()
    want = _expected_grad()
    np.testing.assert_allclose(x.grad, want[0], rtol=1e-12)
    np.testing.assert_allclose(y.grad, want[1], rtol=1e-12)
    pt = Point(torch.tensor(X), torch.tensor(Y))
    grad = torch.func.grad(_point_total(f, torch))(pt)
    assert type(grad) is Point
    np.testing.assert_allclose(grad.x, want[0], rtol=1e-12)
    batched = torch.func.vmap(f)(Point(torch.stack([pt.x, 2 * pt.x]), torch.stack([pt.y, pt.y])))
    np.testing.assert_allclose(batched["a"][1], 4 * X**2)
    if name == "point_jvp":
        ones = Point(torch.ones(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64))
        _, tangent = torch.func.jvp(f, (pt,), (ones,))
        np.testing.assert_allclose(tangent["b"][0], np.cos(X))


@pytest.mark.parametrize("name", ["point_jvp", "point_vjp"])
@pytest.mark.parametrize("held", ["none", "x", "y"])
def test_tangents_of_inputs_of_other_shapes_have_the_outputs_shape(name, held):
    # jvp broadcasts the inputs' tangents against each other before any output's tangent
    # (x_dot * cos(x) reads x alone, its output has the shape of x and y together).
    import torch.autograd.forward_ad as fwad

    f = getattr(gt, name)
    x, y = torch.tensor(X).reshape(3, 1), torch.tensor(Y[:2]) + 0.25
    x_dot, y_dot = torch.full_like(x, 2.0), torch.full_like(y, -3.0)
    with fwad.dual_level():
        pt = Point(x if held == "x" else fwad.make_dual(x, x_dot), y if held == "y" else fwad.make_dual(y, y_dot))
        out = f(pt)
        tangents = [fwad.unpack_dual(v).tangent for v in (out["a"], *out["b"])]
    xs, ys = x.numpy(), y.numpy()
    want = [2 * xs * 2.0, np.cos(xs) * 2.0, -np.sin(ys) * -3.0]
    held_outputs = {"none": (), "x": (0, 1), "y": (2,)}[held]
    for k, (got, expected) in enumerate(zip(tangents, want, strict=True)):
        if k in held_outputs:
            assert got is None or not got.any(), (k, got)
            continue
        assert got.shape == (3, 2), (k, got.shape)
        np.testing.assert_allclose(got.numpy(), np.broadcast_to(expected, (3, 2)), rtol=1e-15)
    _, (a_dot, (b0_dot, b1_dot)) = torch.func.jvp(lambda u, v: _ab(f(Point(u, v))), (x, y), (x_dot, y_dot))
    assert a_dot.shape == b0_dot.shape == b1_dot.shape == (3, 2)
    batched = torch.func.vmap(lambda u, v: torch.func.jvp(lambda p, q: _ab(f(Point(p, q))), (x, y), (u, v))[1])
    a_dots, (_, b1_dots) = batched(torch.stack([x_dot, 2 * x_dot]), torch.stack([y_dot, y_dot]))
    assert a_dots.shape == b1_dots.shape == (2, 3, 2)
    np.testing.assert_allclose(a_dots[1].numpy(), np.broadcast_to(2 * xs * 4.0, (3, 2)), rtol=1e-15)


def _ab(out):
    return out["a"], out["b"]


def test_a_tuple_input_and_a_dict_input_take_gradients_of_their_own_structure():
    grad = jax.grad(gj.hypot_pair)((3.0, 4.0))
    assert isinstance(grad, tuple) and np.allclose(grad, (0.6, 0.8))
    params = {"mu": torch.tensor(0.1, dtype=torch.float64), "sigma": torch.tensor(1.5, dtype=torch.float64)}
    x = torch.tensor([0.3, -1.0], dtype=torch.float64)
    got = torch.func.grad(lambda p: gt.gaussian_logpdf(x, p).sum())(params)
    z = (x - 0.1) / 1.5
    assert set(got) == {"mu", "sigma"}
    np.testing.assert_allclose(got["mu"], (z / 1.5).sum().item())
    np.testing.assert_allclose(got["sigma"], ((z * z - 1) / 1.5).sum().item())


def test_a_dict_result_holds_each_output_under_its_key():
    out = gt.sincos(torch.tensor([0.0, 1.0], dtype=torch.float64))
    assert list(out) == ["sin", "cos"]
    np.testing.assert_allclose(out["cos"], np.cos([0.0, 1.0]))


def test_a_dict_input_may_hold_arrays_under_keys_that_are_no_python_names():
    # affine_state: params = {"layer.weight": w, "layer.bias": b}, as a torch state_dict; the body reads w and b.
    params = {"layer.weight": jnp.asarray(X), "layer.bias": jnp.asarray(Y)}
    x = jnp.asarray([2.0, -1.0, 0.5])
    np.testing.assert_allclose(gj.affine_state(x, params), x * X + Y)
    grad = jax.grad(lambda p: gj.affine_state(x, p).sum())(params)
    assert set(grad) == {"layer.weight", "layer.bias"}
    np.testing.assert_allclose(grad["layer.weight"], x)
    np.testing.assert_allclose(grad["layer.bias"], np.ones(3))
    tparams = {k: torch.tensor(np.asarray(v)) for k, v in params.items()}
    tgrad = torch.func.grad(lambda p: gt.affine_state(torch.tensor(np.asarray(x)), p).sum())(tparams)
    assert set(tgrad) == {"layer.weight", "layer.bias"}
    np.testing.assert_allclose(tgrad["layer.weight"].numpy(), np.asarray(x))


def test_a_result_of_another_structure_fails_the_checks():
    rule = read_rules([RULES / "structures.yaml"])[0]  # point_jvp: {'a': a, 'b': (b0, b1)}
    wrong = flat_call(rule, lambda pt: {"a": pt.x, "b": [pt.x, pt.y]})
    with pytest.raises(CheckFailed, match=r"result\['b'\] is list, not a tuple of 2"):
        wrong(X, Y)
    renamed = flat_call(rule, lambda pt: {"A": pt.x, "b": (pt.x, pt.y)})
    with pytest.raises(CheckFailed, match="not a dict with keys"):
        renamed(X, Y)
    right = flat_call(rule, gj.point_jvp)
    assert len(right(X, Y)) == 3
    polar = next(r for r in read_rules([RULES / "structures.yaml"]) if r.name == "to_polar")
    as_tuple = flat_call(polar, lambda x, y: (x, y))
    with pytest.raises(CheckFailed, match=r"result is tuple, not a named tuple Polar\('r', 'theta'\)"):
        as_tuple(X, Y)
    other_fields = flat_call(polar, lambda x, y: collections.namedtuple("Polar", ["radius", "theta"])(x, y))
    with pytest.raises(CheckFailed, match="not a named tuple Polar"):
        other_fields(X, Y)


# ---------------------------------------------------------------- bad structures are refused where they are written


def _errors(tmp_path: Path, text: str) -> str:
    path = tmp_path / "bad.yaml"
    path.write_text(textwrap.dedent(text))
    with pytest.raises(SpecErrors) as caught:
        read_rule_file(path)
    return str(caught.value)


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        (
            """
            name: r
            inputs:
              pt: {fields: [x], keys: [y]}
            forward: x
            """,
            "bad.yaml:4:7",
            "one of `fields`, `keys` or `items`",
        ),
        (
            """
            name: r
            inputs:
              pt:
                items:
                  x: {static: true}
            forward: x
            """,
            "bad.yaml:5:5",
            "a structure holds arrays",
        ),
        (
            """
            name: r
            inputs:
              a: {fields: [x]}
              b: {keys: [x]}
            forward: x
            """,
            "bad.yaml:5:14",
            "the name 'x' is used twice",
        ),
        (
            """
            name: r
            inputs: [x]
            returns: {u: out, v: [w]}
            forward: x
            outputs: [out]
            """,
            "bad.yaml:4:23",
            "`returns` names 'w', which is no output of the rule",
        ),
        (
            """
            name: r
            inputs: [x]
            returns: [a]
            outputs: [a, b]
            forward: {a: x, b: x}
            """,
            "bad.yaml:4:10",
            "`returns` leaves out the output 'b'",
        ),
        (
            """
            name: r
            inputs: [x]
            returns: {a: [a, []]}
            forward: x
            """,
            "bad.yaml:4:10",
            "a non-empty list",
        ),
        (
            """
            name: r
            inputs:
              pt: {items: [x, y]}
            forward:
              torch: return x * y
            """,
            "bad.yaml:6:3",
            "a torch-only rule takes and returns flat arrays",
        ),
        (
            """
            name: r
            inputs:
              x: {key: a.b}
            forward: x
            """,
            "bad.yaml:4:3",
            "`key` names the dict key of an array in a `keys` structure; this input stands alone",
        ),
        (
            """
            name: r
            inputs:
              pt: {fields: {x: {key: a.b}, y: {}}}
            forward: x * y
            """,
            "bad.yaml:4:",
            "`key` names a dict's key; a fields structure has none",
        ),
        (
            """
            name: r
            inputs:
              d: {keys: {x: {key: y}, y: {}}}
            forward: x * y
            """,
            "bad.yaml:4:",
            "the dict's key 'y' holds two arrays",
        ),
    ],
    ids=[
        "two_kinds",
        "static_inside",
        "leaf_twice",
        "unknown_output",
        "output_left_out",
        "empty_tuple",
        "torch_only",
        "key_alone",
        "key_in_fields",
        "key_twice",
    ],
)
def test_a_bad_structure_is_refused_at_its_place(tmp_path, text, where, message):
    found = _errors(tmp_path, text)
    assert message in found
    assert where in found, found


@pytest.mark.parametrize(
    ("returns", "message"),
    [
        ("{namedtuple: 3d, fields: [out]}", "a named tuple's class name is a Python identifier, not '3d'"),
        ("{namedtuple: torch, fields: [out]}", "'torch' is a key of the rule format"),
        ("{namedtuple: _P, fields: [out]}", "starts with `_`"),
        ("{namedtuple: r, fields: [out]}", "'r' is the rule's own function or class name"),
        ("{namedtuple: R, fields: [out]}", "'R' is the rule's own function or class name"),
        ("{namedtuple: x, fields: [out]}", "the name 'x' is used twice"),
        ("{namedtuple: P, fields: {_a: out}}", "a named tuple's field is an identifier not starting with `_`"),
        ("{namedtuple: P, fields: {class: out}}", "not 'class'"),
        ("{namedtuple: P, fields: [out], kind: x}", "takes `namedtuple` (its class name) and `fields`, not ['kind']"),
        ("{namedtuple: P}", "a named tuple's `fields` is a non-empty list"),
        ("[{namedtuple: P, fields: [out]}, {namedtuple: P, fields: [w]}]", "the name 'P' is used twice"),
    ],
    ids=[
        "not_identifier",
        "reserved",
        "underscore",
        "function",
        "class",
        "input",
        "field_underscore",
        "keyword",
        "extra_key",
        "no_fields",
        "twice",
    ],
)
def test_a_bad_named_tuple_is_refused_at_its_place(tmp_path, returns, message):
    found = _errors(tmp_path, f"name: r\ninputs: [x]\nreturns: {returns}\nforward: {{out: x, w: x}}\n")
    assert message in found
    assert "bad.yaml:3:" in found, found


def test_a_deeply_nested_returns_is_refused_not_recursed(tmp_path):
    nested = "a"
    for _ in range(40):
        nested = f"[{nested}]"
    found = _errors(tmp_path, f"name: r\ninputs: [x]\nreturns: {nested}\nforward: x\n")
    assert "deeper than" in found


def test_inputs_left_out_take_their_defaults_through_the_structures(tmp_path):
    # rulegen test's scalars check calls with the defaults left out; it raised StopIteration.
    path = tmp_path / "r.yaml"
    path.write_text("name: r\ninputs:\n  d: {keys: [u, v]}\n  n: {static: true, default: 2}\nforward: u * v**n\n")
    rule = read_rule_file(path)[0]
    seen = []
    call = flat_call(rule, lambda d, n=2: seen.append((d, n)) or d["u"] * d["v"] ** n)
    assert call(2.0, 3.0) == 18.0 and call(2.0, 3.0, 3) == 54.0
    assert seen == [({"u": 2.0, "v": 3.0}, 2), ({"u": 2.0, "v": 3.0}, 3)]


def _wrong_structures(xp):
    """(rule, arguments given wrongly, the words the error must hold) for each way of getting a structure wrong."""
    x, w, b = xp.asarray([1.0, 2.0]), xp.asarray([0.5, 0.5]), xp.asarray([0.1, 0.2])
    params = {"layer.weight": w, "layer.bias": b}
    return [
        ("point_jvp", (tuple(Point(x, w)),), ["point_jvp", "pt", "fields x, y", "'tuple' object has no attribute 'x'"]),
        ("point_vjp", ({"x": x, "y": w},), ["point_vjp", "pt", "fields x, y", "'dict' object has no attribute 'x'"]),
        ("affine_state", (x, {"layer.weight": w}), ["affine_state", "params", "KeyError('layer.bias')"]),
        ("affine_state", (x, {**params, "layer.scale": b}), ["affine_state", "params", "not [", "'layer.scale'"]),
        ("affine_state", (x, (w, b)), ["affine_state", "params", "'layer.weight'", "tuple indices"]),
        ("hypot_pair", ((x, w, b),), ["hypot_pair", "xy", "tuple of 2: (x, y)", "expected 2"]),
        ("gaussian_logpdf", (x, {"mu": w}), ["gaussian_logpdf", "params", "KeyError('sigma')"]),
    ]


@pytest.mark.parametrize("backend", ["jax", "torch", "jax.jit"])
def test_a_structure_given_wrongly_is_refused_naming_the_rule_the_argument_and_the_field(backend):
    package, xp = (gt, torch) if backend == "torch" else (gj, jnp)
    for rule, arguments, words in _wrong_structures(xp):
        f = getattr(package, rule)
        with pytest.raises((TypeError, ValueError)) as caught:
            (jax.jit(f) if backend == "jax.jit" else f)(*arguments)
        message = str(caught.value)
        assert all(word in message for word in words), (rule, words, message)
