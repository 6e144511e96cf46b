"""A custom_jvp that forgets to multiply by the tangent."""

import jax
import jax.numpy as jnp

RULE = "log1pexp"
AGAINST = {"jax": "log1pexp"}
CAUGHT_BY = "jvp_fd"


@jax.custom_jvp
def log1pexp(x):
    return jnp.logaddexp(0.0, x)


@log1pexp.defjvp
def log1pexp_jvp(primals, tangents):
    (x,) = primals
    (x_dot,) = tangents
    return log1pexp(x), 1 - 1 / (1 + jnp.exp(x)) + 0 * x_dot
