"""`1 + erf(u)` in torch is `erfc(-u)`: one kernel, and exact where erf(u) nears -1."""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest
import scipy.special as sps
import torch

from tests.conftest import built_package

RULES = """
rules:
  - {name: gelu, inputs: [x], forward: x * (1 + erf(x / sqrt(2))) / 2}
  - {name: upper_tail, inputs: [x], forward: (1 - erf(x)) / 2}
  - {name: lower_tail_scaled, inputs: [x, y], forward: y * (3 + 3 * erf(x))}
  - {name: gelu_fused, inputs: [x], forward: x * (1 + erf(x / sqrt(2))) / 2, fuse: true}
"""


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    with built_package(tmp_path_factory.mktemp("torch_forms"), RULES, "rg_torch_forms") as folder:
        yield folder, importlib.import_module("rg_torch_forms.torch")


@pytest.mark.parametrize("name", ["gelu", "upper_tail", "lower_tail_scaled"])
def test_no_erf_then_add_is_left(package, name):
    folder, _ = package
    torch_source = (folder / "torch" / f"{name}.py").read_text()
    assert "torch.special.erfc(" in torch_source
    assert "torch.special.erf(" not in torch_source and "erf_()" not in torch_source
    # XLA's erfc costs twice its erf: JAX keeps the sum.
    assert "jax.scipy.special.erf(" in (folder / "jax" / f"{name}.py").read_text()


def _relative_error(got: torch.Tensor, exact: np.ndarray, condition: np.ndarray | float = 1.0) -> float:
    """The largest relative error in float32 eps, each point's divided by its condition number."""
    got = got.detach().double().numpy()
    return float(np.max(np.abs(got - exact) / np.abs(exact) / condition) / np.finfo(np.float32).eps)


def test_float32_tails_are_exact(package):
    _, pkg = package
    # Where the exact values are normal float32 numbers, down to 1e-32.
    x = torch.linspace(-12, 4, 1601, dtype=torch.float32, requires_grad=True)
    xd = x.detach().double().numpy()
    pkg.gelu(x).sum().backward()
    # x / sqrt(2) is rounded to float32, a relative error that each function
    # magnifies by its condition number |x f'(x) / f(x)| (about x**2 in the
    # tail; large too where the derivative crosses 0, near x = -0.75).
    pdf = np.exp(-xd * xd / 2) / np.sqrt(2 * np.pi)
    value, slope, curvature = xd * sps.ndtr(xd), sps.ndtr(xd) + xd * pdf, (2 - xd * xd) * pdf
    assert _relative_error(pkg.gelu(x), value, 1 + np.abs(xd * slope / value)) < 4
    assert _relative_error(x.grad, slope, 1 + np.abs(xd * curvature / slope)) < 4

    t = torch.linspace(-3, 9, 1201, dtype=torch.float32, requires_grad=True)
    td = t.detach().double().numpy()
    pkg.upper_tail(t).sum().backward()
    assert _relative_error(pkg.upper_tail(t), sps.erfc(td) / 2) < 8
    assert _relative_error(t.grad, -np.exp(-td * td) / np.sqrt(np.pi), 1 + 2 * td * td) < 4  # t**2 is rounded

    y = torch.full_like(t, 2.0)
    assert _relative_error(pkg.lower_tail_scaled(-t, y), 6 * sps.erfc(td)) < 8


def test_double_backward_through_the_saved_erfc(package):
    _, pkg = package
    x = torch.linspace(-4, 3, 11, dtype=torch.float64, requires_grad=True)
    y = torch.linspace(0.5, 2, 11, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(pkg.gelu, (x,))
    assert torch.autograd.gradcheck(pkg.lower_tail_scaled, (x, y), check_forward_ad=True)
    assert torch.autograd.gradgradcheck(pkg.lower_tail_scaled, (x, y))


@pytest.mark.slow
def test_compiled_bodies_keep_the_sum_and_its_parentheses(package):
    """Inductor's erfc is a scalar loop, so the bodies it compiles read `(erf(u) + 1)`."""
    import warnings

    folder, pkg = package
    source = (folder / "torch" / "gelu_fused.py").read_text()
    compiled = source[source.index("def _forward_compiled") : source.index("@fused(compiled=_forward_compiled)")]
    assert "(torch.special.erf(math.sqrt(2) * t0) + 1)" in compiled
    assert "torch.special.erfc(" in source[source.index("def _forward(x)") :]

    x = torch.linspace(-5, 3, 33, dtype=torch.float64, requires_grad=True)
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*torch.compile failed")
        value = pkg.gelu_fused(x)
        value.sum().backward()
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 2, (
        "the forward and the backward body were compiled"
    )
    xd = x.detach()
    cdf, pdf = torch.special.ndtr(xd), torch.exp(-xd * xd / 2) / math.sqrt(2 * math.pi)
    torch.testing.assert_close(value.detach(), xd * cdf, rtol=1e-13, atol=1e-15)
    torch.testing.assert_close(x.grad, cdf + xd * pdf, rtol=1e-13, atol=1e-15)
