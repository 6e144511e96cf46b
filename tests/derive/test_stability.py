"""Derived derivatives are as stable as the frameworks' own, on the whole real line.

Forward-only `log(1 + exp(x))` (the JAX docs' own example) was derived as
`exp(x) / (1 + exp(x))`: in float32 its gradient at x = 100 was inf in torch
and nan in JAX.  Rules are brought to the fused forms (softplus, sigmoid,
log1p, expm1) before anything is differentiated.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sympy as sp
import torch
from sympy.codegen.cfunctions import expm1, log1p

from rulegen.derive import functions as fn
from rulegen.derive.forms import CANONICAL_FORMS, canonical
from rulegen.derive.functions import sigmoid, softplus


def test_canonical_forms():
    x, y = sp.symbols("x y", real=True)
    assert canonical(sp.log(1 + sp.exp(-x))) == softplus(-x)  # not -x + log1p(exp(x)), which cancels
    assert canonical(sp.exp(x) / (1 + sp.exp(x))) == sigmoid(x)
    assert canonical(y * sp.exp(-x) / (1 + sp.exp(-x))) == y * sigmoid(-x)
    assert canonical(sp.log(1 + x)).func.__name__ == "log1p"
    assert canonical(sp.exp(x) - 1).func.__name__ == "expm1"
    assert canonical(sp.log(2 + sp.exp(x))) == sp.log(2 + sp.exp(x))


def test_the_log_of_a_sigmoid_is_a_softplus():
    # log(sigmoid(17)) is log(1) = 0 in float32 (exact -4.1e-8) and log(1 - sigmoid(89)) is log(0) = -inf: a
    # negative binomial's log(sigmoid(-logits)) and log(sigmoid(logits)) kept them wherever the search did not look.
    x, y = sp.symbols("x y", real=True)
    assert canonical(sp.log(sigmoid(x))) == -softplus(-x)
    assert canonical(sp.log(1 - sigmoid(x))) == -softplus(x)
    assert canonical(y * sp.log(sigmoid(-x)) + sp.log(1 - sigmoid(2 * x))) == -y * softplus(x) - softplus(2 * x)


def test_a_complex_rule_keeps_the_forms_that_hold_for_complex_arguments_only():
    # log(1 + exp(z)) was made the real softplus: JAX's value wrong, torch's softplus_cpu raised for complex.
    z = sp.Symbol("z")
    assert canonical(sp.log(1 + sp.exp(z)), complex_rule=True) == log1p(sp.exp(z))
    tanh_of_exponentials = (sp.exp(z) - sp.exp(-z)) / (sp.exp(z) + sp.exp(-z))
    assert not canonical(tanh_of_exponentials, complex_rule=True).has(softplus, sigmoid)
    assert canonical(sp.exp(z) - 1, complex_rule=True) == expm1(z)
    assert canonical(sp.log(1 + sp.exp(z))) == softplus(z)


X = sp.Symbol("x", real=True)
P = sp.Symbol("p", positive=True)
# One expression each canonical form rewrites, as the forms' declared `writes` must cover.
FORM_EXAMPLES = {
    "softplus": [sp.log(1 + sp.exp(X)), log1p(sp.exp(X)), sp.log(sigmoid(X)), log1p(-sigmoid(2 * X))],
    "log1p": [sp.log(1 + X)],
    "expm1": [sp.exp(X) - 1],
    "sigmoid": [1 / (1 + sp.exp(X)), 1 - sigmoid(-X), sp.exp(X) * sigmoid(-X)],
    "one_plus_erf": [1 + sp.erf(X), 3 - 3 * sp.erf(X)],
    "logaddexp": [sp.log(2**X + 2 ** (2 * X)) / sp.log(2), sp.log(sp.exp(X) + 3**X)],
    "loggamma": [sp.gamma(X + 3) / sp.gamma(X), sp.gamma(X) ** 2 / sp.gamma(2 * X), sp.log(sp.Abs(sp.gamma(X)))],
    "gamma_sign": [],
    "Piecewise": [],
    "exp": [],
    "erfc": [sp.log(fn.erfcx(X)), 2 * sp.log(fn.erfcx(-X))],
    "power_slope": [X * (X + 1) ** (X - 1), 3 * X * sp.exp(X) ** (X - 1)],
    "Abs": [],
    "floor": [],
    "betaln": [sp.log(fn.FUNCTIONS["beta"](P, P + 1)), sp.log(fn.FUNCTIONS["beta"](2 * P, sp.S.Half))],
    "power_log": [(X + 1) ** X * sp.log(X + 1), 2 * sp.exp(X) ** X * sp.log(sp.exp(X))],
    "xlogy": [(X + 1) ** 2 * sp.log(X + 1)],
}


@pytest.mark.parametrize("form", CANONICAL_FORMS, ids=lambda f: "+".join(f.writes))
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


def test_one_plus_erf_is_computed_as_erfc_by_every_printer():
    """`1 + erf(u)` cancels where erf(u) nears -1: each backend, the compiled torch bodies too, computes erfc(-u).

    JAX printed `erf(u) + 1` (faster under XLA) and torch.compile's bodies did too, while eager torch printed erfc.
    """
    from rulegen.plan.printers import print_jax, print_torch, print_torch_compiled

    for written in (X * (1 + sp.erf(X / sp.sqrt(2))) / 2, 3 - 3 * sp.erf(X), sp.erf(X) / 2 + sp.Rational(1, 2)):
        expr = canonical(written)
        for printer in (print_jax, print_torch, print_torch_compiled):
            text = printer(expr)[0].text
            assert "erfc(" in text and "erf(" not in text.replace("erfc(", ""), (printer, text)


def test_gelu_is_accurate_below_minus_four_in_both_backends():
    """x * Phi(x) and Phi(x) + x * phi(x) in float32 at x = -5 ... -12, against mpmath.

    The JAX gelu computed 1 + erf(x / sqrt(2)): value and gradient 8.4e6 eps off (every bit) from x = -6 down,
    where jax.nn.gelu and the generated torch gelu were within 70 eps.
    """
    import mpmath

    from generated.jax import gelu as jax_gelu
    from generated.torch import gelu as torch_gelu

    points = np.array([-12.0, -10.0, -8.0, -6.5, -5.0], dtype=np.float32)
    exact = []
    with mpmath.workdps(50):
        for p in points:
            v = mpmath.mpf(float(p))
            exact.append((float(v * mpmath.ncdf(v)), float(mpmath.ncdf(v) + v * mpmath.npdf(v))))
    value, slope = (np.array(column) for column in zip(*exact, strict=True))
    x = torch.tensor(points, requires_grad=True)
    torch_value = torch_gelu(x)
    (torch_slope,) = torch.autograd.grad(torch_value.sum(), x)
    found = {
        "jax": (jax.vmap(jax_gelu)(points), jax.vmap(jax.grad(jax_gelu))(points)),
        "torch": (torch_value.detach().numpy(), torch_slope.numpy()),
    }
    eps = float(np.finfo(np.float32).eps)
    for backend, (v, s) in found.items():
        # erfc's own float32 error in its tail (65 eps at x = -12 in XLA, 55 in torch) bounds the value.
        assert np.all(np.abs(np.asarray(v, np.float64) - value) <= 128 * eps * np.abs(value)), backend
        assert np.all(np.abs(np.asarray(s, np.float64) - slope) <= 8 * eps * np.abs(slope)), backend


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_tanh_s_and_sigmoid_s_derivatives_keep_their_digits_in_the_tails(backend):
    # 1 - tanh(x)**2 lost 13 bits at x = 5 and was 0 past 19 (autodiff's too); sigmoid's s (1 - s) was 0 past 37.
    # The second derivative stays finite where the first underflows (1 / cosh(x)**2 would be 0 * inf = nan).
    import mpmath

    import generated.jax as gj
    import generated.torch as gt

    points = [-800.0, -30.0, -12.5, -5.0, -0.3, 0.0, 0.7, 5.0, 12.5, 30.0, 40.0, 800.0]
    exact = {
        "f_tanh": [lambda t: mpmath.sech(t) ** 2, lambda t: -2 * mpmath.tanh(t) * mpmath.sech(t) ** 2],
        "f_sigmoid": [
            lambda t: mpmath.exp(-abs(t)) / (1 + mpmath.exp(-abs(t))) ** 2,
            lambda t: mpmath.diff(lambda u: 1 / (1 + mpmath.exp(-u)), t, 2),
        ],
    }
    for name, (first, second) in exact.items():
        with mpmath.workdps(40):
            want = [np.array([float(f(mpmath.mpf(p))) for p in points]) for f in (first, second)]
        if backend == "torch":
            x = torch.tensor(points, dtype=torch.float64, requires_grad=True)
            (grad,) = torch.autograd.grad(getattr(gt, name)(x).sum(), x, create_graph=True)
            (hess,) = torch.autograd.grad(grad.sum(), x)
            got = [grad.detach().numpy(), hess.numpy()]
        else:
            f = getattr(gj, name)
            grad = jax.vmap(jax.grad(f))
            got = [
                np.asarray(grad(jnp.asarray(points))),
                np.asarray(jax.vmap(jax.grad(jax.grad(f)))(jnp.asarray(points))),
            ]
        np.testing.assert_allclose(got[0], want[0], rtol=4 * 2.0**-52, atol=0, err_msg=f"{name} first")
        # The second derivative is the frameworks' autodiff of the first: sigmoid's own backward, s (1 - s),
        # loses the tail there (a relative error up to 1 where it is below 1e-16 of its peak).
        assert np.isfinite(got[1]).all(), (name, got[1])
        np.testing.assert_allclose(got[1], want[1], rtol=1e-10, atol=1e-14, err_msg=f"{name} second")


@pytest.mark.parametrize("backend", ["torch", "jax"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gelu_tanh_keeps_its_tail_and_is_finite_at_every_magnitude(backend, dtype):
    # x (1 + tanh(u)) / 2 was 0 from x = -6 (float64) down where the value is 1e-261 at -20, and so was its
    # derivative (autodiff's too); the derivative was nan past |x| = 1e154, x**2 * (1 - tanh(u)**2) being inf * 0.
    # Now the value is x sigmoid(2u) and the derivative's form is clamped where it has reached its limits (1, 0).
    # Each is within a few eps of exact beyond what the rounding of x alone makes (the condition number).
    import mpmath

    import generated.jax as gj
    import generated.torch as gt

    top = float(np.finfo(dtype).max) / 2
    points = np.array([-top, -1e20, -25, -20, -12, -8, -5, -2, -0.75, 0, 1, 5, 20, 1e20, top], dtype=dtype)

    def f(t):
        u = mpmath.sqrt(2 / mpmath.pi) * (t + mpmath.mpf(0.044715) * t**3)
        return t / (1 + mpmath.exp(-2 * u))

    exact, bound = [], []
    with mpmath.workprec(4000):
        for p in points.astype(np.float64):
            t = mpmath.mpf(p)
            orders = [f(t), mpmath.diff(f, t, 1), mpmath.diff(f, t, 2)] if abs(p) < 100 else [f(t), None, None]
            if orders[1] is None:  # past 100 the derivatives are 1 and 0 (x > 0) or 0 and 0 (x < 0) to every bit
                orders[1:] = [mpmath.mpf(1 if p > 0 else 0), mpmath.mpf(0)]
            exact.append([float(v) for v in orders])
            # |x g'(x) / g(x)|: the relative error the rounding of x to the dtype alone puts on g(x).
            bound.append(
                [float(abs(t * b / a)) if a != 0 and abs(p) < 100 else 0.0 for a, b in itertools.pairwise(orders)]
            )
    exact, bound = np.array(exact), np.array(bound)
    if backend == "torch":
        x = torch.tensor(points, requires_grad=True)
        value = gt.f_gelu_tanh(x)
        (grad,) = torch.autograd.grad(value.sum(), x, create_graph=True)
        (hess,) = torch.autograd.grad(grad.sum(), x)
        got = [value.detach().numpy(), grad.detach().numpy(), hess.numpy()]
    else:
        fj = gj.f_gelu_tanh
        xs = jnp.asarray(points)
        got = [
            np.asarray(fj(xs)),
            np.asarray(jax.vmap(jax.grad(fj))(xs)),
            np.asarray(jax.vmap(jax.grad(jax.grad(fj)))(xs)),
        ]
    eps, tiny = float(np.finfo(dtype).eps), float(np.finfo(dtype).tiny)
    for order in (0, 1):
        g, want = np.asarray(got[order], np.float64), exact[:, order]
        assert np.isfinite(g).all(), (order, g)
        normal = np.abs(want) >= tiny
        allowed = 8 * eps * (1 + bound[:, order])
        errors = np.abs(g - want) / np.where(normal, np.abs(want), 1)
        assert np.all(np.where(normal, errors <= allowed, np.abs(g) < 2 * tiny)), (order, points, g, want)
    # The second derivative is the frameworks' autodiff of the first: finite everywhere, right where it is not tiny.
    assert np.isfinite(got[2]).all(), got[2]
    moderate = (np.abs(points) <= 5) & (np.abs(exact[:, 2]) > 1e-3)
    np.testing.assert_allclose(got[2][moderate], exact[moderate, 2], rtol=1e-4 if dtype == np.float32 else 1e-10)


def test_a_clamp_s_bounds_fit_the_half_precision_a_function_may_run_in():
    # torch.clamp(x, -1e8, 1e8) raised "value cannot be converted to type c10::Half without overflow" where
    # f_gelu_tanh's Function ran in float16 (benchmarks.low_precision times the rule in the dtype so).
    from generated.torch.f_gelu_tanh import FGeluTanh
    from rulegen.derive.stabilise import BUDGET

    assert max(BUDGET.saturation_bounds) <= float(np.finfo(np.float16).max)
    for dtype in (torch.float16, torch.bfloat16):
        x = torch.linspace(-8, 8, 9, dtype=dtype, requires_grad=True)
        FGeluTanh.apply(x).sum().backward()
        assert torch.isfinite(x.grad).all(), dtype
