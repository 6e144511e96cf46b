"""Functions whose torch op lacks a derivative, differentiated by the registry's at every order.

`torch.special.zeta` has no forward-mode derivative and none in its first
argument: `torch.func.jvp`, `hessian` or a jvp of a rule's backward that
calls it raise "Trying to use forward AD with special_zeta that does not
support it".  Here it is an autograd.Function whose derivatives are the
registry's (d/dq zeta(s, q) = -s * zeta(s + 1, q)), written with this same
function, so that every derivative of a derivative has one too.

The exponent s is never differentiated: sympy has no derivative of zeta in
it, so no derivative rulegen derives asks for one (a tangent or gradient of
s, which torch.func passes for a tensor s, is not read).
"""

import torch


class _Zeta(torch.autograd.Function):
    # Elementwise, it batches as it is: torch.func.vmap and jacfwd need no rule of their own.
    generate_vmap_rule = True

    @staticmethod
    def forward(s, q):
        return torch.special.zeta(s, q)

    @staticmethod
    def setup_context(ctx, inputs, output):
        s, q = inputs
        # A tensor exponent is saved as tensors are (a BatchedTensor under vmap); a number as it is.
        ctx.s_is_tensor = isinstance(s, torch.Tensor)
        ctx.s = None if ctx.s_is_tensor else s
        saved = (q, s) if ctx.s_is_tensor else (q,)
        ctx.save_for_forward(*saved)
        ctx.save_for_backward(*saved)

    @staticmethod
    def backward(ctx, grad):
        s, q = _saved(ctx)
        return None, _reduced(grad * _derivative(s, q), q)

    @staticmethod
    def jvp(ctx, s_dot, q_dot):
        s, q = _saved(ctx)
        return q_dot * _derivative(s, q)


def _saved(ctx):
    if ctx.s_is_tensor:
        q, s = ctx.saved_tensors
        return s, q
    (q,) = ctx.saved_tensors
    return ctx.s, q


def _derivative(s, q):
    """d/dq zeta(s, q), by this module's hurwitz_zeta: itself differentiable."""
    return -s * hurwitz_zeta(s + 1, q)


def _reduced(grad, like):
    # A broadcast q (0-d beside an array s) takes its gradient summed over the broadcast dimensions.
    if grad.shape == like.shape:
        return grad
    return grad.sum_to_size(like.shape)


def hurwitz_zeta(s, q):
    """The Hurwitz zeta function of `s` (a number or tensor, not differentiated) and `q`."""
    if not isinstance(q, torch.Tensor):
        q = torch.as_tensor(q, dtype=s.dtype if isinstance(s, torch.Tensor) else None)
    return _Zeta.apply(s, q)
