"""A forward that exponentiates its input in place to save a buffer."""

import torch

RULE = "log1pexp"
AGAINST = {"torch": "log1pexp"}
CAUGHT_BY = "saved"


class Log1pExp(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return torch.log1p(x.exp_())

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * torch.sigmoid(x)


log1pexp = Log1pExp.apply
