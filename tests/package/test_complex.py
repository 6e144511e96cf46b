"""Built holomorphic complex rules against each framework's own complex autodiff, to second order.

JAX's VJP is the transpose (cotangent * f'(z)); torch's backward the
conjugate Wirtinger gradient (cotangent * conj(f'(z))).  The generated rules
are compared with each framework's autodiff of the same expression, to
first and second order, and non-holomorphic functions are refused.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import generated.jax as gj
import generated.torch as gt
from rulegen.check import run_checks
from rulegen.derive.functions import MPMATH_IMPLEMENTATIONS, REGISTRY
from rulegen.spec.rules import read_rules

A = 0.5 - 0.25j

# The same expressions written in each framework's own operations.
REFERENCES = {
    "c_exp": (lambda z: jnp.exp(z), lambda z: torch.exp(z)),
    "c_log": (lambda z: jnp.log(z), lambda z: torch.log(z)),
    "c_sin": (lambda z: jnp.sin(z), lambda z: torch.sin(z)),
    "c_poly": (lambda z: 2 * z**3 - (1 - 2j) * z + 3j, lambda z: 2 * z**3 - (1 - 2j) * z + 3j),
    "c_mobius": (lambda z: (A * z + 1j) / (z + 2), lambda z: (A * z + 1j) / (z + 2)),
}
Z = np.array([0.7 + 0.4j, 1.5 - 0.9j, 2.2 + 1.1j])
T = np.array([0.3 - 1.2j, -0.8 + 0.5j, 1.0 + 0.25j])
W = np.array([1.1 + 0.7j, -0.4 - 0.9j, 0.6 + 0.2j])


def _generated(name, backend):
    f = getattr(gj if backend == "jax" else gt, name)
    if name == "c_mobius":
        a = jnp.asarray(A) if backend == "jax" else torch.tensor(A, dtype=torch.complex128)
        return lambda z: f(z, a)
    return f


def _numpy(value):
    # torch's own backward may return a conjugate view; force=True reads it.
    return value.detach().numpy(force=True) if isinstance(value, torch.Tensor) else np.asarray(value)


def _close(a, b):
    np.testing.assert_allclose(_numpy(a), _numpy(b), rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_jax_matches_its_own_complex_autodiff_to_second_order(name):
    ours, ref = _generated(name, "jax"), REFERENCES[name][0]
    z, t, w = jnp.asarray(Z), jnp.asarray(T), jnp.asarray(W)
    _close(ours(z), ref(z))
    _close(jax.jvp(ours, (z,), (t,))[1], jax.jvp(ref, (z,), (t,))[1])
    _close(jax.vjp(ours, z)[1](w)[0], jax.vjp(ref, z)[1](w)[0])
    for f in (ours, ref):
        assert jax.vjp(f, z)[1](w)[0].dtype == jnp.complex128

    def second(f):
        # Forward over reverse: the derivative of the VJP along t.
        return jax.jvp(lambda u: jax.vjp(f, u)[1](w)[0], (z,), (t,))[1]

    _close(second(ours), second(ref))
    hessian = jax.hessian(lambda u: jnp.sum(ours(u)), holomorphic=True)(z)
    _close(hessian, jax.hessian(lambda u: jnp.sum(ref(u)), holomorphic=True)(z))


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_torch_matches_its_own_complex_autodiff_to_second_order(name):
    ours, ref = _generated(name, "torch"), REFERENCES[name][1]
    w = torch.tensor(W)
    found = {}
    for label, f in (("ours", ours), ("ref", ref)):
        z = torch.tensor(Z, requires_grad=True)
        out = f(z)
        (grad,) = torch.autograd.grad(out, z, grad_outputs=w, create_graph=True)
        # Second order: the gradient of a real function of the first.
        (grad2,) = torch.autograd.grad((grad * torch.tensor(T).conj()).real.sum(), z)
        tangent = torch.func.jvp(f, (torch.tensor(Z),), (torch.tensor(T),))[1]
        found[label] = (out.detach(), grad.detach(), grad2, tangent)
    for a, b in zip(found["ours"], found["ref"], strict=True):
        _close(a, b)
    assert torch.autograd.gradcheck(ours, (torch.tensor(Z, requires_grad=True),), check_forward_ad=True)
    assert torch.autograd.gradgradcheck(ours, (torch.tensor(Z, requires_grad=True),))


@pytest.mark.parametrize("function", [f for f in REGISTRY if f.holomorphic], ids=lambda f: f.name)
def test_every_function_a_complex_rule_may_call_computes_complex_values_and_derivatives(function):
    import mpmath
    import sympy as sp

    z = sp.Symbol("z", complex=True)
    point = 0.6 + 0.3j
    modules = [dict(MPMATH_IMPLEMENTATIONS), "mpmath"]
    expr = function.sympy(z)
    value = complex(sp.lambdify(z, expr, modules=modules)(mpmath.mpc(point)))
    derivative = complex(sp.lambdify(z, sp.diff(expr, z), modules=modules)(mpmath.mpc(point)))
    in_torch = eval(function.torch, {"torch": torch})  # the name the printers write
    in_jax = eval(function.jax, {"jax": jax, "jnp": jnp})
    t = torch.tensor(point, dtype=torch.complex128, requires_grad=True)
    (grad,) = torch.autograd.grad(in_torch(t).real, t)
    assert abs(complex(in_torch(t).detach()) - value) < 1e-14
    assert abs(complex(grad.conj()) - derivative) < 1e-14
    assert abs(complex(in_jax(jnp.asarray(point))) - value) < 1e-14
    assert abs(complex(jax.grad(in_jax, holomorphic=True)(jnp.asarray(point))) - derivative) < 1e-14


def test_a_complex_rule_with_structures_passes_the_structures_check(tmp_path):
    # The structures check took real gradients only: jax.grad raised on the complex sum.
    path = tmp_path / "pair.yaml"
    path.write_text(
        "name: c_pair\ninputs:\n  zw: {items: {z: {dtype: complex}, w: {dtype: complex}}}\n"
        "returns: {p: p}\nforward: {p: exp(z) * w}\n"
    )
    outcome = next(o for o in run_checks(read_rules([path]), only=("structures",)) if o.check == "structures")
    assert outcome.status == "pass", outcome.detail
