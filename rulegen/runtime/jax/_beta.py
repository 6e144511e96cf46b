"""beta's partial d/da beta(a, b), differentiated by the registry's partial in a.

Its value is `_beta_cases.beta_slope_cases`, the registry's cases
(`functions.beta_slope_by_cases`: right where beta over- or underflows).
Autodiff of those cases in a was inf * 0 and inf - inf where the log-space
product's factors are infinite (nan at 2 / a**3's overflow, at a = max):
its partial in a is stated instead, `_beta_cases.beta_curvature_cases`,
computed whole.  Its partial in b is JAX's autodiff of the cases.
"""

import functools
from typing import Any

import jax
import jax.numpy as jnp

from . import _beta_cases
from ._special import _inexact


@jax.custom_jvp
def beta_slope(a: Any, b: Any) -> jax.Array:
    """d/da beta(a, b), differentiated by the registry's partial in a at every order."""
    return _beta_cases.beta_slope_cases(*_inexact(a, b))


@functools.partial(beta_slope.defjvp, symbolic_zeros=True)
def _beta_slope_jvp(
    primals: tuple[Any, Any], tangents: tuple[Any, Any]
) -> tuple[jax.Array, jax.Array]:
    a, b = _inexact(*primals)
    out = beta_slope(a, b)
    a_dot, b_dot = (None if type(t) is jax.custom_derivatives.SymbolicZero else t for t in tangents)
    terms = []
    if a_dot is not None:
        terms.append(a_dot * _beta_cases.beta_curvature_cases(a, b))
    if b_dot is not None:
        # The partial in b times b's tangent: autodiff of the cases.
        def in_b(v: jax.Array) -> jax.Array:
            return _beta_cases.beta_slope_cases(a, v)

        terms.append(jax.jvp(in_b, (b,), (b_dot.astype(b.dtype),))[1])
    tangent = sum(terms[1:], terms[0]) if terms else jnp.zeros_like(out)
    return out, jnp.broadcast_to(tangent, jnp.shape(out))
