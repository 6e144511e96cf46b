"""log1pexp as a torch.library custom op, its fake function and autograd registered as torch's docs show:
`torch.library.opcheck` passes, and `torch.func.jvp` gives a JVP of 0 without a word (no forward-mode rule)."""

import torch

RULE = "log1pexp"
AGAINST = {"torch": "log1pexp"}
CAUGHT_BY = "jvp_fd"


@torch.library.custom_op("implementations::log1pexp", mutates_args=())
def log1pexp(x: torch.Tensor) -> torch.Tensor:
    return torch.logaddexp(torch.zeros_like(x), x)


@log1pexp.register_fake
def _(x):
    return torch.empty_like(x)


def setup_context(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return grad * torch.sigmoid(x)


log1pexp.register_autograd(backward, setup_context=setup_context)
