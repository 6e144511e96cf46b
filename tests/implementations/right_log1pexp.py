"""log1pexp as the JAX docs write its custom_jvp, with a forward that stays finite and a JVP without cancellation;
the same rule as a torch Function."""

import jax
import jax.numpy as jnp
import torch

RULE = "log1pexp"
AGAINST = {"jax": "log1pexp", "torch": "log1pexp_torch"}


@jax.custom_jvp
def log1pexp(x):
    return jnp.logaddexp(0.0, x)


@log1pexp.defjvp
def log1pexp_jvp(primals, tangents):
    (x,) = primals
    (x_dot,) = tangents
    ans = log1pexp(x)
    ans_dot = jax.nn.sigmoid(x) * x_dot
    return ans, ans_dot


class Log1pExp(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return torch.logaddexp(torch.zeros_like(x), x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * torch.sigmoid(x)


log1pexp_torch = Log1pExp.apply
