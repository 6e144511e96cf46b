"""Registered functions whose framework op is wrong or lacks a derivative, built and checked at every order.

The rules are tests/right_rules/function_layer.yaml's; each is compared, to
second order, with a 40-digit mpmath reference, under torch.func's forward
and reverse modes and JAX's.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
import torch

from rulegen.runtime.torch._special import hurwitz_zeta
from tests.conftest import built_package
from tests.derive.test_special_functions import TRIGAMMA_POINTS, _trigamma

jax.config.update("jax_enable_x64", True)

RULES = Path(__file__).resolve().parents[1] / "right_rules" / "function_layer.yaml"


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    with built_package(tmp_path_factory.mktemp("special"), RULES.read_text(), "rg_special"):
        yield importlib.import_module("rg_special.jax"), importlib.import_module("rg_special.torch")


def derivatives(f, points):
    """f, f' and f'' at `points` to 40 digits, by mpmath's own differentiation."""
    with mpmath.workdps(40):
        return [np.array([float(mpmath.diff(f, mpmath.mpf(p), n)) for p in points]) for n in range(3)]


def torch_orders(f, x):
    """Value, first and second derivative of an elementwise torch `f`, each in forward and reverse mode."""
    ones = torch.ones_like(x)
    grad = torch.func.grad(lambda a: f(a).sum())
    return {
        "value": f(x),
        "jvp": torch.func.jvp(f, (x,), (ones,))[1],
        "grad": grad(x),
        "hessian": torch.func.hessian(lambda a: f(a).sum())(x).diagonal(),
        "jvp of grad": torch.func.jvp(grad, (x,), (ones,))[1],
        "grad of grad": torch.func.grad(lambda a: grad(a).sum())(x),
    }


def jax_orders(f, x):
    grad = jax.grad(lambda a: jnp.sum(f(a)))
    return {
        "value": f(x),
        "jvp": jax.jvp(f, (x,), (jnp.ones_like(x),))[1],
        "grad": grad(x),
        "hessian": jnp.diagonal(jax.hessian(lambda a: jnp.sum(f(a)))(x)),
        "jvp of grad": jax.jvp(grad, (x,), (jnp.ones_like(x),))[1],
    }


ORDER = {"value": 0, "jvp": 1, "grad": 1, "hessian": 2, "jvp of grad": 2, "grad of grad": 2}

CASES = {
    # q = x**2 + 1 >= 1: the frameworks' zeta is nan for q < 0 (the wide check tries x = -1e4).
    "hurwitz_zeta_of_a_shift": (lambda x: mpmath.zeta(2, x**2 + 1) * x, [-30.7, 0.2, 1.3, 2.9, 117.3]),
    # Across poles of Gamma(x) and of Gamma(x + 0.25), and far out, where JAX's beta was nan.
    "beta_and_loggamma_on_the_negative_axis": (
        lambda x: mpmath.beta(x, mpmath.mpf(0.25)) + mpmath.re(mpmath.loggamma(x)),
        [-2.7, -2.45, -0.6, -30.6, -117.4, 1.7],
    ),
}


@pytest.mark.parametrize("backend", ["torch", "jax"])
@pytest.mark.parametrize("rule", sorted(CASES))
def test_second_order_is_the_registry_derivative(package, rule, backend):
    reference, points = CASES[rule]
    exact = derivatives(reference, points)
    jax_pkg, torch_pkg = package
    if backend == "torch":
        got = torch_orders(getattr(torch_pkg, rule), torch.tensor(points, dtype=torch.float64))
    else:
        got = jax_orders(getattr(jax_pkg, rule), jnp.asarray(points, dtype=jnp.float64))
    for order, value in got.items():
        np.testing.assert_allclose(np.asarray(value), exact[ORDER[order]], rtol=1e-9, atol=1e-12, err_msg=order)


def test_the_runtime_zeta_has_every_derivative_torch_lacks():
    q = torch.tensor([0.7, 2.3, 1e4], dtype=torch.float64)
    s = torch.tensor([2.0, 3.5, 2.5], dtype=torch.float64)
    with mpmath.workdps(40):
        first = [float(-a * mpmath.zeta(a + 1, b)) for a, b in zip(s.tolist(), q.tolist(), strict=True)]
        second = [float(a * (a + 1) * mpmath.zeta(a + 2, b)) for a, b in zip(s.tolist(), q.tolist(), strict=True)]
    with pytest.raises(RuntimeError, match="forward AD"):
        torch.func.jvp(lambda b: torch.special.zeta(s, b), (q,), (torch.ones_like(q),))
    # A tensor exponent, batched by torch.func.vmap under jacfwd; a tangent of s is not read.
    jacobian = torch.func.jacfwd(lambda b: hurwitz_zeta(s, b))(q)
    np.testing.assert_allclose(jacobian.diagonal().numpy(), first, rtol=1e-12)
    hessian = torch.func.hessian(lambda b: hurwitz_zeta(s, b).sum())(q)
    np.testing.assert_allclose(hessian.diagonal().numpy(), second, rtol=1e-12)
    batched = torch.func.vmap(hurwitz_zeta)(s, q)
    np.testing.assert_allclose(batched.numpy(), torch.special.zeta(s, q).numpy(), rtol=0)


def test_digamma_s_derivatives_in_torch_are_right_to_the_last_bits_at_every_order(built):
    """The bundled f_digamma: its derivative is trigamma, its second tetragamma (the runtime's zeta's derivative)."""
    _, torch_pkg, _ = built
    x = torch.tensor(TRIGAMMA_POINTS, dtype=torch.float64)
    with mpmath.workdps(40):
        second = np.array([float(mpmath.polygamma(2, p)) for p in TRIGAMMA_POINTS])
    got = torch_orders(torch_pkg.f_digamma, x)
    for order in ("jvp", "grad"):
        np.testing.assert_allclose(got[order].numpy(), _trigamma(TRIGAMMA_POINTS), rtol=1e-14, atol=0, err_msg=order)
    for order in ("hessian", "jvp of grad", "grad of grad"):
        np.testing.assert_allclose(got[order].numpy(), second, rtol=1e-14, atol=0, err_msg=order)


@pytest.mark.slow
def test_the_runtime_zeta_compiles_whole():
    """torch.compile(fullgraph=True) refuses an autograd.Function with a `jvp`: compiled, the runtime's zeta
    applies one without it (torch's float64 trigamma is its zeta now, so every digamma rule's derivative calls it)."""
    q = torch.tensor([0.7, 2.3, 1e4], dtype=torch.float64, requires_grad=True)
    compiled = torch.compile(lambda b: hurwitz_zeta(2.0, b) * b, fullgraph=True)
    (grad,) = torch.autograd.grad(compiled(q).sum(), q)
    (eager,) = torch.autograd.grad((hurwitz_zeta(2.0, q) * q).sum(), q)
    np.testing.assert_allclose(grad.numpy(), eager.numpy(), rtol=1e-15)


def _normal_tails(points: list[float]) -> dict[str, np.ndarray]:
    with mpmath.workdps(60):
        cdf = [mpmath.ncdf(p) for p in points]
        return {
            "cdf": np.array([float(c) for c in cdf]),
            "log_cdf": np.array([float(mpmath.log(c)) for c in cdf]),
            "log_cdf'": np.array([float(mpmath.npdf(p) / c) for p, c in zip(points, cdf, strict=True)]),
            "log_cdf''": np.array([float(mpmath.diff(lambda t: mpmath.log(mpmath.ncdf(t)), p, 2)) for p in points]),
        }


def test_torch_s_normal_cdf_keeps_its_left_tail(package):
    _, torch_pkg = package
    for dtype, points, ulps in [
        (torch.float64, [-5.0, -8.0, -10.96, -20.0, -30.7, 0.3, 2.5], 700),
        (torch.float32, [-3.0, -5.0, -7.7, -10.96, 0.3, 2.5], 32),
    ]:
        x = torch.tensor(points, dtype=dtype)
        exact = _normal_tails(x.double().tolist())["cdf"]
        got = torch_pkg.normal_cdf_left_tail(x).double().numpy()
        np.testing.assert_allclose(got, exact, rtol=ulps * torch.finfo(dtype).eps, atol=0, err_msg=str(dtype))


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_log_ndtr_and_its_derivative_keep_both_tails(package, backend):
    points = [-1e4, -50.0, -20.47, -5.0, -0.3, 0.3, 3.0, 5.8, 7.5]
    exact = _normal_tails(points)
    jax_pkg, torch_pkg = package
    if backend == "torch":
        got = torch_orders(torch_pkg.log_normal_cdf_tails, torch.tensor(points, dtype=torch.float64))
    else:
        got = jax_orders(jax_pkg.log_normal_cdf_tails, jnp.asarray(points, dtype=jnp.float64))
    np.testing.assert_allclose(np.asarray(got["value"]), exact["log_cdf"], rtol=32 * 2.0**-52, atol=0)
    for order in ("grad", "jvp"):
        np.testing.assert_allclose(np.asarray(got[order]), exact["log_cdf'"], rtol=16 * 2.0**-52, atol=0, err_msg=order)
    # The second derivative reads erfcx's derivative: the frameworks' difference was 4.3e7 eps off at -1e4; the
    # registry's difference below u = 8 (x = -11.3) loses a few bits (20 eps at x = -5).
    for order in ("hessian", "jvp of grad"):
        np.testing.assert_allclose(
            np.asarray(got[order]), exact["log_cdf''"], rtol=64 * 2.0**-52, atol=0, err_msg=order
        )


def _assert_first_and_second_derivatives(package, backend, name, scaled, far, near, ulps_near):
    """`name`'s first and second derivatives (each in both modes) at `far` within 4 eps, at `near` within
    `ulps_near` (first, second) eps of mpmath's differentiation of `scaled` at 60 digits."""
    jax_pkg, torch_pkg = package
    for points, ulps in ((far, (4, 4)), (near, ulps_near)):
        with mpmath.workdps(60):
            first, second = (np.array([float(mpmath.diff(scaled, mpmath.mpf(p), n)) for p in points]) for n in (1, 2))
        if backend == "torch":
            got = torch_orders(getattr(torch_pkg, name), torch.tensor(points, dtype=torch.float64))
        else:
            got = jax_orders(getattr(jax_pkg, name), jnp.asarray(points, dtype=jnp.float64))
        for order, exact, n in (
            ("grad", first, 0),
            ("jvp", first, 0),
            ("hessian", second, 1),
            ("jvp of grad", second, 1),
        ):
            got_order = np.asarray(got[order], dtype=np.float64)
            tolerance = ulps[n] * 2.0**-52
            np.testing.assert_allclose(got_order, exact, rtol=tolerance, atol=0, err_msg=f"{order} at {points}")


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_erfcx_s_derivatives_keep_their_digits_far_out(package, backend):
    # From 8, within a few eps (1.1e8 and 2.5e15 eps off at 1e4 before).  Below, 2 x erfcx(x) - 2 / sqrt(pi) and
    # its derivative as the frameworks' autodiff computes them: up to 7 and 13 bits lost near 8 (147 and 9,440
    # eps at 7.9), where the series has not converged yet.
    far, near = [8.0, 8.5, 12.0, 30.7, 117.3, 1e4, 1e8], [-3.0, 0.3, 2.0, 5.0, 7.9]
    erfcx = lambda t: mpmath.exp(t**2) * mpmath.erfc(t)  # noqa: E731
    _assert_first_and_second_derivatives(package, backend, "scaled_erfc_far_out", erfcx, far, near, (2**8, 2**14))


@pytest.mark.parametrize("backend", ["torch", "jax"])
@pytest.mark.parametrize("nu", [0, 1])
def test_i0e_and_i1e_derivatives_keep_their_digits_far_out(package, backend, nu):
    # From |x| = 25, within a few eps on either side (1.5e4 and 1.8e8 eps off at 1e4 before, 2.7e5 and 5e11 at
    # 1e6).  Below, i1e(x) - sign(x) i0e(x) and its like as the frameworks' autodiff computes them: up to 6 and
    # 11 bits lost near 25 (48 and 1,320 eps at 20), where the series has not converged yet.
    far = [25.0, 25.5, 30.7, 117.3, 1e4, 1e6, -25.0, -30.7, -1e4]
    near = [-20.0, -3.0, 0.3, 2.0, 5.0, 20.0, 24.9]
    scaled = lambda t: mpmath.besseli(nu, t) * mpmath.exp(-abs(t))  # noqa: E731
    _assert_first_and_second_derivatives(package, backend, f"scaled_i{nu}_far_out", scaled, far, near, (2**7, 2**12))
