"""`power_product(b1, k1, b2, k2, ...)`, the runtime's product of powers whose partial products never under- or
overflow where the whole is in range: the value within a few ulps of the exact product at every magnitude, in
both backends and in numpy (the search's evaluation), 0, inf and nan as IEEE's product, and the registry's
derivative a product of the same kind.

Any order of t / (s**2 x)'s multiplications is inf or 0 on the way somewhere: at (-8.1e301, 1.1e-17, 3.4e289)
t / s overflows and s**2 x is in range, at (1, 1e-200, 1e250) s**2 underflows.
"""

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
import sympy as sp
import torch

from rulegen.derive import functions as fn
from rulegen.runtime import _scaling
from rulegen.runtime.jax import _util as jax_util
from rulegen.runtime.torch import _special as torch_special

jax.config.update("jax_enable_x64", True)

EXPONENTS = (1, -2, -1)


def _exact(bases: tuple[float, ...], exponents: tuple[int, ...], dtype: type) -> float:
    mpmath.mp.prec = 200
    value = mpmath.mpf(1)
    for b, k in zip(bases, exponents, strict=True):
        value *= mpmath.mpf(b) ** k
    with np.errstate(over="ignore"):
        return float(np.asarray(float(value), dtype=np.float64).astype(dtype)) if value != 0 else 0.0


def _points(dtype: type, count: int) -> np.ndarray:
    """Bases log-uniform in magnitude over the dtype's whole line, normal and subnormal, of either sign."""
    info = np.finfo(dtype)
    low, high = math.log10(float(info.smallest_subnormal)), math.log10(float(info.max))
    rng = np.random.default_rng(7)
    signs = rng.choice([-1.0, 1.0], (count, 3))
    return (signs * 10.0 ** rng.uniform(low, high, (count, 3))).astype(dtype)


def _in_ulps(got: np.ndarray, exact: np.ndarray, dtype: type) -> np.ndarray:
    """Per point, the distance in units of the exact value's last place (subnormal results: of the smallest)."""
    info = np.finfo(dtype)
    unit = np.maximum(np.abs(exact), float(info.tiny)) * float(info.eps)
    with np.errstate(all="ignore"):
        return np.where(got == exact, 0.0, np.abs(got.astype(np.float64) - exact) / unit)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("backend", ["numpy", "jax", "torch"])
def test_the_product_is_right_wherever_it_is_a_float_whatever_its_partial_products(backend, dtype):
    points = _points(dtype, 400)
    exact = np.asarray([_exact(tuple(float(b) for b in row), EXPONENTS, dtype) for row in points])
    columns = [points[:, j] for j in range(3)]
    pairs = [a for c, k in zip(columns, EXPONENTS, strict=True) for a in (c, k)]
    if backend == "numpy":
        got = fn.power_product_of(*pairs)
    elif backend == "jax":
        got = np.asarray(jax.jit(jax_util.power_product, static_argnums=(1, 3, 5))(*pairs))
    else:
        got = torch_special.power_product(*(torch.from_numpy(p) if isinstance(p, np.ndarray) else p for p in pairs))
        got = got.numpy()
    assert got.dtype == dtype
    # XLA flushes subnormal inputs and results to 0: judged where neither is subnormal.
    judged = np.ones(len(points), bool)
    if backend == "jax":
        tiny = float(np.finfo(dtype).tiny)
        judged = (np.abs(points) >= tiny).all(axis=1) & ((np.abs(exact) >= tiny) | (exact == 0))
    finite = np.isfinite(exact)
    # Where the exact value is a float, the product is within 4 ulps of it (the plain product of three factors
    # rounds twice); past the largest float it is inf, of the exact value's sign.
    assert (_in_ulps(got, exact, dtype)[judged & finite] <= 4).all()
    assert (got[judged & ~finite] == exact[judged & ~finite]).all()
    # The plain product is inf, nan or 0 somewhere among these where the exact value is a normal float.
    with np.errstate(all="ignore"):
        plain = columns[0] / columns[1] / columns[1] / columns[2]
    normal = finite & (np.abs(exact) >= float(np.finfo(dtype).tiny))
    assert (~np.isfinite(plain[normal]) | (plain[normal] == 0)).any()


def test_the_point_where_every_order_of_a_lognormal_partial_fails():
    t, s, x = -8.088664238509922e301, 1.1253405361045708e-17, 3.3867879885711135e289
    exact = _exact((t, s, x), EXPONENTS, np.float64)
    with np.errstate(all="ignore"):
        assert not math.isfinite(t / s / s / x)
        assert not math.isfinite(t / s / (s * x))
    args = (t, 1, s, -2, x, -1)
    assert float(fn.power_product_of(*args)) == pytest.approx(exact, rel=4e-16)
    assert float(jax_util.power_product(*args)) == pytest.approx(exact, rel=4e-16)
    tensors = [torch.tensor(a, dtype=torch.float64) if k % 2 == 0 else a for k, a in enumerate(args)]
    assert float(torch_special.power_product(*tensors)) == pytest.approx(exact, rel=4e-16)


@pytest.mark.parametrize("backend", ["numpy", "jax", "torch"])
def test_zeros_infinities_and_nan_are_as_the_plain_product(backend):
    bases = [
        (0.0, 2.0, 3.0),  # 0 / 4 / 3
        (1.0, 0.0, 3.0),  # 1 / 0
        (0.0, 0.0, 1.0),  # 0 / 0
        (math.inf, 2.0, 3.0),
        (1.0, math.inf, 3.0),
        (math.inf, math.inf, 1.0),
        (math.nan, 1.0, 1.0),
        (-2.0, 1.0, math.nan),
    ]
    columns = [np.asarray(c) for c in zip(*bases, strict=True)]
    with np.errstate(all="ignore"):
        plain = columns[0] / columns[1] ** 2 / columns[2]
    pairs = [a for c, k in zip(columns, EXPONENTS, strict=True) for a in (c, k)]
    if backend == "numpy":
        got = fn.power_product_of(*pairs)
    elif backend == "jax":
        got = np.asarray(jax_util.power_product(*pairs))
    else:
        got = torch_special.power_product(*(torch.from_numpy(p) if isinstance(p, np.ndarray) else p for p in pairs))
        got = got.numpy()
    np.testing.assert_array_equal(got, plain)


def test_a_python_number_among_the_bases_is_a_tensor_of_the_others_dtype():
    x = torch.tensor([1e30, 3.0], dtype=torch.float32)
    got = torch_special.power_product(x, 2, 1e-30, 1, x, -1)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, torch.tensor([1.0, 3e-30]), rtol=1e-6, atol=0)


def test_the_registry_differentiates_it_into_a_product_of_the_same_kind():
    t, s, x = sp.symbols("t s x", real=True)
    product = fn.power_product(t, 1, s, -2, x, -1)
    assert product.diff(s) == -2 * fn.power_product(t, 1, s, -3, x, -1)
    assert product.diff(t) == fn.power_product(s, -2, x, -1)
    assert sp.simplify(product.diff(x).rewrite(sp.Mul) - (t / (s**2 * x)).diff(x)) == 0
    # Equal bases merge; a single base left is its power.
    assert fn.power_product(t, 1, s, 1, s, -1) == t
    with pytest.raises(TypeError):
        fn.power_product(t, s)


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_autodiff_of_the_runtime_product_is_the_products_derivative(backend):
    # The exponents taken out are piecewise constant: autodiff differentiates the near-1 product, scaled back.
    t, s, x = -8.088664238509922e301, 1.1253405361045708e-17, 3.3867879885711135e289
    mpmath.mp.prec = 200
    exact = [
        float(mpmath.mpf(s) ** -2 / mpmath.mpf(x)),
        float(-2 * mpmath.mpf(t) * mpmath.mpf(s) ** -3 / mpmath.mpf(x)),
        float(-mpmath.mpf(t) * mpmath.mpf(s) ** -2 / mpmath.mpf(x) ** 2),
    ]
    if backend == "jax":
        product = functools.partial(_scaling.power_product, jnp)
        grads = jax.grad(lambda a, b, c: product(a, 1, b, -2, c, -1), (0, 1, 2))(t, s, x)
    else:
        inputs = [torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in (t, s, x)]
        value = torch_special.power_product(inputs[0], 1, inputs[1], -2, inputs[2], -1)
        grads = torch.autograd.grad(value, inputs)
    for got, want in zip(grads, exact, strict=True):
        assert float(got) == pytest.approx(want, rel=1e-15)


# -- its stated derivative, at every order

_MAX = float(np.finfo(np.float64).max)
_TINY = float(np.finfo(np.float64).tiny)
#: (exponents, points): products whose partials are floats where autodiff of the scaling multiplied a cotangent by
#: the scale-back powers of two before a near-1 product's 0 (nan at (max, 0)), or an inf partial by a 0 one.
_STATED = [
    ((1, 1), [(_MAX, 0.0), (_MAX, 1e-300), (_TINY, 1e300), (5e-324, 1e300), (0.0, _MAX), (-3.0, 0.5)]),
    ((2, -1, 1), [(1e200, 1e-150, 1e-250), (_TINY, 1e-300, _MAX), (1e-160, 2.5, 1e300), (3.0, -0.25, 7.0)]),
]


def _exact_partials(bases: tuple[float, ...], exponents: tuple[int, ...], lowered: tuple[int, ...]) -> float:
    """The partial of prod b_j**k_j in the bases at `lowered` (indices, one per order), rounded to float64: the
    product with each such base's exponent one less, times the exponents taken down."""
    mpmath.mp.prec = 300
    ks = list(exponents)
    coefficient = mpmath.mpf(1)
    for i in lowered:
        coefficient *= ks[i]
        ks[i] -= 1
    if coefficient == 0:
        return 0.0
    value = coefficient
    for b, k in zip(bases, ks, strict=True):
        value *= mpmath.mpf(b) ** k if k else 1
    return float(value) if abs(value) <= _MAX else math.copysign(math.inf, value)


def _stated_derivatives(backend: str, exponents: tuple[int, ...], point: tuple[float, ...]) -> tuple[Any, Any]:
    """(gradient, Hessian) of power_product at `point` as `backend` differentiates it, in reverse mode; and the
    Hessian again in forward over reverse."""
    n = len(point)

    def product(*bases: Any) -> Any:
        pairs = [a for b, k in zip(bases, exponents, strict=True) for a in (b, k)]
        return jax_util.power_product(*pairs) if backend == "jax" else torch_special.power_product(*pairs)

    if backend == "jax":
        args = tuple(jnp.float64(v) for v in point)
        grad = np.asarray(jax.grad(product, tuple(range(n)))(*args))
        hessians = [
            jax.hessian(product, tuple(range(n)))(*args),
            jax.jacfwd(jax.grad(product, tuple(range(n))), tuple(range(n)))(*args),
        ]
    else:
        args = tuple(torch.tensor(v, dtype=torch.float64) for v in point)
        grad = np.asarray([float(g) for g in torch.func.grad(product, tuple(range(n)))(*args)])
        hessians = [
            torch.func.hessian(product, tuple(range(n)))(*args),
            torch.func.jacfwd(torch.func.jacrev(product, tuple(range(n))), tuple(range(n)))(*args),
        ]
    return grad, [np.asarray([[float(h[i][j]) for j in range(n)] for i in range(n)]) for h in hessians]


def _agree(got: float, exact: float, backend: str) -> bool:
    if got == exact:
        return True
    if backend == "jax" and abs(exact) < _TINY and got == 0:
        return True  # XLA flushes a subnormal result to 0
    return math.isfinite(got) and abs(got - exact) <= 8 * np.finfo(np.float64).eps * max(abs(exact), _TINY)


@pytest.mark.parametrize("backend", ["jax", "torch"])
@pytest.mark.parametrize(("exponents", "points"), _STATED)
def test_first_and_second_derivatives_are_the_stated_products_at_the_ends_of_the_float_line(backend, exponents, points):
    # Autodiff of the scaling: power_product(x, 1, y, 1)'s gradient at (max, 0) was (nan, inf), its Hessian nan.
    for point in points:
        if backend == "jax" and any(0 < abs(v) < _TINY for v in point):
            continue  # XLA reads a subnormal input as 0
        grad, hessians = _stated_derivatives(backend, exponents, point)
        n = len(point)
        for i in range(n):
            exact = _exact_partials(point, exponents, (i,))
            assert _agree(grad[i], exact, backend), (point, i, grad[i], exact)
            if backend == "jax" and exact != 0 and not _TINY <= abs(exact) <= _MAX:
                # JAX differentiates a partial past the normal floats (t times its near-1 product, then its powers
                # of two, in `_scaled_by`) by autodiff of that scaling: its exponent held at twice the normal
                # range's, a power of two XLA flushes to 0 on the way, the second derivative may be inf or 0.
                continue
            for j in range(n):
                exact = _exact_partials(point, exponents, (i, j))
                for hessian in hessians:
                    assert _agree(hessian[i, j], exact, backend), (point, (i, j), hessian[i, j], exact)


def test_torch_checks_its_derivatives_at_every_order_and_mode():
    inputs = [torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in ((1.3, -0.4), (0.7, 2.0), (2.1, 1.5))]

    def product(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return torch_special.power_product(a, 1, b, -2, c, 3, 2.5, 1)

    assert torch.autograd.gradcheck(product, inputs, check_forward_ad=True, check_batched_grad=True)
    assert torch.autograd.gradgradcheck(product, inputs, check_fwd_over_rev=True, check_batched_grad=True)
    # A base broadcast against the others takes its gradient summed.
    row = torch.tensor([0.5, 1.5, 2.5], dtype=torch.float64, requires_grad=True)
    column = torch.tensor([[1.25], [0.75]], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda r, c: torch_special.power_product(r, 2, c, -1, r, 1), (row, column))
    assert torch.autograd.gradgradcheck(lambda r, c: torch_special.power_product(r, 2, c, -1), (row, column))


def test_jax_checks_its_derivatives_at_every_order_and_mode():
    from jax.test_util import check_grads

    args = (jnp.asarray([1.3, -0.4]), jnp.asarray([0.7, 2.0]), jnp.asarray([2.1, 1.5]))
    check_grads(lambda a, b, c: jax_util.power_product(a, 1, b, -2, c, 3, 2.5, 1), args, order=2, modes=["fwd", "rev"])
    # Under jit and vmap, its exponents static.
    per_point = jax.vmap(jax.grad(lambda a, b: jax_util.power_product(a, 2, b, -1, a, 1)))
    np.testing.assert_allclose(jax.jit(per_point)(args[0], args[1]), 3 * args[0] ** 2 / args[1], rtol=1e-15)


class _Square(torch.autograd.Function):
    """x**2, its backward a power_product, as a generated rule's backward calls it."""

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return x * x

    @staticmethod
    def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return torch_special.power_product(grad, 1, x, 1, 2.0, 1)


def test_torch_compile_traces_it_and_a_backward_that_calls_it():
    # Dynamo misread the Function's exponents where a rule's backward applied it (zip() of bases and exponents
    # of different lengths): under torch.compile the product is its code itself.
    def product(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch_special.power_product(_Square.apply(x), 3, y, -1, torch.sigmoid(-x), 1)

    # Ordinary points: a compiled gradient is autodiff of the scaling, nan at the edges the Function mends.
    x = torch.tensor([1.0, 30.0, -2.0], dtype=torch.float64, requires_grad=True)
    y = torch.tensor([0.5, 1e-200, 3.0], dtype=torch.float64, requires_grad=True)
    compiled = torch.compile(product, fullgraph=True)(x, y)
    eager = product(x, y)
    torch.testing.assert_close(compiled, eager, rtol=0, atol=0)
    got = torch.autograd.grad(compiled.sum(), (x, y))
    expected = torch.autograd.grad(eager.sum(), (x, y))
    torch.testing.assert_close(got, expected, rtol=1e-15, atol=0, equal_nan=True)
