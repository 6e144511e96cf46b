"""Holomorphic complex rules (issue 16): one convention per backend, each as its own autodiff has it.

JAX's VJP is the transpose (cotangent * f'(z)); torch's backward the
conjugate Wirtinger gradient (cotangent * conj(f'(z))).  The generated rules
are compared with each framework's autodiff of the same expression, to
first and second order, and non-holomorphic functions are refused.
"""

from __future__ import annotations

import textwrap
import types

import jax.numpy as jnp
import numpy as np
import pytest
import torch

import generated.jax as gj
import generated.torch as gt
from rulegen.check import CheckFailed, check_cross_backend, subject_of
from rulegen.derive.partials import derive_rule
from rulegen.spec.errors import SpecErrors
from rulegen.spec.rules import read_rule_file, read_rules
from tests.conftest import RULES


def test_a_torch_backward_without_the_conjugate_fails_the_cross_backend_check():
    class Unconjugated(torch.autograd.Function):
        @staticmethod
        def forward(z):
            return torch.exp(z)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(output)
            ctx.save_for_forward(output)

        @staticmethod
        def jvp(ctx, z_dot):
            (out,) = ctx.saved_tensors
            return z_dot * out

        @staticmethod
        def backward(ctx, g):
            (out,) = ctx.saved_tensors
            return g * out  # JAX's transpose, not torch's convention

    rule = next(r for r in read_rules([RULES / "complex.yaml"]) if r.name == "c_exp")
    wrong = types.SimpleNamespace(c_exp=Unconjugated.apply)
    with pytest.raises(CheckFailed, match="VJP for input z: torch vs jax"):
        check_cross_backend(subject_of(rule, gj, wrong, seed=0))
    assert "agree" in check_cross_backend(subject_of(rule, gj, gt, seed=0))


def test_complex_arguments_come_as_users_pass_them():
    np.testing.assert_allclose(gt.c_exp(1.0).numpy(), np.exp(1.0 + 0j))  # a real number for a complex input
    assert gt.c_exp(torch.ones(2, dtype=torch.float32)).dtype == torch.complex64
    assert gj.c_exp(jnp.ones(2, jnp.float32)).dtype == jnp.complex64
    assert gt.c_exp(torch.ones(2, dtype=torch.complex128)).dtype == torch.complex128
    with pytest.raises(TypeError, match="x, a real input"):
        gt.log1pexp(torch.ones(2, dtype=torch.complex128))


def _errors(tmp_path, text):
    path = tmp_path / "bad.yaml"
    path.write_text(textwrap.dedent(text))
    with pytest.raises(SpecErrors) as caught:
        derive_rule(read_rule_file(path)[0])  # expressions are read when derived
    return str(caught.value)


@pytest.mark.parametrize(
    ("forward", "message"),
    [
        ("abs(z)", "abs() is not holomorphic"),
        ("conj(z) * z", "conj() is not holomorphic"),
        ("real(z)", "real() is not holomorphic"),
        ("where(z > 0, z, -z)", "not holomorphic"),
        ("erf(z)", "erf() is not holomorphic"),
    ],
)
def test_a_function_without_a_complex_derivative_is_refused_where_it_is_called(tmp_path, forward, message):
    found = _errors(tmp_path, f"name: r\ninputs:\n  z: {{dtype: complex}}\nforward: {forward}\n")
    assert message in found
    assert "bad.yaml:4:" in found


@pytest.mark.parametrize(
    ("text", "message", "where"),
    [
        (
            "name: r\ninputs:\n  z: {dtype: complex}\nforward:\n  python: return xp.exp(z)\n",
            "a complex rule's forward is a sympy expression",
            "bad.yaml:5:3",
        ),
        (
            "name: r\ninputs:\n  z: {dtype: complex}\n  x: {}\nforward: z * x\n",
            "'x' is real in a rule with complex inputs",
            "bad.yaml:4:3",
        ),
        (
            "name: r\ninputs:\n  z: {dtype: complex}\noutputs:\n  m: {dtype: float}\nforward: z\n",
            "'m' is real: a real output of complex inputs is not holomorphic",
            "bad.yaml:5:3",
        ),
        (
            "name: r\ninputs:\n  z: {dtype: complex, assume: positive}\nforward: z\n",
            "a complex input takes no sign assumptions",
            "bad.yaml:3:6",
        ),
    ],
)
def test_what_a_complex_rule_cannot_be_is_refused_at_its_place(tmp_path, text, message, where):
    found = _errors(tmp_path, text)
    assert message in found
    assert where in found, found
