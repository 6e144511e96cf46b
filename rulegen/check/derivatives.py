"""Each framework's derivatives of a subject, in JAX's convention, and the random directions they take."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rulegen.check.subject import Subject, to_numpy


def normal_like(rng: np.random.Generator, value: Any) -> np.ndarray:
    """Standard normal numbers shaped like `value`: complex ones (both parts normal) for a complex value."""
    if np.iscomplexobj(value):
        return rng.standard_normal(np.shape(value)) + 1j * rng.standard_normal(np.shape(value))
    return rng.standard_normal(np.shape(value))


def tangents(s: Subject) -> list[np.ndarray]:
    return [normal_like(s.rng, x) for x in s.xs()]


def cotangents(s: Subject, outs: Sequence[Any]) -> list[np.ndarray]:
    return [normal_like(s.rng, to_numpy(o)) for o in outs]


def jvp_jax(s: Subject, xs: Sequence[Any], ts: Sequence[Any]) -> list[np.ndarray]:
    import jax
    import jax.numpy as jnp

    _, out = jax.jvp(s.jax_f, [jnp.asarray(x) for x in xs], [jnp.asarray(t) for t in ts])
    return [to_numpy(o) for o in out]


def jvp_torch(s: Subject, xs: Sequence[Any], ts: Sequence[Any]) -> list[np.ndarray]:
    import torch

    out = torch.func.jvp(s.torch_f, tuple(map(torch.from_numpy, xs)), tuple(map(torch.from_numpy, ts)))[1]
    return [to_numpy(o) for o in out]


def vjp_jax(s: Subject, xs: Sequence[Any], cs: Sequence[Any]) -> list[np.ndarray]:
    import jax
    import jax.numpy as jnp

    _, pullback = jax.vjp(s.jax_f, *[jnp.asarray(x) for x in xs])
    return [to_numpy(g) for g in pullback(tuple(jnp.asarray(c) for c in cs))]


def vjp_torch(s: Subject, xs: Sequence[Any], cs: Sequence[Any]) -> list[np.ndarray]:
    """torch's VJP, in JAX's convention (the transpose J^T c) wherever the two differ.

    For complex values torch's backward gives the conjugate Wirtinger
    gradient, conj(J^T conj(c)): the checks read it back through that
    relation, so a backward that forgets to conjugate disagrees with JAX.
    """
    import torch

    pullback = torch.func.vjp(s.torch_f, *map(torch.from_numpy, xs))[1]
    if not s.rule.complex:
        return [to_numpy(g) for g in pullback(tuple(map(torch.from_numpy, cs)))]
    grads = pullback(tuple(torch.from_numpy(np.conj(c)) for c in cs))
    return [np.conj(to_numpy(g)) for g in grads]


def sum_of(f: Callable[..., Sequence[Any]]) -> Callable[..., Any]:
    return lambda *xs: sum(o.sum() for o in f(*xs))


def jax_grad(s: Subject, f: Callable[..., Any], argnums: tuple[int, ...]) -> Callable[..., Any]:
    """jax.grad of `f`, a sum of outputs: a complex rule's is the complex derivative (holomorphic)."""
    import jax

    return jax.grad(f, argnums, holomorphic=s.rule.complex)


def torch_total(s: Subject, f: Callable[..., Sequence[Any]]) -> Callable[..., Any]:
    """The sum of `f`'s outputs as torch differentiates it: a complex sum has no gradient, its real part has."""
    summed = sum_of(f)
    return (lambda *xs: summed(*xs).real) if s.rule.complex else summed


def torch_grads(s: Subject, total: Any, leaves: Sequence[Any]) -> list[Any]:
    """torch's gradient of `total`, a sum of outputs, in JAX's convention.

    A complex sum has no gradient in torch: its real part has, the conjugate
    of the complex derivative (torch's conjugate Wirtinger convention).
    """
    import torch

    if s.rule.complex:
        grads = torch.autograd.grad(total.real, leaves, allow_unused=True, materialize_grads=True)
        return [g.conj() for g in grads]
    return list(torch.autograd.grad(total, leaves, allow_unused=True, materialize_grads=True))
