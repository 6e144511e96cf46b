"""A custom_vjp whose backward multiplies by a float64 NumPy constant: float32 in, float64 gradient out."""

import jax
import jax.numpy as jnp
import numpy as np

RULE = "log1pexp"
AGAINST = {"jax": "log1pexp"}
CAUGHT_BY = "grad_dtype"

_ONE = np.ones(1)


@jax.custom_vjp
def log1pexp(x):
    return jnp.logaddexp(0.0, x)


def log1pexp_fwd(x):
    return log1pexp(x), x


def log1pexp_bwd(x, g):
    return (g * (_ONE - 1 / (1 + jnp.exp(x))),)


log1pexp.defvjp(log1pexp_fwd, log1pexp_bwd)
