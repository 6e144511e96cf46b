"""Structured arguments and results in built rules: pytrees under every transform, refused alike when wrong.

A rule's bodies read arrays by their own names; the public function takes
the structures apart and builds its result's structure, so each framework's
transforms see pytrees, as with a hand-written `custom_jvp` over a named tuple.
"""

from __future__ import annotations

import importlib
import keyword
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import generated.jax as gj
import generated.torch as gt
from rulegen.check import flat_call
from rulegen.plan.code import Def, Import, Imported, printed
from rulegen.plan.header import public_return, result_classes, returns_of
from rulegen.spec.rules import read_rule_file
from tests.plan.test_structures import Point, X, Y, _expected_grad, _point_total


@pytest.mark.parametrize("name", ["point_jvp", "point_vjp"])
def test_the_point_rule_takes_a_named_tuple_and_returns_a_dict_in_jax(name):
    f = getattr(gj, name)
    pt = Point(jnp.asarray(X), jnp.asarray(Y))
    out = jax.jit(f)(pt)
    assert set(out) == {"a", "b"} and isinstance(out["b"], tuple) and len(out["b"]) == 2
    np.testing.assert_allclose(out["b"][1], np.cos(Y))
    grad = jax.jit(jax.grad(_point_total(f, jnp)))(pt)
    assert type(grad) is Point
    for got, want in zip(grad, _expected_grad(), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    batched = jax.vmap(f)(Point(jnp.stack([pt.x, 2 * pt.x]), jnp.stack([pt.y, pt.y])))
    np.testing.assert_allclose(batched["a"][1], 4 * X**2)
    jac = jax.jacrev(lambda p: f(p)["b"][0])(pt)
    assert type(jac) is Point
    np.testing.assert_allclose(jac.x, np.diag(np.cos(X)), atol=1e-15)
    np.testing.assert_allclose(jac.y, np.zeros((3, 3)))


def test_a_named_tuple_result_is_the_module_s_class_under_every_transform():
    # The package binds each rule's function over its module's name: the modules by their full names.
    jax_polar, jax_moments, torch_polar, torch_moments = (
        importlib.import_module(f"generated.{backend}.{rule}")
        for backend in ("jax", "torch")
        for rule in ("to_polar", "moments")
    )

    x, y = jnp.asarray(X), jnp.asarray(Y)
    polar = jax.jit(gj.to_polar)(x, y)
    assert type(polar) is jax_polar.Polar and polar._fields == ("r", "theta")
    np.testing.assert_allclose(polar.theta, np.arctan2(Y, X))
    jacobian = jax.jacrev(gj.to_polar)(3.0, 4.0)
    assert type(jacobian) is jax_polar.Polar
    np.testing.assert_allclose([jacobian.r, jacobian.theta], [0.6, -0.16])
    batched = jax.vmap(gj.moments)(x, y)
    assert type(batched) is jax_moments.MeanSpread and set(batched.spread) == {"var", "std"}
    np.testing.assert_allclose(batched.mean, (X + Y) / 2)
    grad = jax.grad(lambda a: gj.moments(a, y).spread["std"].sum())(x)
    np.testing.assert_allclose(grad, (X - Y) / 4 / np.sqrt((X - Y) ** 2 / 4 + 1), rtol=1e-12)

    tx = torch.tensor(X, requires_grad=True)
    tpolar = gt.to_polar(tx, torch.tensor(Y))
    assert type(tpolar) is torch_polar.Polar
    tpolar.theta.sum().backward()
    np.testing.assert_allclose(tx.grad.numpy(), -Y / (X**2 + Y**2), rtol=1e-12)
    tbatched = torch.func.vmap(gt.moments)(torch.tensor(X), torch.tensor(Y))
    assert type(tbatched) is torch_moments.MeanSpread
    np.testing.assert_allclose(tbatched.spread["var"].numpy(), (X - Y) ** 2 / 4)
    tgrad = torch.func.grad(lambda a: gt.to_polar(a, torch.tensor(4.0, dtype=torch.float64)).r)
    assert float(tgrad(torch.tensor(3.0, dtype=torch.float64))) == pytest.approx(0.6)


# ---------------------------------------------------------------- the returned structure, printed and read back


def _named_tuple(inner):
    """A named tuple node: {"namedtuple": None (numbered later), "fields": {field: subtree}}."""
    field = st.from_regex(r"[a-z][a-z0-9_]{0,3}", fullmatch=True).filter(lambda f: not keyword.iskeyword(f))
    fields = st.lists(field, min_size=1, max_size=3, unique=True)
    return fields.flatmap(
        lambda names: st.tuples(*[inner] * len(names)).map(
            lambda subtrees: {"namedtuple": None, "fields": dict(zip(names, subtrees, strict=True))}
        )
    )


_TREES = st.recursive(
    st.just("leaf"),
    lambda inner: (
        st.lists(inner, min_size=1, max_size=3)
        | st.dictionaries(
            st.text(min_size=1, max_size=4).filter(lambda k: k != "namedtuple"), inner, min_size=1, max_size=3
        )
        | _named_tuple(inner)
    ),
    max_leaves=8,
)


def _numbered(tree, counter, classes=None):
    """`tree` with outputs o0, o1, ... for its leaves (appended to `counter`), named tuple classes T0, T1, ..."""
    classes = [] if classes is None else classes
    if tree == "leaf":
        counter.append(f"o{len(counter)}")
        return counter[-1]
    if isinstance(tree, list):
        return [_numbered(t, counter, classes) for t in tree]
    if "namedtuple" in tree:
        classes.append(f"T{len(classes)}")
        name = classes[-1]
        return {"namedtuple": name, "fields": {k: _numbered(v, counter, classes) for k, v in tree["fields"].items()}}
    return {k: _numbered(v, counter, classes) for k, v in tree.items()}


def _as_python(tree, values):
    if isinstance(tree, str):
        return values[tree]
    if isinstance(tree, list):
        return tuple(_as_python(t, values) for t in tree)
    if "namedtuple" in tree:
        fields = {k: _as_python(v, values) for k, v in tree["fields"].items()}
        return (tree["namedtuple"], fields)
    return {k: _as_python(v, values) for k, v in tree.items()}


def _comparable(value):
    """A built result with its named tuples as (class name, {field: value}), as `_as_python` writes them."""
    if hasattr(value, "_fields"):
        return (type(value).__name__, {f: _comparable(v) for f, v in zip(value._fields, value, strict=True)})
    if isinstance(value, tuple):
        return tuple(_comparable(v) for v in value)
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items()}
    return value


@settings(max_examples=60, deadline=None)
@given(_TREES)
def test_the_returned_structure_is_built_as_declared(tmp_path_factory, tree):
    outputs: list[str] = []
    returns = _numbered(tree, outputs)
    path = tmp_path_factory.mktemp("returns") / "r.yaml"
    path.write_text(
        yaml.safe_dump(
            {"name": "r", "inputs": ["x"], "returns": returns, "forward": {o: "x" for o in outputs}}, sort_keys=False
        )
    )
    rule = read_rule_file(path)[0]
    assert [o.name for o in rule.outputs] == outputs
    values = {o: float(k) for k, o in enumerate(outputs)}
    body = public_return(rule, ", ".join(outputs), lifted=False, spread=False)
    namespace = dict(values)
    imports = (Imported((Import("jax"),)), Imported((Import("typing", "NamedTuple"),)))
    exec(printed((*imports, *result_classes(rule, "jax"), Def("f", (), body))), namespace)
    assert _comparable(namespace["f"]()) == _as_python(returns, values)
    # What `rulegen test` reads back is the flat outputs, in order.
    read = flat_call(rule, lambda x: namespace["f"]())
    assert read(0.0) == (tuple(values.values()) if len(outputs) > 1 else values[outputs[0]])
    # The annotation is a type Python can evaluate.
    eval(returns_of(rule, "jax"), namespace)


def test_structures_given_rightly_still_compile_whole_in_torch():
    x, w, b = (torch.tensor([1.0, 2.0], dtype=torch.float64) for _ in range(3))
    calls = [
        (gt.affine_state, (x, {"layer.weight": w, "layer.bias": b})),
        (gt.point_jvp, (Point(x, w),)),
        (gt.hypot_pair, ((x, w),)),
    ]
    for f, arguments in calls:
        compiled = torch.compile(f, fullgraph=True)
        torch.testing.assert_close(compiled(*arguments), f(*arguments))


def test_both_backends_refuse_a_structure_given_wrongly_in_the_same_words():
    from generated.jax import _util as jax_util
    from generated.torch import _util as torch_util

    calls = [
        ("unpack_keys", {"a": 1}, ("a", "b")),
        ("unpack_keys", {"a": 1, "b": 2, "c": 3}, ("a", "b")),
        ("unpack_keys", (1, 2), ("a", "b")),
        ("unpack_fields", (1, 2), ("x", "y")),
        ("unpack_tuple", (1, 2, 3), ("x", "y")),
        ("unpack_tuple", 1, ("x",)),
    ]
    for helper, value, names in calls:
        messages = []
        for util in (jax_util, torch_util):
            with pytest.raises((TypeError, ValueError)) as caught:
                getattr(util, helper)("r", "arg", value, names)
            messages.append((type(caught.value), str(caught.value)))
        assert messages[0] == messages[1]
        assert messages[0][1].startswith("r: argument arg must "), messages[0]
    assert torch_util.unpack_keys("r", "arg", {"b": 2, "a": 1}, ("a", "b")) == (1, 2)
    assert torch_util.unpack_tuple("r", "arg", [5], ("x",)) == (5,)


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_a_rule_s_module_imported_first_leaves_the_package_name_its_function(backend):
    # The import system binds a submodule's name on its package after the submodule has run: imported by its
    # full name before the rule was read from the package, `generated.jax.to_polar` was the module, not callable.
    code = (
        "import importlib, sys\n"
        f"importlib.import_module('generated.{backend}.to_polar')\n"
        f"package = sys.modules['generated.{backend}']\n"
        "assert callable(package.to_polar), package.to_polar\n"
        f"from generated.{backend} import to_polar\n"
        "assert callable(to_polar)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])
