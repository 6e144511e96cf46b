"""A rule survives torch.compile under torch.func, and torch.export.

On torch 2.13, Dynamo inlines an autograd.Function's forward when it runs
under a torch.func transform and drops its backward and jvp: before,
`torch.compile(torch.func.grad(lambda x: 3 * clip_gradient(-0.5, 0.5, x)))`
gave 3.0 where eager gives 0.5, and numpy_sort under a compiled
`torch.func.jvp` gave zero tangents.  torch.export inlined the Function too:
the exported module's gradient was 3.0.
"""

from __future__ import annotations

import torch

from generated.torch import gelu

X = torch.linspace(-1.5, 1.5, 12, dtype=torch.float64).reshape(3, 4)


class _Gelu(torch.nn.Module):
    def forward(self, x):
        return gelu(x)


def test_an_exported_rule_differentiates_twice():
    exported = torch.export.export(_Gelu(), (X,)).module()
    leaf = X.clone().requires_grad_()
    (first,) = torch.autograd.grad(exported(leaf).sum(), leaf, create_graph=True)
    (second,) = torch.autograd.grad(first.sum(), leaf)
    reference = X.clone().requires_grad_()
    (want_first,) = torch.autograd.grad(gelu(reference).sum(), reference, create_graph=True)
    (want_second,) = torch.autograd.grad(want_first.sum(), reference)
    torch.testing.assert_close(first, want_first)
    torch.testing.assert_close(second, want_second)


def test_an_eager_call_binds_no_signature(monkeypatch):
    # autograd.Function.apply binds the arguments by inspect.signature(forward) at every call, 22 of the 34
    # microseconds an eager forward and backward of one small tensor took over autodiff's own: the eager route
    # calls the Function's apply underneath, for a forward with nothing to bind.
    import inspect

    calls = []
    signature = inspect.signature

    def counted(*args, **kwargs):
        calls.append(args)
        return signature(*args, **kwargs)

    leaf = X.clone().requires_grad_()
    gelu(leaf)  # the route's signature of forward, once per Function, read before counting
    monkeypatch.setattr(inspect, "signature", counted)
    out = gelu(leaf)
    (slope,) = torch.autograd.grad(out.sum(), leaf)
    assert calls == []
    reference = X.clone().requires_grad_()
    want = torch.nn.functional.gelu(reference)
    (want_slope,) = torch.autograd.grad(want.sum(), reference)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(slope, want_slope)
    # Under a transform the Function's own apply runs, as torch.func needs it.
    tangent = torch.func.jvp(gelu, (X,), (torch.ones_like(X),))[1]
    torch.testing.assert_close(tangent, want_slope)
