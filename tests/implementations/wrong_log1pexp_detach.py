"""A backward that detaches what it computes from: the first derivative is right, the second is zero."""

import torch

RULE = "log1pexp"
AGAINST = {"torch": "log1pexp"}
CAUGHT_BY = "second_order"


class Log1pExp(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return torch.logaddexp(torch.zeros_like(x), x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * torch.sigmoid(x).detach()


log1pexp = Log1pExp.apply
