"""A fast path chosen with `.item()`: right in eager, refused under torch.func.vmap."""

import torch

RULE = "log1pexp"
AGAINST = {"torch": "log1pexp"}
CAUGHT_BY = "transforms_torch"


def log1pexp(x):
    if x.max().item() < 30:
        return torch.log1p(torch.exp(x))
    return torch.logaddexp(torch.zeros_like(x), x)
