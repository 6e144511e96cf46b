"""The JAX docs' naive log1pexp, no custom rule: its value is inf above x = 88 in float32."""

import jax.numpy as jnp

RULE = "log1pexp"
AGAINST = {"jax": "log1pexp"}
CAUGHT_BY = "generated"


def log1pexp(x):
    return jnp.log(1.0 + jnp.exp(x))
