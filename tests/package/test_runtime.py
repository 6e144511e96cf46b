"""The runtime helpers inside built packages: broadcasting, summed cotangents and saving only what is read."""

from __future__ import annotations

import torch

from tests.conftest import ROOT


def test_broadcast_allocates_only_where_the_shape_or_dtype_differs():
    from rulegen.runtime.torch._function import broadcast

    x, y = torch.ones(3, dtype=torch.float64), torch.ones(2, 1, dtype=torch.float64)
    same = torch.sin(x)
    assert broadcast(same, x, x) is same
    wider = broadcast(same, x, y)
    assert wider.shape == (2, 3) and wider.dtype == torch.float64
    torch.testing.assert_close(wider, same.expand(2, 3))
    assert broadcast(2.0, x).shape == (3,)
    # An output never aliases an input, and takes the dtype the first array promotes it to.
    assert broadcast(x, x) is not x
    assert broadcast(torch.ones(3, dtype=torch.float32), x).dtype == torch.float64


def test_summed_like_adds_the_present_terms_in_the_inputs_shape():
    from rulegen.runtime.torch._function import summed_like

    x = torch.ones(3, dtype=torch.float64)
    grad = torch.full((3,), 2.0, dtype=torch.float64)
    assert summed_like(x, grad) is grad
    assert summed_like(x, None, grad, None) is grad
    torch.testing.assert_close(summed_like(x, torch.ones(2, 3, dtype=torch.float64)), grad)
    torch.testing.assert_close(summed_like(x, None, 1.0, grad), torch.full((3,), 3.0, dtype=torch.float64))
    torch.testing.assert_close(summed_like(x, 0.0), torch.zeros(3, dtype=torch.float64))
    assert summed_like(x, None, None) is None


def test_a_function_saves_only_what_its_derivatives_read():
    from generated.torch import point_jvp, sin_exp_mul
    from tests.plan.test_structures import Point

    x, y = (torch.linspace(-1, 1, 5, dtype=torch.float64, requires_grad=True) for _ in range(2))
    for call, most in ((lambda: point_jvp(Point(x, y))["a"], 2), (lambda: sin_exp_mul(x, y), 4)):
        saved: list[torch.Tensor] = []
        with torch.autograd.graph.saved_tensors_hooks(saved.append, lambda _: None):
            call()
        assert len(saved) == most, len(saved)


def test_an_absent_cotangent_adds_nothing_even_where_another_output_s_partial_is_infinite(tmp_path):
    # split3 (tests/right_rules/outputs_broadcast.yaml): a = x, c = exp(x)*y + x.  The gradient of a alone is 1
    # everywhere; at x = 1000 dc/dx is inf, and c's cotangent, absent, must not multiply it (JAX's symbolic zeros do
    # not; torch's own autograd never runs c's backward).  Materialised as a zero, it made the gradient nan.
    from tests.conftest import built_package

    rule = (ROOT / "tests" / "right_rules" / "outputs_broadcast.yaml").read_text()
    with built_package(tmp_path, rule, "absent_cotangent"):
        from absent_cotangent.torch import split3

        x = torch.tensor([1000.0], dtype=torch.float64, requires_grad=True)
        a, _, _ = split3(x, torch.tensor([0.5], dtype=torch.float64))
        (grad,) = torch.autograd.grad(a.sum(), x)
    assert grad.item() == 1.0
