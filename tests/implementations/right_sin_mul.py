"""sin(x) * y: a JAX custom_jvp, and a torch Function whose backward sums each gradient back to its input's shape."""

import jax
import jax.numpy as jnp
import torch

RULE = "sin_mul"
AGAINST = {"jax": "sin_mul", "torch": "sin_mul_torch"}


@jax.custom_jvp
def sin_mul(x, y):
    return jnp.sin(x) * y


@sin_mul.defjvp
def sin_mul_jvp(primals, tangents):
    x, y = primals
    x_dot, y_dot = tangents
    return sin_mul(x, y), jnp.cos(x) * x_dot * y + jnp.sin(x) * y_dot


def unbroadcast(grad, shape):
    """Sum `grad` over the dimensions broadcasting added or stretched, back to `shape`."""
    while grad.dim() > len(shape):
        grad = grad.sum(0)
    for k, n in enumerate(shape):
        if n == 1 and grad.shape[k] != 1:
            grad = grad.sum(k, keepdim=True)
    return grad


class SinMul(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x, y):
        return torch.sin(x) * y

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        return unbroadcast(grad * torch.cos(x) * y, x.shape), unbroadcast(grad * torch.sin(x), y.shape)


sin_mul_torch = SinMul.apply
