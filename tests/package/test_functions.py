"""The forward-only rules of rules/functions.yaml against the frameworks' own implementations.

Each rule's derivatives were derived by sympy and printed by rulegen; here
they must match jax.grad / jax.jvp and torch.func.grad / torch.func.jvp of
the function as JAX and PyTorch implement it, to second order.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.special as jss
import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812 - the conventional alias

from rulegen.runtime.torch._special import digamma as runtime_digamma
from tests.oracles import sample_inputs

jax.config.update("jax_enable_x64", True)

# rule name -> (JAX implementation, torch implementation)
NATIVE = {
    "f_sin": (jnp.sin, torch.sin),
    "f_cos": (jnp.cos, torch.cos),
    "f_tan": (jnp.tan, torch.tan),
    "f_asin": (jnp.arcsin, torch.asin),
    "f_acos": (jnp.arccos, torch.acos),
    "f_atan": (jnp.arctan, torch.atan),
    "f_sinh": (jnp.sinh, torch.sinh),
    "f_cosh": (jnp.cosh, torch.cosh),
    "f_tanh": (jnp.tanh, torch.tanh),
    "f_asinh": (jnp.arcsinh, torch.asinh),
    "f_acosh": (jnp.arccosh, torch.acosh),
    "f_atanh": (jnp.arctanh, torch.atanh),
    "f_exp": (jnp.exp, torch.exp),
    "f_log": (jnp.log, torch.log),
    "f_log1p": (jnp.log1p, torch.log1p),
    "f_expm1": (jnp.expm1, torch.expm1),
    "f_sqrt": (jnp.sqrt, torch.sqrt),
    "f_cbrt": (jnp.cbrt, lambda x: x ** (1 / 3)),
    "f_cube": (lambda x: x**3, lambda x: x**3),
    "f_rsqrt": (jax.lax.rsqrt, torch.rsqrt),
    "f_pow": (jnp.power, torch.pow),
    "f_erf": (jss.erf, torch.special.erf),
    "f_erfc": (jss.erfc, torch.special.erfc),
    "f_erfinv": (jss.erfinv, torch.special.erfinv),
    "f_gamma": (jss.gamma, lambda x: torch.exp(torch.lgamma(x))),
    "f_loggamma": (jss.gammaln, torch.lgamma),
    # torch's own float64 derivative of digamma is its trigamma, 5e-10 off (tests/package/test_special_functions.py):
    # the runtime's digamma, checked against mpmath at every order there, is the oracle.
    "f_digamma": (jss.digamma, runtime_digamma),
    "f_sigmoid": (jax.nn.sigmoid, torch.sigmoid),
    "f_softplus": (jax.nn.softplus, lambda x: F.softplus(x, threshold=40.0)),
    "f_swish": (jax.nn.silu, F.silu),
    "f_mish": (jax.nn.mish, F.mish),
    "f_gelu_tanh": (lambda x: jax.nn.gelu(x, approximate=True), lambda x: F.gelu(x, approximate="tanh")),
    "f_atan2": (jnp.arctan2, torch.atan2),
    "f_hypot": (jnp.hypot, torch.hypot),
    "f_logaddexp": (jnp.logaddexp, torch.logaddexp),
    "f_xlogy": (jss.xlogy, torch.special.xlogy),
    "f_abs": (jnp.abs, torch.abs),
    "f_max": (jnp.maximum, torch.maximum),
    "f_relu": (jax.nn.relu, torch.relu),
    "f_piecewise": (
        lambda x: jnp.where(x > 0, x**2, jnp.sin(x)),
        lambda x: torch.where(x > 0, x**2, torch.sin(x)),
    ),
    "f_bessel_i0": (jss.i0, torch.special.i0),
    "f_bessel_i1e": (jss.i1e, torch.special.i1e),
    "f_ndtr": (jss.ndtr, torch.special.ndtr),
    "f_ndtri": (jss.ndtri, torch.special.ndtri),
    "f_log_ndtr": (jss.log_ndtr, torch.special.log_ndtr),
    "f_logit": (jss.logit, torch.special.logit),
    "f_erfcx": (jss.erfcx, torch.special.erfcx),
    "f_xlog1py": (jss.xlog1py, torch.special.xlog1py),
    "f_entr": (jss.entr, torch.special.entr),
}


def test_functions_yaml_covers_35_functions(built):
    _, _, rules = built
    names = {n for n in rules if n.startswith("f_")}
    assert names == set(NATIVE)
    assert len(names) >= 35


def _total(f):
    return lambda *xs: f(*xs).sum()


@pytest.mark.parametrize("name", sorted(NATIVE))
def test_first_and_second_order_match_jax(built, name):
    jax_pkg, _, rules = built
    rule = rules[name]
    xs = [jnp.asarray(a) for a in sample_inputs(rule, (6,), seed=7)]
    ours, native = getattr(jax_pkg, name), NATIVE[name][0]
    argnums = tuple(range(len(xs)))
    np.testing.assert_allclose(ours(*xs), native(*xs), rtol=1e-12, atol=1e-13)
    tangents = [jnp.linspace(0.5, 1.5, 6)] * len(xs)
    for a, b in zip(jax.jvp(ours, xs, tangents), jax.jvp(native, xs, tangents), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    for a, b in zip(jax.grad(_total(ours), argnums)(*xs), jax.grad(_total(native), argnums)(*xs), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    ours_h = jax.hessian(_total(ours), argnums)(*xs)
    native_h = jax.hessian(_total(native), argnums)(*xs)
    for a, b in zip(jax.tree.leaves(ours_h), jax.tree.leaves(native_h), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("name", sorted(NATIVE))
def test_first_and_second_order_match_torch(built, name):
    _, torch_pkg, rules = built
    rule = rules[name]
    xs = tuple(torch.from_numpy(a) for a in sample_inputs(rule, (6,), seed=7))
    ours, native = getattr(torch_pkg, name), NATIVE[name][1]
    argnums = tuple(range(len(xs)))
    torch.testing.assert_close(ours(*xs), native(*xs), rtol=1e-12, atol=1e-13)
    tangents = tuple(torch.linspace(0.5, 1.5, 6, dtype=torch.float64) for _ in xs)
    for a, b in zip(torch.func.jvp(ours, xs, tangents), torch.func.jvp(native, xs, tangents), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    ours_g = torch.func.grad(_total(ours), argnums)(*xs)
    native_g = torch.func.grad(_total(native), argnums)(*xs)
    for a, b in zip(ours_g, native_g, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    ours_h = torch.func.hessian(_total(ours), argnums)(*xs)
    native_h = torch.func.jacrev(torch.func.jacrev(_total(native), argnums), argnums)(*xs)
    for a, b in zip(jax.tree.leaves(ours_h), jax.tree.leaves(native_h), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10)
