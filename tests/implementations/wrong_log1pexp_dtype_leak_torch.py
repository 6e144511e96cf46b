"""A torch Function whose backward multiplies by a float64 constant tensor: torch casts the gradient back."""

import torch

RULE = "log1pexp"
AGAINST = {"torch": "log1pexp"}
CAUGHT_BY = "grad_dtype"

_ONE = torch.ones(1, dtype=torch.float64)


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
        return grad_output * (_ONE - 1 / (1 + torch.exp(x)))


log1pexp = Log1pExp.apply
