"""The shape of a generated JAX rule's JVP: the output computed beside its tangent, each function once.

A JVP rule that called the primal function for its output had XLA compute
`exp` and `sin` once for the output and again for the tangent, and `grad`'s
linearization kept the output's product without the tangent's, so the
backward recomputed `sin` (benchmarks.jax_jit: grad 1.25x a hand-written
rule). These pin the structure the speed rests on; the speed itself is
the benchmark's.
"""

from __future__ import annotations

import collections
import inspect
import re
import sys

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest

import generated.jax as gj

jax.config.update("jax_enable_x64", True)

TRANSCENDENTAL = frozenset({"exp", "log", "log1p", "expm1", "sin", "cos", "tan", "tanh", "erf", "logistic"})

# rule, number of array inputs
# (f_tanh's derivative is 4 sigmoid(2x) sigmoid(-2x), two logistics beside its tanh: see the test of its own.)
SMOOTH_RULES = [("sin_exp_mul", 2), ("gelu", 1), ("f_mish", 1), ("f_sin", 1), ("log1pexp", 1)]


def _primitives(jaxpr: jax.extend.core.Jaxpr, counts: collections.Counter[str]) -> collections.Counter[str]:
    """Every primitive the jaxpr runs, sub-jaxprs (a custom_jvp_call's body, a pjit) included."""
    for eqn in jaxpr.eqns:
        counts[eqn.primitive.name] += 1
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            _primitives(sub, counts)
    return counts


def _transcendentals(f, *args) -> dict[str, int]:
    counts = _primitives(jax.make_jaxpr(f)(*args).jaxpr, collections.Counter())
    return {name: n for name, n in counts.items() if name in TRANSCENDENTAL}


def _inputs(arity: int) -> list[jax.Array]:
    return [jnp.linspace(-2.0, 2.0 + k, 7) for k in range(arity)]


@pytest.mark.parametrize(("name", "arity"), SMOOTH_RULES)
def test_jvp_computes_each_function_once(name, arity):
    f = getattr(gj, name)
    xs = _inputs(arity)
    counts = _transcendentals(lambda *a: jax.jvp(f, a, tuple(jnp.ones_like(x) for x in a)), *xs)
    assert counts and all(n == 1 for n in counts.values()), counts
    # No call of the primal rule; the runtime's `quotient` (a division with its own derivative) is one.
    jaxpr = str(jax.make_jaxpr(lambda *a: jax.jvp(f, a, a))(*xs))
    assert jaxpr.count("custom_jvp_call") == jaxpr.count("name=_quotient"), jaxpr


@pytest.mark.parametrize(("name", "arity"), SMOOTH_RULES)
def test_grad_computes_each_function_once(name, arity):
    f = getattr(gj, name)
    loss = jax.grad(lambda *a: (f(*a) ** 2).sum(), tuple(range(arity)))
    counts = _transcendentals(loss, *_inputs(arity))
    assert counts and all(n == 1 for n in counts.values()), counts


def test_sin_exp_mul_grad_saves_the_product_its_backward_reads():
    """dout/dy = exp(-x**2) * sin(x) is a factor of the output: one product serves both."""
    x, y = _inputs(2)
    jaxpr = jax.make_jaxpr(jax.grad(lambda x, y: (gj.sin_exp_mul(x, y) ** 2).sum(), (0, 1)))(x, y)
    counts = _primitives(jaxpr.jaxpr, collections.Counter())
    assert counts["sin"] == 1 and counts["exp"] == 1, counts
    gx, gy = jax.grad(lambda x, y: (gj.sin_exp_mul(x, y) ** 2).sum(), (0, 1))(x, y)
    s, e = np.sin(x), np.exp(-(x**2))
    out = s * e * y
    np.testing.assert_allclose(gy, 2 * out * s * e, rtol=1e-13)
    np.testing.assert_allclose(gx, 2 * out * y * e * (np.cos(x) - 2 * x * s), rtol=1e-13)


def test_a_rule_with_a_kink_keeps_the_primal_call_and_says_why():
    """f_abs: JAX's derivative of abs at 0 is not sign(0); the rule's own must hold at the next order."""
    x = jnp.array([-1.0, 0.0, 2.0])
    jaxpr = str(jax.make_jaxpr(lambda x: jax.jvp(gj.f_abs, (x,), (x,)))(x))
    assert "custom_jvp_call" in jaxpr
    source = inspect.getsource(sys.modules[gj.f_abs.__module__])
    assert "# The primal function, whose own rule differentiates the output at higher order" in source
    # The rule's derivative at 0 is sign(0) = 0 at every order through jvp of jvp.
    second = jax.jvp(lambda x: jax.jvp(gj.f_abs, (x,), (jnp.ones_like(x),))[0], (x,), (jnp.ones_like(x),))[1]
    np.testing.assert_array_equal(second, np.sign(x))


def test_an_output_computed_in_the_rule_is_named_where_it_is_computed():
    """`out = erfcx(x)`, read by the tangent as `out`, not a temporary `t0` copied into `out`."""
    source = inspect.getsource(sys.modules[gj.f_erfcx.__module__])
    assert re.search(r"\n    out = erfcx\(x\)\n(    \w+ = .*\n)*    return out, x_dot \* ", source), source
    copies = re.compile(r"^ +\w+ = _*t\d+$", re.M)
    for name in gj.__all__:
        module = sys.modules[getattr(gj, name).__module__]
        assert not copies.search(inspect.getsource(module)), name


@pytest.mark.parametrize("name", ["f_tanh", "scaled_tanh", "f_mish"])
def test_tanh_derivative_squares_nothing(name):
    """1 - tanh(u)**2 is (1 - tanh(u)) * (1 + tanh(u)): a square of the output is what a sum-of-squares
    loss computes too, which XLA shares with it and writes out to memory for both."""
    x = jnp.linspace(-3.0, 3.0, 7)
    f = getattr(gj, name)
    jaxpr = jax.make_jaxpr(lambda x: jax.jvp(f, (x,), (jnp.ones_like(x),)))(x)
    counts = _primitives(jaxpr.jaxpr, collections.Counter())
    assert counts["integer_pow"] == 0 and counts["tanh"] == 1, counts
    t = np.tanh(x)
    np.testing.assert_allclose(jax.grad(lambda x: gj.f_tanh(x).sum())(x), 1 - t * t, rtol=1e-14)


def test_tanh_s_tangent_is_two_logistics_beside_its_tanh_and_no_difference():
    """f_tanh's derivative is 4 sigmoid(2x) sigmoid(-2x) (1 - tanh(x)**2 loses 13 bits at x = 5, all past 19):
    jvp and grad compute the tanh once and the two logistics once each."""
    x = jnp.linspace(-3.0, 3.0, 7)
    jvp = _transcendentals(lambda x: jax.jvp(gj.f_tanh, (x,), (jnp.ones_like(x),)), x)
    grad = _transcendentals(jax.grad(lambda x: (gj.f_tanh(x) ** 2).sum()), x)
    assert jvp == grad == {"tanh": 1, "logistic": 2}, (jvp, grad)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_an_input_held_constant_adds_no_term_to_the_tangent(dtype):
    # Forward mode in y alone gave the held x a zero tangent, and zero times x's partial, which overflows where
    # 2x does (exp(-x**2) is 0 there), is nan: the tangent came back nan where autodiff's is 0 (the accuracy
    # check's forward mode found it, and split3's dc/dx, nan where exp(x) overflows).  Now x's tangent is JAX's
    # symbolic zero, and its term is none.
    huge = float(jnp.finfo(dtype).max) * 0.8
    x = jnp.asarray([huge, -huge, 1.0], dtype)
    y = jnp.asarray([8e-31, 3.0, 2.0], dtype)
    composite = lambda x, y: jnp.sin(x) * jnp.exp(-x * x) * y  # noqa: E731
    for generated_of, composite_of, primal in (
        (lambda y: gj.sin_exp_mul(x, y), lambda y: composite(x, y), y),
        (lambda x: gj.sin_exp_mul(x, y), lambda x: composite(x, y), x),
    ):
        tangent = jax.jvp(generated_of, (primal,), (jnp.ones_like(primal),))[1]
        expected = jax.jvp(composite_of, (primal,), (jnp.ones_like(primal),))[1]
        # Nan nowhere autodiff is not, and in x not even where autodiff is: its partial multiplies -2 last,
        # -2 (x y exp(-x**2) sin(x)) (rulegen.computation.quotients.scaled_product), 0 where exp(-x**2) is.
        assert not (np.isnan(tangent) & ~np.isnan(expected)).any()
        assert np.isfinite(tangent).all()
        np.testing.assert_allclose(tangent[~np.isnan(expected)], expected[~np.isnan(expected)], rtol=1e-6)
    # Both inputs moving: every term is there, at every order.
    hessian = jax.hessian(lambda x, y: gj.sin_exp_mul(x, y).sum(), argnums=(0, 1))(x[2:], y[2:])
    expected_hessian = jax.hessian(lambda x, y: composite(x, y).sum(), argnums=(0, 1))(x[2:], y[2:])
    np.testing.assert_allclose(np.asarray(hessian).ravel(), np.asarray(expected_hessian).ravel(), rtol=1e-5)


def test_a_function_of_static_inputs_alone_keeps_no_primal_call():
    """scaled_tanh's 1/hypot(1, log_scale), log_scale static: autodiff never differentiates it, so JAX's derivative
    of hypot decides nothing, and the JVP computes its output beside its tangent (it called the primal)."""
    source = inspect.getsource(sys.modules[gj.scaled_tanh.__module__])
    assert "hypot(1, log_scale)" in source
    assert "The primal function" not in source
    jaxpr = str(jax.make_jaxpr(lambda x: jax.jvp(gj.scaled_tanh, (x,), (x,)))(jnp.linspace(-1.0, 1.0, 5)))
    assert jaxpr.count("tanh") == 1, jaxpr
