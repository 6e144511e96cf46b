"""clip_gradient as the JAX docs write it (custom_vjp, residuals for the bounds), its cotangent summed back to the
shape of x where the bounds broadcast past it; and as a torch Function."""

import jax
import jax.numpy as jnp
import torch

RULE = "clip_gradient"
AGAINST = {"jax": "clip_gradient", "torch": "clip_gradient_torch"}


@jax.custom_vjp
def clip_gradient(lo, hi, x):
    return x  # identity function


def clip_gradient_fwd(lo, hi, x):
    return x, (lo, hi, x)  # save bounds (and x, for its shape) as residuals


def clip_gradient_bwd(res, g):
    lo, hi, x = res
    shape = jnp.shape(x)
    clipped = jnp.clip(g, lo, hi)
    # Bounds that broadcast past x: sum the cotangent back to x's shape.
    lead = clipped.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + k for k, n in enumerate(shape) if n == 1 and clipped.shape[lead + k] != 1)
    return (None, None, jnp.sum(clipped, axis=axes).reshape(shape))  # None: zero cotangents for lo and hi


clip_gradient.defvjp(clip_gradient_fwd, clip_gradient_bwd)


class ClipGradient(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(lo, hi, x):
        return x.clone()

    @staticmethod
    def setup_context(ctx, inputs, output):
        lo, hi, _ = inputs
        ctx.save_for_backward(torch.as_tensor(lo), torch.as_tensor(hi))

    @staticmethod
    def backward(ctx, grad_output):
        lo, hi = ctx.saved_tensors
        return None, None, torch.clamp(grad_output, lo, hi)


clip_gradient_torch = ClipGradient.apply
