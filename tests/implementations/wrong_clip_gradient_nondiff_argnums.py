"""clip_gradient with nondiff_argnums, whose backward takes the bounds in the wrong order."""

from functools import partial

import jax
import jax.numpy as jnp

RULE = "clip_gradient"
AGAINST = {"jax": "clip_gradient"}
CAUGHT_BY = "points"


@partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def clip_gradient(lo, hi, x):
    return x


def clip_gradient_fwd(lo, hi, x):
    return x, None


def clip_gradient_bwd(hi, lo, _, g):
    return (jnp.clip(g, lo, hi),)


clip_gradient.defvjp(clip_gradient_fwd, clip_gradient_bwd)
