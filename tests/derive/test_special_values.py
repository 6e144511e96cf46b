"""The bundled function rules at the edges of the float line: nan, zeros, subnormals, the largest floats.

Each case is a point the conformance matrix's special values found wrong (tests/package/test_conformance.py holds
every registered function there); here against the committed `generated/` package, so that it runs in the
unit lane, and with the mechanism it pins: how branches are printed, how a derivative reads the output.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
import sympy as sp
import torch

import generated.jax as gj
import generated.torch as gt
from rulegen.derive.functions import MPMATH_IMPLEMENTATIONS, Piecewise, bessel_i1
from rulegen.derive.saved import saved_form
from tests.conftest import rules_from

jax.config.update("jax_enable_x64", True)


DTYPES = (np.float32, np.float64)


def jax_grad(f, *args, argnum=0):
    return np.asarray(jax.vmap(jax.grad(f, argnums=argnum))(*(jnp.asarray(a) for a in args)))


def torch_grad(f, *args, argnum=0):
    return torch.vmap(torch.func.grad(f, argnums=argnum))(*(torch.from_numpy(a) for a in args)).numpy()


def torch_value(f, *args):
    return f(*(torch.from_numpy(a) for a in args)).numpy()


# -------------------------------------------------------------------- nan takes a branch that reads it


def test_a_stand_in_is_the_first_piece_so_that_nan_reads_the_variable():
    x = sp.Symbol("x", real=True)
    assert Piecewise((x, x >= 0), (1, True)).args == Piecewise((1, x < 0), (x, True)).args
    # Both pieces read x, or the condition is no ordering (nan != 0 holds): as written.
    assert Piecewise((x, x >= 0), (-x, True)).args[0].cond == (x >= 0)
    assert Piecewise((x, sp.Ne(x, 0)), (1, True)).args[0].cond == sp.Ne(x, 0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_log_ndtr_of_nan_is_nan(dtype):
    x = np.asarray([math.nan, -1.0, 2.0], dtype=dtype)
    for got in (
        np.asarray(gj.f_log_ndtr(x)),
        torch_value(gt.f_log_ndtr, x),
        jax_grad(gj.f_log_ndtr, x),
        torch_grad(gt.f_log_ndtr, x),
    ):
        assert math.isnan(got[0]) and np.isfinite(got[1:]).all()


# -------------------------------------------------------------------- a real rule's derivative has no real parts


def test_abs_of_a_function_with_poles_differentiates_to_its_sign_times_its_derivative():
    # sympy cannot show gamma(x) or loggamma(x) real (their poles), so d/dx Abs(u) came back through re(u) and
    # im(u), which no printer prints: abs(loggamma(x)) and log(abs(gamma(x))) were internal errors at build.
    from rulegen.derive.partials import differentiate

    x = sp.Symbol("x", real=True)
    assert differentiate(sp.Abs(sp.gamma(x)), x) == sp.sign(sp.gamma(x)) * sp.gamma(x) * sp.polygamma(0, x)
    assert differentiate(sp.Abs(sp.loggamma(x)), x) == sp.sign(sp.loggamma(x)) * sp.polygamma(0, x)
    # A complex rule's symbols are not real: its Abs keeps sympy's own derivative.
    z = sp.Symbol("z")
    assert differentiate(sp.Abs(sp.gamma(z)), z).has(sp.re)


# -------------------------------------------------------------------- a derivative is not divided out of the output


@pytest.mark.parametrize(("dtype", "x"), [(np.float64, -1.6531469186949233e154), (np.float32, -2.499662e19)])
def test_log_ndtr_is_finite_where_x_squared_overflows_but_half_of_it_does_not(dtype, x):
    # log Phi(x) ~ -x**2 / 2: finite on a band past sqrt(max), where x**2 alone is inf (JAX printed -inf there).
    point = np.asarray([x], dtype=dtype)
    with mpmath.workprec(200):
        exact = float(mpmath.log(mpmath.ncdf(mpmath.mpf(float(point[0])))))
    assert math.isfinite(exact) and abs(exact) <= float(np.finfo(dtype).max)
    for got in (np.asarray(gj.f_log_ndtr(point)), torch_value(gt.f_log_ndtr, point)):
        assert got.dtype == dtype and got[0] == pytest.approx(exact, rel=8 * float(np.finfo(dtype).eps))


def test_a_saved_output_is_read_where_it_is_a_factor_only():
    x, y, out = sp.symbols("x y out")
    assert saved_form(x ** (y - 1) * y, {x**y: out}) == x ** (y - 1) * y
    assert saved_form(x**y * sp.log(x) * 2, {x**y: out}) == 2 * out * sp.log(x)
    assert saved_form(2 * x * sp.exp(x) * sp.sin(x), {sp.exp(x) * sp.sin(x): out}) == 2 * out * x


@pytest.mark.parametrize(
    ("dtype", "x", "y"),
    [
        (np.float32, 1e-30, 1.5),  # x**y underflows: out * y / x was 2.80e-15 for 1.5e-15
        (np.float32, 3.64e-31, 1.5),  # and 0 here
        (np.float32, 1.29e20, 2.0),  # x**y overflows: inf for 2.58e20
        (np.float64, 1e-300, 1.5),  # 0 for 1.5e-150
        # x**(y - 1) overflows where y x**(y - 1) does not: the output's quotient, y * out / x, is right there.
        (np.float64, 2.4850300990025238e-311, -1.3071596040192355e-100),
    ],
)
def test_pow_derivative_where_the_output_under_or_overflows(dtype, x, y):
    xs, ys = np.asarray([x], dtype=dtype), np.asarray([y], dtype=dtype)
    exact = float(y * mpmath.mpf(float(xs[0])) ** (mpmath.mpf(float(ys[0])) - 1))
    # XLA on the CPU reads a subnormal x as 0: the derivative at 0 is JAX's there.
    subnormal = abs(float(xs[0])) < float(np.finfo(dtype).tiny)
    for f, grad in ((gj.f_pow, jax_grad), (gt.f_pow, torch_grad))[subnormal:]:
        got = float(grad(f, xs, ys)[0])
        assert got == pytest.approx(exact, rel=8 * float(np.finfo(dtype).eps), abs=0), f


@pytest.mark.parametrize("dtype", DTYPES)
def test_pow_derivatives_at_zero_are_the_frameworks(dtype):
    x = np.zeros(3, dtype=dtype)
    y = np.asarray([0.5, 1.5, 2.0], dtype=dtype)
    for f, grad in ((gj.f_pow, jax_grad), (gt.f_pow, torch_grad)):
        np.testing.assert_array_equal(grad(f, x, y, argnum=0), [math.inf, 0.0, 0.0])
        np.testing.assert_array_equal(grad(f, x, y, argnum=1), [0.0, 0.0, 0.0])


@pytest.mark.parametrize("dtype", DTYPES)
def test_pow_derivative_below_zero_keeps_the_parity_of_a_huge_exponent(dtype):
    # y x**(y - 1): y - 1 rounds to y past 2**53 (2**24 in float32), and x**(y - 1) took y's parity, the wrong
    # sign: 1e20 at (-1, 1e20) for -1e20, +inf at (-max, max) for -inf, -inf at (-tiny, -max) for +inf.
    info = np.finfo(dtype)
    big = float(info.max)
    x = np.asarray([-1.0, -big, -float(info.tiny), -2.0], dtype=dtype)
    y = np.asarray([1e20, big, -big, 3.0], dtype=dtype)
    expected = [-float(y[0]), -math.inf, math.inf, 12.0]
    jitted = lambda f, *a: np.asarray(jax.jit(jax.vmap(jax.grad(f)))(*(jnp.asarray(v) for v in a)))  # noqa: E731
    for f, grad in ((gj.f_pow, jax_grad), (gj.f_pow, jitted), (gt.f_pow, torch_grad)):
        np.testing.assert_array_equal(grad(f, x, y), expected)


@pytest.mark.parametrize("dtype", DTYPES)
def test_pow_derivative_at_a_zero_exponent_is_zero_at_subnormals(dtype):
    # 0 * x**-1, 0 * inf, was nan; x**0 is 1 on both sides of x.  XLA reads a subnormal as 0: torch only.
    tiny = float(np.finfo(dtype).smallest_subnormal)
    x = np.asarray([tiny, -tiny, 2 * tiny], dtype=dtype)
    y = np.zeros(3, dtype=dtype)
    np.testing.assert_array_equal(torch_grad(gt.f_pow, x, y), [0.0, 0.0, 0.0])


@pytest.mark.parametrize("dtype", DTYPES)
def test_atan2_of_subnormals_is_the_angle_of_what_xla_reads(dtype):
    # XLA's arctan2 flushed subnormal inputs partway: nan at (tiny, tiny), -pi at (tiny, -max).  Read as the
    # zeros of their signs, as XLA's arithmetic reads them: IEEE's atan2 of those, eager and under jit.
    tiny, big = float(np.finfo(dtype).smallest_subnormal), float(np.finfo(dtype).max)
    y = np.asarray([tiny, -tiny, tiny, tiny], dtype=dtype)
    x = np.asarray([tiny, tiny, -tiny, -big], dtype=dtype)
    expected = np.arctan2(np.asarray([0.0, -0.0, 0.0, 0.0]), np.asarray([0.0, 0.0, -0.0, -big])).astype(dtype)
    for f in (gj.f_atan2, jax.jit(gj.f_atan2)):
        np.testing.assert_array_equal(np.asarray(f(jnp.asarray(y), jnp.asarray(x))), expected)
    # torch computes subnormals: the angle itself.
    np.testing.assert_allclose(torch_value(gt.f_atan2, y, x), np.arctan2(y, x), rtol=2 * float(np.finfo(dtype).eps))


@pytest.mark.parametrize("dtype", DTYPES)
def test_atan2_and_hypot_partials_under_jit_at_the_ends_of_the_float_line(dtype):
    # XLA under jit divides (a / h) / h as a / (h * h), whose square underflows at the smallest normals (atan2's
    # partial in y at (0, tiny) was inf for 1 / tiny), and by a power of two as a multiply by its reciprocal,
    # 2**-1023 (2**-127) at the largest floats, a subnormal flushed to 0 (hypot's partial at (max, 0) was 0).
    info = np.finfo(dtype)
    tiny, big = float(info.tiny), float(info.max)

    def jitted(f, *args, argnum=0):
        g = jax.jit(jax.vmap(jax.grad(f, argnums=argnum)))
        return np.asarray(g(*(jnp.asarray(a) for a in args)))

    y, x = np.asarray([0.0, 0.0], dtype=dtype), np.asarray([tiny, -tiny], dtype=dtype)
    np.testing.assert_allclose(jitted(gj.f_atan2, y, x), [1 / tiny, -1 / tiny], rtol=4 * float(info.eps))
    np.testing.assert_allclose(jitted(gj.f_atan2, x, y, argnum=1), [-1 / tiny, 1 / tiny], rtol=4 * float(info.eps))
    x, y = np.asarray([big, -big], dtype=dtype), np.asarray([0.0, 0.0], dtype=dtype)
    np.testing.assert_array_equal(jitted(gj.f_hypot, x, y), [1.0, -1.0])


# -------------------------------------------------------------------- quotients that cancel at 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_hypot_derivative_at_zero_and_subnormals(dtype):
    tiny = np.finfo(dtype).smallest_subnormal
    x = np.asarray([0.0, tiny, 3 * tiny], dtype=dtype)
    y = np.asarray([0.0, tiny, 4 * tiny], dtype=dtype)
    # torch computes subnormals: 1/sqrt(2) and 3/5; XLA on CPU reads them as 0, the derivative at (0, 0), 0.
    np.testing.assert_allclose(torch_grad(gt.f_hypot, x, y), [0.0, 1 / math.sqrt(2), 0.6], rtol=1e-6)
    np.testing.assert_array_equal(jax_grad(gj.f_hypot, x, y), [0.0, 0.0, 0.0])


@pytest.mark.parametrize("dtype", DTYPES)
def test_bessel_i1e_derivative_near_zero_is_one_half(dtype):
    info = np.finfo(dtype)
    x = np.asarray([0.0, -0.0, info.smallest_subnormal, 1.5e-38, 2e-38, 1e-20], dtype=dtype)
    for f, grad in ((gj.f_bessel_i1e, jax_grad), (gt.f_bessel_i1e, torch_grad)):
        np.testing.assert_allclose(grad(f, x), 0.5, rtol=2 * float(info.eps))


# -------------------------------------------------------------------- a refinement taken only where it is in range


@pytest.mark.parametrize("dtype", DTYPES)
def test_bessel_i1e_second_derivative_at_zero_is_sign_s_convention(dtype):
    # i1e'' is -sign(x) near 0: 0 at 0, as sign(0) is.  Its limit form exp(-|x|) / 2 differentiated with JAX's
    # |x|' = 1 at 0 gave 0.5 (XLA reads the subnormals as 0, where it is 0 too).
    tiny = float(np.finfo(dtype).smallest_subnormal)
    x = np.asarray([0.0, -0.0, tiny, -tiny], dtype=dtype)
    second = jax.vmap(jax.grad(jax.grad(gj.f_bessel_i1e)))
    for g in (second, jax.jit(second)):
        np.testing.assert_array_equal(np.asarray(g(jnp.asarray(x))), [0.0, 0.0, 0.0, 0.0])
    got = torch.vmap(torch.func.grad(torch.func.grad(gt.f_bessel_i1e)))(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, [0, 0, -1, 1], rtol=2 * float(np.finfo(dtype).eps), atol=0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cbrt_of_a_subnormal_is_the_root_of_what_the_framework_reads(dtype):
    # XLA reads a subnormal as 0 in its arithmetic, and its pow reads 2**-1074 as 2**-1075: the root was
    # 2**(-1/3) of the right one (1.35e-108 for 1.70e-108).  JAX: the root of 0; torch computes subnormals.
    tiny = float(np.finfo(dtype).smallest_subnormal)
    x = np.asarray([tiny, 8 * tiny], dtype=dtype)
    exact = [float(mpmath.cbrt(mpmath.mpf(float(v)))) for v in x]
    for f in (gj.f_cbrt, jax.jit(gj.f_cbrt)):
        np.testing.assert_array_equal(np.asarray(f(jnp.asarray(x))), [0.0, 0.0])
    # y**3 is subnormal in the Newton step, its residual rounded: within the matrix's tolerance.
    np.testing.assert_allclose(torch_value(gt.f_cbrt, x), exact, rtol=128 * float(np.finfo(dtype).eps))


def test_cbrt_of_the_largest_float32():
    # The 46 largest, where y**3 of the rounded root overflowed and the Newton step made it 2/3 of the root.
    top = np.finfo(np.float32).max.view(np.int32)
    x = np.concatenate([np.arange(top - 45, top + 1, dtype=np.int32).view(np.float32), np.float32([1e38, 8.0])])
    exact = np.cbrt(x.astype(np.float64))
    for got in (np.asarray(gj.f_cbrt(x)), torch_value(gt.f_cbrt, x)):
        np.testing.assert_allclose(got, exact, rtol=2 * np.finfo(np.float32).eps)


# -------------------------------------------------------------------- a derivative's square does not overflow


def jax_second(f, x):
    return np.asarray(jax.vmap(jax.grad(jax.grad(f)))(jnp.asarray(x)))


def torch_second(f, x):
    return torch.vmap(torch.func.grad(torch.func.grad(f)))(torch.from_numpy(x)).numpy()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["f_atan", "f_erf", "f_erfc", "f_ndtr"])
def test_a_second_derivative_through_a_square_is_finite_at_the_largest_floats(name, dtype):
    # 1 / (x**2 + 1) and exp(-x**2) differentiate through the square: `x**2`'s derivative 2 * x is inf at the
    # largest floats, times the 0 it meets nan; printed `x * x`, it is -0 + -0.
    big = float(np.finfo(dtype).max)
    x = np.asarray([big, -big, 0.5], dtype=dtype)
    for got in (jax_second(getattr(gj, name), x), torch_second(getattr(gt, name), x)):
        assert got[0] == 0 and got[1] == 0 and got[2] != 0, got


# -------------------------------------------------------------------- nan in, nan out: torch's sign and Max's tie


@pytest.mark.parametrize("dtype", DTYPES)
def test_abs_and_max_derivatives_of_nan_are_nan_in_torch(dtype):
    # torch.sign(nan) is 0: |x|'s derivative at nan was 0, Max's 1/2 (JAX's are nan).
    x = np.asarray([math.nan, -2.0, 3.0], dtype=dtype)
    for got in (torch_grad(gt.f_abs, x), jax_grad(gj.f_abs, x)):
        assert math.isnan(got[0]) and list(got[1:]) == [-1, 1]
    y = np.asarray([1.0, 1.0, 1.0], dtype=dtype)
    for argnum in (0, 1):
        for got in (torch_grad(gt.f_max, x, y, argnum=argnum), jax_grad(gj.f_max, x, y, argnum=argnum)):
            assert math.isnan(got[0]) and np.isfinite(got[1:]).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_max_at_a_tie_of_infinities_gives_each_input_half(dtype):
    # Max's derivative sign(x - y) reads inf - inf as nan; at any tie it is 1/2, as both frameworks' own.
    x = np.asarray([math.inf, -math.inf, 2.0, 3.0], dtype=dtype)
    y = np.asarray([math.inf, -math.inf, 2.0, 1.0], dtype=dtype)
    for argnum, last in ((0, 1.0), (1, 0.0)):
        for got in (torch_grad(gt.f_max, x, y, argnum=argnum), jax_grad(gj.f_max, x, y, argnum=argnum)):
            assert list(got) == [0.5, 0.5, 0.5, last]


# -------------------------------------------------------------------- a quotient by x at x = 0


def test_bessel_i1_derivative_is_its_limit_at_zero():
    # I1'(x) = I0(x) - I1(x) / x: 0 / 0 at x = 0, where it is 1/2; its second derivative 3x/8 near 0.
    x = sp.Symbol("x", real=True)
    first = bessel_i1(x).diff(x)
    reference = sp.lambdify(x, [first, first.diff(x)], modules=[dict(MPMATH_IMPLEMENTATIONS), "mpmath"])
    with mpmath.workdps(30):
        assert [float(v) for v in reference(mpmath.mpf(0))] == [0.5, 0.0]
        value, slope = reference(mpmath.mpf("1e-300"))
    assert float(value) == 0.5 and float(slope) == pytest.approx(3e-300 / 8, rel=1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
def test_jax_i0_in_a_derivative_is_differentiated_by_i1(dtype):
    # JAX's own i0 differentiates to 1 at 0 (through exp(|x|)); I1's second derivative called it.
    from generated.jax._special import bessel_i0 as runtime_i0

    x = np.asarray([0.0, -0.0, 1.5], dtype=dtype)
    got = jax_grad(runtime_i0, x)
    assert list(got[:2]) == [0, 0] and got[2] == pytest.approx(float(mpmath.besseli(1, 1.5)), rel=1e-6)


# -------------------------------------------------------------------- a series where the framework's is 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_digamma_derivative_at_huge_arguments_is_its_series(dtype):
    # polygamma(1, x), digamma's derivative, is 0 in both frameworks past 1e20 and nan at inf, where it is 1/x.
    x = np.asarray([1e20, 1e30, math.inf, 3.5], dtype=dtype)
    with mpmath.workdps(30):
        exact = [float(mpmath.polygamma(1, mpmath.mpf(float(v)))) for v in x[[0, 1, 3]]]
    for got in (jax_grad(gj.f_digamma, x), torch_grad(gt.f_digamma, x)):
        assert got[2] == 0
        assert list(got[[0, 1, 3]]) == pytest.approx(exact, rel=16 * float(np.finfo(dtype).eps))


def test_i1_second_derivative_is_the_runtime_s_in_the_registry_too():
    # The registry's I1'' was a closed form of its own, (1 + 2/x**2) I1 - I0/x: cancelling near 0 (1.5e-3 relative at
    # x = 1e-6) and inf - inf where I0 and I1 overflow (nan at 800, where it is inf); the runtime's is a series and a
    # scaled product.
    import importlib

    from rulegen.derive.functions import NUMPY_IMPLEMENTATIONS, bessel_i1_curvature

    x = sp.Symbol("x", real=True)
    second = bessel_i1(x).diff(x, 2)
    assert second == bessel_i1_curvature(x)
    numpy_names = {
        name: importlib.import_module(path.rpartition(".")[0]) for name, path in NUMPY_IMPLEMENTATIONS.items()
    }
    modules = [
        {n: getattr(m, NUMPY_IMPLEMENTATIONS[n].rpartition(".")[2]) for n, m in numpy_names.items()},
        "scipy",
        "numpy",
    ]
    evaluate = sp.lambdify(x, second, modules=modules)
    points = [1e-6, 0.5, 3.0, 800.0]
    with mpmath.workdps(40):
        exact = [float((3 * mpmath.besseli(1, p) + mpmath.besseli(3, p)) / 4) for p in points]
    got = evaluate(np.asarray(points))
    assert np.allclose(got, exact, rtol=1e-12, atol=0)


# -------------------------------------------------------------------- a derivative through Mills' ratio, not exp(z**2)


def _ndtri_slope(x: float) -> float:
    with mpmath.workdps(40 + max(0, int(-math.log10(x)))):
        z = mpmath.sqrt(2) * mpmath.erfinv(2 * mpmath.mpf(x) - 1)
        return float(mpmath.sqrt(2 * mpmath.pi) * mpmath.exp(z**2 / 2))


@pytest.mark.parametrize("dtype", DTYPES)
def test_ndtri_derivative_in_the_tails_reads_x_not_the_square_of_ndtri(dtype):
    # sqrt(2 pi) exp(ndtri(x)**2 / 2) takes ndtri's rounding times z**2: 143 float32 eps off (JAX) at the smallest
    # normal x.  sqrt(pi / 2) erfcx(-z / sqrt 2) / x, and its mirror in 1 - x, are within a few.
    points = [float(np.finfo(dtype).tiny), 1e-30, 1e-5, 0.02, 0.3, 0.5, 0.9, 1 - 2.0**-20]
    x = np.asarray(points, dtype=dtype)
    exact = [_ndtri_slope(float(v)) for v in x]
    for got in (jax_grad(gj.f_ndtri, x), torch_grad(gt.f_ndtri, x)):
        assert list(got) == pytest.approx(exact, rel=8 * float(np.finfo(dtype).eps))


@pytest.mark.parametrize("dtype", DTYPES)
def test_ndtri_second_derivative_is_one_product_at_the_ends(dtype):
    # ndtri'' = ndtri(x) ndtri'(x)**2: -inf at 0 and where it overflows near 0, inf at 1.  JAX's own derivative of
    # ndtri is 0 at 0 (0 there), and autodiff of the tails' erfcx(u) / x is inf - inf where it overflows (nan).
    tiny = float(np.finfo(dtype).tiny)
    x = np.asarray([0.0, tiny, 1e-300 if dtype == np.float64 else 1e-30, 1.0, 1e-10, 0.7], dtype=dtype)
    finite = []
    for v in x[4:]:
        with mpmath.workdps(60):
            z = mpmath.sqrt(2) * mpmath.erfinv(2 * mpmath.mpf(float(v)) - 1)
            finite.append(float(z * _ndtri_slope(float(v)) ** 2))
    for got in (jax_second(gj.f_ndtri, x), torch_second(gt.f_ndtri, x)):
        assert list(got[:4]) == [-math.inf, -math.inf, -math.inf, math.inf], got
        assert list(got[4:]) == pytest.approx(finite, rel=16 * float(np.finfo(dtype).eps))


# -------------------------------------------------------------------- a rational partial in partial fractions


@pytest.mark.parametrize("dtype", DTYPES)
def test_logit_second_derivative_at_tiny_p_is_minus_inf_not_nan(dtype):
    # 1 / (p (1 - p)) differentiates to a quotient by (p (1 - p))**2, which underflows at tiny p: nan where logit''
    # is -inf (it overflows there).  1/p - 1/(p - 1) differentiates term by term.
    tiny = float(np.finfo(dtype).tiny)
    small = [tiny, 1e-300 if dtype == np.float64 else 1e-30, 0.0]
    finite = [0.3, 0.5, 0.9, 1e-10 if dtype == np.float64 else 1e-8]
    x = np.asarray(small + finite, dtype=dtype)
    exact = [
        float((2 * mpmath.mpf(float(p)) - 1) / (mpmath.mpf(float(p)) * (1 - mpmath.mpf(float(p)))) ** 2) for p in x[3:]
    ]
    for got in (jax_second(gj.f_logit, x), torch_second(gt.f_logit, x)):
        assert list(got[:3]) == [-math.inf] * 3, got
        assert list(got[3:]) == pytest.approx(exact, rel=8 * float(np.finfo(dtype).eps), abs=1e-12)


def test_a_registry_partial_rational_in_its_argument_is_in_partial_fractions():
    from rulegen.derive.functions import logit

    p = sp.Symbol("p", real=True)
    assert sp.Add.make_args(logit(p).diff(p)) == sp.Add.make_args(1 / p + 1 / (1 - p))
    assert sp.simplify(logit(p).diff(p) - 1 / (p * (1 - p))) == 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_logit_derivative_at_the_ends_of_its_domain_is_plus_inf_as_the_frameworks(dtype):
    # At p = 1 both p - 1 and 1 - p are +0: the fraction -1 / (p - 1) that sympy's apart writes was -inf there,
    # where logit' = 1 / (p (1 - p)) tends to +inf from inside the domain, as torch's and JAX's own logit give.
    p = np.asarray([1.0, 0.0, np.nextafter(dtype(1), dtype(0)), 0.5], dtype=dtype)
    below_one = float(p[2])
    want = [math.inf, math.inf, float(1 / (mpmath.mpf(below_one) * (1 - mpmath.mpf(below_one)))), 4.0]
    for got in (jax_grad(gj.f_logit, p), torch_grad(gt.f_logit, p)):
        assert list(got) == pytest.approx(want, rel=2 * float(np.finfo(dtype).eps))
    # The frameworks' own agree at the ends.
    torch_own = torch.vmap(torch.func.grad(torch.special.logit))(torch.from_numpy(p[:2])).numpy()
    jax_own = np.asarray(jax.vmap(jax.grad(jax.scipy.special.logit))(jnp.asarray(p[:2])))
    assert list(torch_own) == list(jax_own) == [math.inf, math.inf]


def test_a_partial_is_measured_where_the_registry_s_function_is_defined():
    # Over the whole line the search took 1/p - 1/(p - 1) for -1/(p**2 - p), which it measured more accurate at
    # p > 1 (where logit is nan, and the fractions cancel), and whose derivative underflows again.
    from rulegen.derive.functions import logit, xlogy
    from rulegen.derive.partials import defined_where
    from rulegen.derive.stabilise import Sampling
    from rulegen.spec.rules import Domain

    x, y = sp.symbols("x y", real=True)
    line = Sampling(((x, Domain()), (y, Domain())))
    assert defined_where(line, logit(x) + y).condition == sp.And(x >= 0, x <= 1)
    assert defined_where(line, xlogy(x, y)).condition == (y >= 0)
    # sympy's own functions, whose partials the registry does not state, and arguments other than an input: as sampled.
    assert defined_where(line, sp.log(x)) is None
    assert defined_where(line, logit(x * y)) is None


# -------------------------------------------------------------------- digamma by recurrence just below 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_gamma_second_derivative_where_gamma_is_infinite_below_zero(dtype):
    # At the smallest negative subnormal Gamma is -inf and Gamma'' = Gamma (psi**2 + psi') is -inf.  Through the
    # reflection psi(1 - x) - pi cot(pi x), reverse mode gave the infinite cotangent to -trigamma(1 - x) and
    # pi**2 / sin(pi x)**2, of opposite signs: nan.  psi(1 + x) - 1/x's two derivatives have one sign.
    x = np.asarray([-float(np.finfo(dtype).smallest_subnormal), -0.1, -0.125, -0.13, -2.5], dtype=dtype)
    exact = []
    for v in x[1:]:
        with mpmath.workdps(40):
            p = mpmath.mpf(float(v))
            exact.append(float(mpmath.gamma(p) * (mpmath.digamma(p) ** 2 + mpmath.polygamma(1, p))))
    got = torch_second(gt.f_gamma, x)
    assert got[0] == -math.inf, got
    assert list(got[1:]) == pytest.approx(exact, rel=64 * float(np.finfo(dtype).eps))
    digamma_exact = [float(mpmath.digamma(mpmath.mpf(float(v)))) for v in x[1:]]
    assert torch_value(gt.f_digamma, x)[0] == math.inf
    for value in (torch_value(gt.f_digamma, x), np.asarray(gj.f_digamma(x))):
        assert list(value[1:]) == pytest.approx(digamma_exact, rel=8 * float(np.finfo(dtype).eps))


def test_a_partial_is_searched_where_one_comparison_is_its_domain(tmp_path, search_cache_off):
    # One domain condition (xlogy's y >= 0) is a bare Relational, not an And: the search asked its truth value,
    # and the cookbook's Beta log-density was refused as an internal error.  Its two log terms alone take that
    # path (a search of -log(beta(a, b))'s partials adds 12 s and nothing to it); the whole density is built
    # and checked by tests/docs/test_cookbook.py.
    from rulegen.derive.partials import derive_rule

    (rule,) = rules_from(
        tmp_path,
        "name: beta_log_terms\n"
        "inputs: {x: {}, a: {assume: positive}, b: {assume: positive}}\n"
        "forward: xlogy(a - 1, x) + xlog1py(b - 1, -x)\n",
        "beta_log_terms.yaml",
    )
    assert derive_rule(rule).choices


# -------------------------------------------------------------------- beta by cases, its partial by the registry


@functools.cache
def _registry_beta(order: str, name: str = "beta", *, traced: bool = False) -> object:
    """beta or betaln (value) or its partial in a as JAX code computes it (the registry's replacement, printed);
    `traced`, the code itself, of arrays (which JAX may differentiate).

    The function takes every point at once, one array per argument: the code by cases is hundreds of JAX
    operations, each run eagerly, and a call per point ran them all again (seconds of a worker's CPU a test).
    The operations are elementwise, so each point's value is the one a call of its own gives.  Made once per
    process: printing the code by cases takes seconds.
    beta's partial prints as the runtime's `beta_slope` (its cases, differentiated in a by the registry's stated
    partial), which the code calls.
    """
    import rulegen.runtime.jax._util as jax_util
    from rulegen.derive import functions as fn
    from rulegen.plan.forms import corrections
    from rulegen.plan.printers import JaxArrayPrinter
    from rulegen.runtime.jax._beta import beta_slope

    a, b = sp.symbols("a b", real=True)
    expr = fn.FUNCTIONS[name](a, b) if name in fn.FUNCTIONS else fn.BY_NAME[name].sympy(a, b)
    expr = sp.diff(expr, a) if order == "first" else expr
    code = JaxArrayPrinter().doprint(corrections("jax")(expr))
    f = eval(f"lambda a, b: {code}", {"jnp": jnp, "jax": jax, "math": math, **vars(jax_util), "beta_slope": beta_slope})
    if traced:
        return f

    def at(points: Sequence[tuple[float, float]], dtype: type = np.float64) -> list[float]:
        xs, ys = zip(*points, strict=True)
        return [float(v) for v in f(jnp.asarray(xs, dtype=dtype), jnp.asarray(ys, dtype=dtype))]

    return at


def test_beta_at_its_zeros_infinities_and_overflow_edges():
    # float64 (XLA flushes float32's subnormals: the matrix holds both dtypes and its readings).
    dtype = np.float64
    # As exp(log|Gamma| sums) beta was inf - inf = nan wherever an argument was 0, inf or the largest float,
    # and 1.77 at (1e200, 0.5), where log Gamma of 1e200 (4.6e202) cancelled: Stirling's difference there.
    beta = _registry_beta("value")
    info = np.finfo(dtype)
    tiny, big, sub = float(info.tiny), float(info.max), float(info.smallest_subnormal)
    points = [
        (0.0, 0.0),
        (sub, big),
        (big, big),
        (math.inf, 0.5),
        (-sub, math.inf),
        (big, tiny),
        (math.nan, 0.0),
        (-big, big),
        (1e200, 0.5),
    ]
    zeros, sub_big, bigs, inf_half, sub_inf, big_tiny, nan_zero, poles, large = beta(points, dtype)
    assert zeros == math.inf
    assert sub_big == math.inf
    assert bigs == 0.0
    assert inf_half == 0.0
    assert sub_inf == -math.inf
    assert big_tiny == pytest.approx(1 / tiny, rel=1e3 * float(info.eps))
    assert math.isnan(nan_zero)
    # beta(-max, max): poles of Gamma at a and a + b, whose ratio is 1/max (Gamma's reflection).
    assert 0 <= poles <= 2 * tiny
    assert large == pytest.approx(math.sqrt(math.pi) * 1e-100, rel=1e-13)


def test_log_of_beta_is_betaln_finite_where_beta_under_or_overflows():
    # log(beta(a, b)) of positive a, b was the log of beta by cases: -inf where beta underflows (a Beta
    # log-density at b = the largest float), and from a = 8 on log Gamma of the larger arguments cancelled (as a
    # log Gamma sum, 17 bits lost at (1e5, 1/2)).  It is betaln, Stirling's differences from 8.
    from rulegen.derive import functions as fn
    from rulegen.derive.forms import canonical

    a, b = sp.symbols("a b", positive=True)
    assert canonical(sp.log(fn.FUNCTIONS["beta"](a, b))) == fn.betaln(a, b)
    x, y = sp.symbols("x y", real=True)
    assert not canonical(sp.log(fn.FUNCTIONS["beta"](x, y))).has(fn.betaln)  # log(beta) < 0 there: not log|beta|
    betaln = _registry_beta("value", "betaln")
    big = float(np.finfo(np.float64).max)
    points = [
        (11.0, big),
        (1e5, 0.5),
        (0.5, 1e5),
        (8.0, 8.0),
        (7.9, 8.1),
        (1e200, 1e200),
        (3.5e235, 1.6e306),
        (1e-300, 0.5),
        (0.3, 2.5),
        (20.0, 1e-10),
        (big, big / 2),
    ]
    with mpmath.workdps(60):
        exact = [float(MPMATH_IMPLEMENTATIONS["betaln"](mpmath.mpf(x_), mpmath.mpf(y_))) for x_, y_ in points]
    edges = [(big, big), (0.0, 0.5), (math.inf, 0.5), (math.nan, 0.5)]
    *values, both_big, zero, inf, nan = betaln([*points, *edges])
    for point, value, want in zip(points, values, exact, strict=True):
        assert value == pytest.approx(want, rel=8 * float(np.finfo(np.float64).eps)), point
    assert both_big == -math.inf
    assert zero == math.inf
    assert inf == -math.inf
    assert math.isnan(nan)


def test_beta_partial_where_beta_over_or_underflows():
    # float64 (XLA flushes float32's subnormals: the matrix holds both dtypes and its readings).
    dtype = np.float64
    # sympy's beta (digamma(a) - digamma(a + b)) is inf * 0 at b = 0 (its limit is -trigamma(a)), and
    # digamma(a) - digamma(a + b) is 0 wherever a + b rounds to a: the registry's beta_slope expands it in b.
    slope = _registry_beta("first")
    info = np.finfo(dtype)
    big, sub = float(info.max), float(info.smallest_subnormal)
    points = [(0.5, 0.0), (sub, big), (sub, sub), (big, sub), (-0.5, math.inf), (0.0, math.nan), (0.5, 1e-300)]
    at_zero, sub_big, subs, big_sub, inf, nan, near_zero, large = slope([*points, (1e200, 0.5)], dtype)
    assert at_zero == pytest.approx(-(math.pi**2) / 2, rel=1e3 * float(info.eps))
    assert sub_big == -math.inf
    assert subs == -math.inf
    assert abs(big_sub) <= 2 * float(info.tiny)
    assert inf == math.inf
    assert math.isnan(nan)
    assert near_zero == pytest.approx(-(math.pi**2) / 2, rel=1e-13)
    assert large == pytest.approx(-math.sqrt(math.pi) / 2 * 1e-300, rel=1e-12)


def _exact_beta(a: float, b: float, order: int) -> float:
    """d^n/da^n beta(a, b) at the floats a and b (their exact sum, not its rounding), n = `order` <= 2."""
    with mpmath.workdps(60):
        x, y = mpmath.mpf(a), mpmath.mpf(b)
        value, difference = mpmath.beta(x, y), mpmath.psi(0, x) - mpmath.psi(0, x + y)
        if order == 0:
            return float(value)
        if order == 1:
            return float(value * difference)
        return float(value * (difference**2 + mpmath.psi(1, x) - mpmath.psi(1, x + y)))


#: Pairs whose first argument beta reflects.
REFLECTED = [(-10000.3, 0.7), (-117.3, 0.7), (-30.7, 0.7), (-2.5, 0.7), (-3.3, 2.5)]


def test_beta_of_a_negative_argument_is_reflected():
    # log|Gamma(a)| - log|Gamma(a + b)|, about -8.2e4 each at a = -10000.3, cancelled (1.6e4 eps off), and at
    # -30.7 + 0.7, which rounds to the pole -30, beta's partial was 0 * inf (0.0 for -0.457) and its second
    # derivative nan: beta(b, 1 - a - b) sin(pi (a + b)) / sin(pi a), the sine of the sum reduced exactly.
    # Every pair in one call (the code is elementwise, see `_registry_beta`): a test per pair ran JAX's hundreds
    # of eager operations, and their derivatives', again for each (10 s of CPU a pair, 13 s for all five).
    eps = float(np.finfo(np.float64).eps)
    beta, slope = _registry_beta("value"), _registry_beta("first")
    values = beta(REFLECTED)
    slopes = slope([*REFLECTED, *((b, a) for a, b in REFLECTED)])
    second = _registry_beta("first", traced=True)
    a_column, b_column = (jnp.asarray(column) for column in zip(*REFLECTED, strict=True))
    # The gradient of the sum is each point's own: no point's value reads another's.
    curvatures = jax.grad(lambda x: second(x, b_column).sum())(a_column)
    for k, (a, b) in enumerate(REFLECTED):
        assert values[k] == pytest.approx(_exact_beta(a, b, 0), rel=16 * eps, abs=1e-300), (a, b)
        in_a, in_b = slopes[k], slopes[len(REFLECTED) + k]
        assert in_a == pytest.approx(_exact_beta(a, b, 1), rel=64 * eps), (a, b)
        assert in_b == pytest.approx(_exact_beta(b, a, 1), rel=64 * eps), (a, b)
        assert float(curvatures[k]) == pytest.approx(_exact_beta(a, b, 2), rel=1024 * eps), (a, b)


def _exact_beta_mixed(a: float, b: float) -> float:
    """d/db d/da beta(a, b) = beta (d (psi(b) - psi(a + b)) - psi1(a + b)), d = psi(a) - psi(a + b)."""
    with mpmath.workdps(60):
        x, y = mpmath.mpf(a), mpmath.mpf(b)
        difference = mpmath.psi(0, x) - mpmath.psi(0, x + y)
        in_b = mpmath.psi(0, y) - mpmath.psi(0, x + y)
        return float(mpmath.beta(x, y) * (difference * in_b - mpmath.psi(1, x + y)))


#: Pairs where beta's partial in a does not take its expansion in small b, and where that expansion's argument
#: a + b/2 is a pole of trigamma (-3.25 + 1.25 = -2).
UNEXPANDED = [(-3.25, 2.5), (-5.5, 3.0), (-2.5, 1.0)]


def test_beta_partial_is_differentiable_where_its_expansion_in_b_is_not_taken():
    # The expansion of d/da beta in small b, -trigamma(a + b/2) ..., read a + b/2 unguarded outside its region:
    # at (-3.25, 2.5) that is -2, a pole of trigamma, whose infinite derivative times the `where`'s zero cotangent
    # made both second derivatives through d/da nan.  It reads stand-ins there now.  Every pair in one call, as
    # above.
    eps = float(np.finfo(np.float64).eps)
    first = _registry_beta("first", traced=True)
    a_column, b_column = (jnp.asarray(column) for column in zip(*UNEXPANDED, strict=True))
    in_a = jax.grad(lambda x: first(x, b_column).sum())(a_column)
    in_b = jax.grad(lambda y: first(a_column, y).sum())(b_column)
    for k, (a, b) in enumerate(UNEXPANDED):
        assert float(in_a[k]) == pytest.approx(_exact_beta(a, b, 2), rel=1024 * eps), (a, b)
        assert float(in_b[k]) == pytest.approx(_exact_beta_mixed(a, b), rel=1024 * eps), (a, b)


def test_sign_of_gamma_at_the_smallest_negative_subnormal():
    # Its parity took x / 2, which rounds -5e-324 to -0: the sign came out 3.
    from rulegen.derive.functions import sign_of_gamma

    x = sp.Symbol("x", real=True)
    f = sp.lambdify([x], sign_of_gamma(x), modules="numpy")
    assert f(np.float64(-5e-324)) == -1
    assert f(np.float64(-1.5)) == 1


def test_beta_reference_spans_its_arguments_scales():
    # mpmath's beta(0.5, 1e200) at 40 digits is 1.77 (log Gamma of 1e200 differenced); its derivative in a at
    # b = 0 is the limit -trigamma(a), where the product is inf * 0.
    with mpmath.workdps(40):
        assert float(MPMATH_IMPLEMENTATIONS["beta"](mpmath.mpf(0.5), mpmath.mpf(1e200))) == pytest.approx(
            math.sqrt(math.pi) * 1e-100, rel=1e-15
        )
        assert float(MPMATH_IMPLEMENTATIONS["beta_slope"](mpmath.mpf(0.5), mpmath.mpf(0))) == pytest.approx(
            -(math.pi**2) / 2, rel=1e-15
        )


def test_log_beta_partial_is_the_digamma_difference_not_a_quotient():
    # beta's partial is the registry's beta_slope; over beta (log(beta)'s derivative, a Beta log-density's) it is
    # digamma(a) - digamma(a + b), as sympy's own product form cancels: beta_slope / beta is 0 / 0 where both
    # underflow.
    from rulegen.derive import functions as fn
    from rulegen.derive.partials import differentiate

    a, b = sp.symbols("a b", positive=True)
    got = differentiate(-sp.log(fn.FUNCTIONS["beta"](a, b)), a)
    assert not got.has(fn.beta_slope) and not got.has(sp.beta)
    assert sp.simplify(got - (sp.digamma(a + b) - sp.digamma(a))) == 0
    assert differentiate(fn.FUNCTIONS["beta"](a, b), b) == fn.beta_slope(b, a)
