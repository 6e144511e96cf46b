"""softplus and sigmoid sharing one exp in JAX: right at every order, at 0 and at the extremes too."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sympy as sp

from rulegen.derive import functions as fn
from rulegen.plan import Result
from rulegen.plan.code import import_statements
from rulegen.plan.emit import Emitter
from rulegen.plan.forms import jax_forms
from rulegen.plan.printers import print_jax

jax.config.update("jax_enable_x64", True)

X, Y, BETA = sp.symbols("x y beta", real=True)
POINTS = np.array([0.0, -0.0, 1e-300, -1e-300, 1e-8, -1e-8, 0.5, -0.5, 3.0, -3.0, 40.0, -40.0, 800.0, -800.0])

# Each pair: a composite of softplus and sigmoid, and the same written with
# jax.nn, whose derivatives JAX has from its own rules.
CASES = [
    ([fn.softplus(X), fn.sigmoid(X)], lambda x: (jax.nn.softplus(x), jax.nn.sigmoid(x))),
    ([fn.softplus(-X), fn.sigmoid(X)], lambda x: (jax.nn.softplus(-x), jax.nn.sigmoid(x))),
    ([fn.softplus(X), fn.sigmoid(-X)], lambda x: (jax.nn.softplus(x), jax.nn.sigmoid(-x))),
    (
        [X * sp.tanh(fn.softplus(X)), fn.sigmoid(X) * X],
        lambda x: (x * jnp.tanh(jax.nn.softplus(x)), jax.nn.sigmoid(x) * x),
    ),
    ([fn.softplus(X - Y) * fn.sigmoid(Y - X)], lambda x: (jax.nn.softplus(x - 0.25) * jax.nn.sigmoid(0.25 - x),)),
]


def _function(exprs, forms):
    emit = Emitter(print_jax, {"x", "y"}, forms)
    block = emit.block([], [Result(f"r{k}", e) for k, e in enumerate(exprs)])
    source = "\n".join(["def f(x, y=0.25):", *(f"    {a.line}" for a in block.lines), f"    return ({block.result},)"])
    # Run as a module of the bundled package would be: runtime helpers (`quotient`) import from `._util`.
    env: dict = {"__name__": "generated.jax.forms_under_test", "__package__": "generated.jax"}
    exec("\n".join(import_statements(emit.imports)), env)
    exec(source, env)
    return env["f"], source


@pytest.mark.parametrize(("exprs", "reference"), CASES)
def test_shared_exp_forms_have_the_derivatives_of_softplus_and_sigmoid(exprs, reference):
    f, source = _function(exprs, jax_forms(exprs, ()))
    assert "softplus" not in source and "sigmoid" not in source, source
    assert source.count("jnp.exp(") == 1, source
    for k in range(len(exprs)):
        ours, theirs = (lambda x, g=g, k=k: g(x)[k] for g in (f, reference))
        for order in range(4):
            got = jax.vmap(ours)(POINTS)
            want = jax.vmap(theirs)(POINTS)
            # jax.nn's softplus'' is 0 past x = 37 where ours is 4e-18: the
            # absolute tolerance is for jax.nn's error, not ours.
            np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15, err_msg=f"order {order}\n{source}")
            ours, theirs = jax.grad(ours), jax.grad(theirs)


def test_forms_keep_nan_and_infinities():
    f, _ = _function(CASES[0][0], jax_forms(CASES[0][0], ()))
    values = jnp.array([jnp.nan, jnp.inf, -jnp.inf])
    softplus, sigmoid = f(values)
    np.testing.assert_array_equal(softplus, [np.nan, np.inf, 0.0])
    np.testing.assert_array_equal(sigmoid, [np.nan, 1.0, 0.0])


def test_forms_leave_a_lone_function_or_a_static_argument_alone():
    alone = [fn.softplus(X), fn.sigmoid(Y)]
    assert [jax_forms(alone, ())(e) for e in alone] == alone
    scaled = [fn.softplus(BETA * X), fn.sigmoid(BETA * X)]
    assert [jax_forms(scaled, {"beta"})(e) for e in scaled] == scaled
