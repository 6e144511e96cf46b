"""A torch Function that keeps its input on ctx as an attribute instead of saving it."""

import torch

RULE = "log1pexp"
AGAINST = {"torch": "log1pexp"}
CAUGHT_BY = "saved"


class Log1pExp(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return torch.logaddexp(torch.zeros_like(x), x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.x = inputs[0]

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * torch.sigmoid(ctx.x)


log1pexp = Log1pExp.apply
