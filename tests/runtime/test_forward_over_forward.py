"""Forward mode over forward mode of the generated torch Functions (issue 47).

torch 2.13 runs an autograd.Function's `jvp` with forward-mode AD off, and
functorch's outer jvp levels never turn it back on: before the runtime's
`seen_by_outer_levels`, `jacfwd(jacfwd(gelu))` and `jvp` of `jvp` gave 0 for
every generated rule (gelu at [0.3, 1.2]: 0 where the second derivatives are
0.7285 and 0.1087) while `hessian` and `jacrev(jacrev)` were right.  The
third order reaches the runtime's own Functions (`_special`: loggamma's
derivative calls digamma, whose derivative calls the Hurwitz zeta).
"""

from __future__ import annotations

import pytest
import torch
from torch.func import jacfwd, jacrev, jvp, vmap

from generated.torch import f_loggamma, gelu, host_mul_sin_jvp, log1pexp, my_cube, numpy_sort, polar, sin_mul

X = torch.tensor([0.3, 1.2, 2.5], dtype=torch.float64)
Y = torch.tensor([-0.4, 0.9, 1.7], dtype=torch.float64)
WEIGHTS = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)

# Scalar functions of one or two inputs, weighted so that no second derivative cancels in the sum.
RULES = {
    "gelu": lambda x: (WEIGHTS * gelu(x)).sum(),
    "log1pexp": lambda x: (WEIGHTS * log1pexp(x)).sum(),
    "my_cube": lambda x: (WEIGHTS * my_cube(x)).sum(),
    "f_loggamma": lambda x: (WEIGHTS * f_loggamma(x)).sum(),
    "numpy_sort": lambda x: (WEIGHTS * numpy_sort(x**2)).sum(),
    "sin_mul": lambda x, y: (WEIGHTS * sin_mul(x, y)).sum(),
    "polar": lambda x, y: sum((w * o).sum() for w, o in zip((WEIGHTS, -WEIGHTS), polar(x, y), strict=True)),
    "host_mul_sin_jvp": lambda x, y: sum((WEIGHTS * o).sum() for o in host_mul_sin_jvp(x, y)),
}


def _arguments(name):
    return (X,) if RULES[name].__code__.co_argcount == 1 else (X, Y)


def _second_along_ones(f, args):
    """d2/dt2 f(args + t): jvp of jvp, both tangents ones."""
    ones = tuple(torch.ones_like(a) for a in args)
    return jvp(lambda *xs: jvp(f, xs, ones)[1], args, ones)[1]


@pytest.mark.parametrize("name", sorted(RULES))
def test_jacfwd_of_jacfwd_is_jacrev_of_jacrev(name):
    f, args = RULES[name], _arguments(name)
    argnums = tuple(range(len(args)))
    want = jacrev(jacrev(f, argnums), argnums)(*args)
    got = jacfwd(jacfwd(f, argnums), argnums)(*args)
    for i in argnums:
        for k in argnums:
            torch.testing.assert_close(got[i][k], want[i][k], rtol=1e-10, atol=1e-12)
    assert any(want[i][k].abs().max() > 0.05 for i in argnums for k in argnums)


@pytest.mark.parametrize("name", sorted(RULES))
def test_jvp_of_jvp_and_under_vmap(name):
    f, args = RULES[name], _arguments(name)
    argnums = tuple(range(len(args)))
    hess = jacrev(jacrev(f, argnums), argnums)(*args)
    want = sum(hess[i][k].sum() for i in argnums for k in argnums)
    torch.testing.assert_close(_second_along_ones(f, args), want, rtol=1e-10, atol=1e-12)
    # vmap outside, and inside (where torch's vmap rule runs the jvp under a vmap level of its own).
    batch = tuple(torch.stack([a, 0.5 * a]) for a in args)
    outside = vmap(lambda *xs: _second_along_ones(f, xs))(*batch)
    inside = _second_along_ones(lambda *xs: vmap(f)(*xs).sum(), batch)
    each = sum(_second_along_ones(f, tuple(b[j] for b in batch)) for j in range(2))
    torch.testing.assert_close(outside.sum(), each, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(inside, each, rtol=1e-10, atol=1e-12)


def test_gelu_second_derivative_by_forward_mode():
    x = torch.tensor([0.3, 1.2], dtype=torch.float64)
    want = torch.nn.functional.gelu
    torch.testing.assert_close(jacfwd(jacfwd(gelu))(x), jacfwd(jacfwd(want))(x), rtol=1e-12, atol=0)
    ones = torch.ones_like(x)
    got = jvp(lambda y: jvp(gelu, (y,), (ones,))[1], (x,), (ones,))[1]
    torch.testing.assert_close(got, torch.tensor([0.7285, 0.1087], dtype=torch.float64), rtol=0, atol=1e-4)


def test_third_order_through_the_runtime_functions():
    """loggamma's derivative is digamma, digamma's the Hurwitz zeta: Functions of the runtime's own."""
    x = torch.tensor([0.7, 1.5, 3.2], dtype=torch.float64)
    want = torch.special.polygamma(2, x)
    ones = torch.ones_like(x)
    second = lambda y: jvp(lambda z: jvp(f_loggamma, (z,), (ones,))[1], (y,), (ones,))[1]  # noqa: E731
    torch.testing.assert_close(jvp(second, (x,), (ones,))[1], want, rtol=1e-9, atol=0)
    third = jacfwd(jacfwd(jacfwd(f_loggamma)))(x)
    torch.testing.assert_close(torch.einsum("iiii->i", third), want, rtol=1e-9, atol=0)
