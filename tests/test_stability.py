"""Derived derivatives are as stable as the frameworks' own, on the whole real line.

Forward-only `log(1 + exp(x))` (the JAX docs' own example) was derived as
`exp(x) / (1 + exp(x))`: in float32 its gradient at x = 100 was inf in torch
and nan in JAX.  Rules are brought to the fused forms (softplus, sigmoid,
log1p, expm1) before anything is differentiated.
"""

from __future__ import annotations

import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.special as sps
import sympy as sp
import torch
from sympy.codegen.cfunctions import expm1, log1p

from rulegen.derive import functions as fn
from rulegen.derive.forms import TORCH_FUSED_FORMS, canonical
from rulegen.derive.functions import sigmoid, softplus
from tests.conftest import built_package

RULES = """
rules:
  - {name: docs_log1pexp, inputs: [x], forward: log(1 + exp(x))}
  - {name: log1pexp_swapped, inputs: [x], forward: log(exp(x) + 1)}
  - {name: scaled_softplus, inputs: [x], forward: log(1 + exp(2*x)) / 2}
  - {name: log_sigmoid, inputs: [x], forward: -log(1 + exp(-x))}
  - {name: logistic, inputs: [x], forward: 1 / (1 + exp(-x))}
  - {name: logistic_ratio, inputs: [x], forward: exp(x) / (exp(x) + 1)}
  - {name: gated, inputs: [x, y], forward: x * exp(y) / (1 + exp(y))}
"""

# float64 references (value, derivative) and the framework's own function, whose
# float32 autodiff error is the bar: sigmoid's own backward, y * (1 - y), is 0
# where the derivative is below float32's eps.
REFERENCES = {
    "docs_log1pexp": (lambda x: np.logaddexp(0, x), sps.expit, torch.nn.functional.softplus),
    "log1pexp_swapped": (lambda x: np.logaddexp(0, x), sps.expit, torch.nn.functional.softplus),
    "scaled_softplus": (
        lambda x: np.logaddexp(0, 2 * x) / 2,
        lambda x: sps.expit(2 * x),
        lambda x: torch.nn.functional.softplus(x, beta=2),
    ),
    "log_sigmoid": (lambda x: -np.logaddexp(0, -x), lambda x: sps.expit(-x), torch.nn.functional.logsigmoid),
    "logistic": (sps.expit, lambda x: sps.expit(x) * sps.expit(-x), torch.sigmoid),
    "logistic_ratio": (sps.expit, lambda x: sps.expit(x) * sps.expit(-x), torch.sigmoid),
}
WIDE = np.array([-1e4, -100.0, -20.0, -1.0, 0.0, 1.0, 20.0, 100.0, 1e4])
TINY = np.finfo(np.float32).tiny  # XLA's CPU backend flushes subnormal results to zero


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    with built_package(tmp_path_factory.mktemp("stability"), RULES, "rg_stability"):
        yield importlib.import_module("rg_stability.jax"), importlib.import_module("rg_stability.torch")


def _errors(got: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """Relative errors where the exact value is a normal float32 number, 0 elsewhere (flushed to zero)."""
    normal = np.abs(exact) >= TINY
    return np.where(normal, np.abs(got - exact) / np.where(normal, np.abs(exact), 1), 0.0)


def _close_in_float32(got: np.ndarray, exact: np.ndarray, bar: np.ndarray | None = None) -> None:
    """Finite, and within 4 eps of `exact` or no further than the framework's own `bar`."""
    assert np.all(np.isfinite(got)), got
    allowed = 4 * np.finfo(np.float32).eps
    if bar is not None:
        allowed = np.maximum(allowed, _errors(bar, exact))
    assert np.all(_errors(got, exact) <= allowed), (got, exact)
    assert np.all(np.abs(got[np.abs(exact) < TINY]) < 2 * TINY)


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_float32_value_and_gradient_on_the_real_line(package, name):
    jax_pkg, torch_pkg = package
    value, derivative, native = REFERENCES[name]
    x = torch.tensor(WIDE, dtype=torch.float32, requires_grad=True)
    (native_grad,) = torch.autograd.grad(native(x).sum(), x)
    out = getattr(torch_pkg, name)(x)
    (grad,) = torch.autograd.grad(out.sum(), x)
    _close_in_float32(out.detach().numpy(), value(WIDE))
    _close_in_float32(grad.numpy(), derivative(WIDE), native_grad.numpy())
    f = getattr(jax_pkg, name)
    xs = jnp.asarray(WIDE, dtype=jnp.float32)
    _close_in_float32(np.asarray(f(xs)), value(WIDE))
    _close_in_float32(np.asarray(jax.vmap(jax.grad(f))(xs)), derivative(WIDE), native_grad.numpy())


def test_a_product_with_a_logistic_factor(package):
    jax_pkg, torch_pkg = package
    y = torch.tensor(WIDE, dtype=torch.float32, requires_grad=True)
    x = torch.ones_like(y, requires_grad=True)
    grads = torch.autograd.grad(torch_pkg.gated(x, y).sum(), (x, y))
    _close_in_float32(grads[0].numpy(), sps.expit(WIDE))
    (bar,) = torch.autograd.grad(torch.sigmoid(y).sum(), y)
    _close_in_float32(grads[1].numpy(), sps.expit(WIDE) * sps.expit(-WIDE), bar.numpy())
    jax_grads = jax.grad(lambda a, b: jax_pkg.gated(a, b).sum(), argnums=(0, 1))(
        jnp.ones(len(WIDE), jnp.float32), jnp.asarray(WIDE, jnp.float32)
    )
    _close_in_float32(np.asarray(jax_grads[0]), sps.expit(WIDE))
    _close_in_float32(np.asarray(jax_grads[1]), sps.expit(WIDE) * sps.expit(-WIDE), bar.numpy())


@pytest.mark.unit
def test_canonical_forms():
    x, y = sp.symbols("x y", real=True)
    assert canonical(sp.log(1 + sp.exp(-x))) == softplus(-x)  # not -x + log1p(exp(x)), which cancels
    assert canonical(sp.exp(x) / (1 + sp.exp(x))) == sigmoid(x)
    assert canonical(y * sp.exp(-x) / (1 + sp.exp(-x))) == y * sigmoid(-x)
    assert canonical(sp.log(1 + x)).func.__name__ == "log1p"
    assert canonical(sp.exp(x) - 1).func.__name__ == "expm1"
    assert canonical(sp.log(2 + sp.exp(x))) == sp.log(2 + sp.exp(x))


@pytest.mark.unit
def test_a_complex_rule_keeps_the_forms_that_hold_for_complex_arguments_only():
    # log(1 + exp(z)) was made the real softplus: JAX's value wrong, torch's softplus_cpu raised for complex.
    z = sp.Symbol("z")
    assert canonical(sp.log(1 + sp.exp(z)), complex_rule=True) == log1p(sp.exp(z))
    tanh_of_exponentials = (sp.exp(z) - sp.exp(-z)) / (sp.exp(z) + sp.exp(-z))
    assert not canonical(tanh_of_exponentials, complex_rule=True).has(softplus, sigmoid)
    assert canonical(sp.exp(z) - 1, complex_rule=True) == expm1(z)
    assert canonical(sp.log(1 + sp.exp(z))) == softplus(z)


X = sp.Symbol("x", real=True)
# One expression each canonical form rewrites, as the forms' declared `writes` must cover.
FORM_EXAMPLES = {
    "softplus": [sp.log(1 + sp.exp(X)), log1p(sp.exp(X))],
    "log1p": [sp.log(1 + X)],
    "expm1": [sp.exp(X) - 1],
    "sigmoid": [1 / (1 + sp.exp(X)), 1 - sigmoid(-X), sp.exp(X) * sigmoid(-X)],
    "one_plus_erf": [1 + sp.erf(X), 3 - 3 * sp.erf(X)],
    "logaddexp": [sp.log(2**X + 2 ** (2 * X)) / sp.log(2), sp.log(sp.exp(X) + 3**X)],
    "loggamma": [sp.gamma(X + 3) / sp.gamma(X), sp.gamma(X) ** 2 / sp.gamma(2 * X)],
    "gamma_sign": [],
    "Piecewise": [],
    "exp": [],
    "erfc": [sp.log(fn.erfcx(X)), 2 * sp.log(fn.erfcx(-X))],
}


@pytest.mark.unit
@pytest.mark.parametrize("form", TORCH_FUSED_FORMS, ids=lambda f: "+".join(f.writes))
def test_every_canonical_form_states_the_functions_it_writes_and_so_its_domain(form):
    examples = [e for name in form.writes for e in FORM_EXAMPLES[name]]
    rewritten = {expr: canonical(expr, (form,)) for expr in examples}
    assert any(after != before for before, after in rewritten.items())
    for before, after in rewritten.items():
        names = {type(f).__name__ for f in after.atoms(sp.Function)} - {
            type(f).__name__ for f in before.atoms(sp.Function)
        }
        assert names <= set(form.writes)
    assert form.domain == ("complex" if all(fn.BY_NAME[n].holomorphic for n in form.writes) else "real")
    if form.domain == "complex":
        assert all(canonical(e, (form,), complex_rule=True) != e for e in examples)
    else:
        assert all(canonical(e, (form,), complex_rule=True) == e for e in examples)
