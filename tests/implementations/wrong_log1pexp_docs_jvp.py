"""The JAX docs' custom_jvp log1pexp: the JVP is stable, the forward still overflows (inf at x = 117 in float32)."""

import jax
import jax.numpy as jnp

RULE = "log1pexp"
AGAINST = {"jax": "log1pexp"}
CAUGHT_BY = "wide"


@jax.custom_jvp
def log1pexp(x):
    return jnp.log(1.0 + jnp.exp(x))


@log1pexp.defjvp
def log1pexp_jvp(primals, tangents):
    (x,) = primals
    (x_dot,) = tangents
    ans = log1pexp(x)
    ans_dot = (1 - 1 / (1 + jnp.exp(x))) * x_dot
    return ans, ans_dot
