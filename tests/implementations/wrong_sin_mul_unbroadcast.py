"""A custom_vjp whose backward returns cotangents of the broadcast shape, not of each input's."""

import jax
import jax.numpy as jnp

RULE = "sin_mul"
AGAINST = {"jax": "sin_mul"}
CAUGHT_BY = "broadcast"


@jax.custom_vjp
def sin_mul(x, y):
    return jnp.sin(x) * y


def sin_mul_fwd(x, y):
    return sin_mul(x, y), (x, y)


def sin_mul_bwd(res, g):
    x, y = res
    return g * jnp.cos(x) * y, g * jnp.sin(x)


sin_mul.defvjp(sin_mul_fwd, sin_mul_bwd)
