"""A torch Function whose jvp reads tensors saved for forward: forward-over-forward (jacfwd(jacfwd)) gives 0."""

import torch

RULE = "log1pexp"
AGAINST = {"torch": "log1pexp_torch"}
CAUGHT_BY = "transforms_torch"


class Log1pExp(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return torch.logaddexp(torch.zeros_like(x), x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * torch.sigmoid(x)

    @staticmethod
    def jvp(ctx, x_dot):
        (x,) = ctx.saved_tensors
        return x_dot * torch.sigmoid(x)


log1pexp_torch = Log1pExp.apply
