"""How the printers write quotients by a square, products with an integer and products with a Float 1.0."""

import math

import numpy as np
import pytest
import sympy as sp
import torch

from rulegen.plan.printers import print_jax, print_torch

x, y, z = sp.symbols("x y z", real=True)


def _torch_value(expr: sp.Expr, **values: float) -> float:
    text = print_torch(expr)[0].text
    tensors = {k: torch.tensor(v, dtype=torch.float64) for k, v in values.items()}
    return float(eval(text, {"torch": torch, "math": __import__("math")}, tensors))


def test_a_quotient_by_a_square_divides_twice():
    # (p_loc - q_loc) / q_scale**2 at 6.6e226 and 1.5e159 is 3.1e-92; q_scale * q_scale overflows to inf and the
    # quotient was 0 (KL of two normals, every 61-bit point of its partial in p_loc).
    expr = (x - z) / y**2
    assert print_torch(expr)[0].text == "(x - z) / y / y"
    assert print_jax(expr)[0].text == "quotient(quotient(x - z, y), y)"
    got = _torch_value(expr, x=6.636054853089071e226, z=0.0, y=1.4535601920145953e159)
    assert got == pytest.approx(3.140826351022659e-92, rel=1e-15)
    # and where the square underflows: 1e-300 / (1e-160)**2 is 1e20, not inf
    assert _torch_value(x / y**2, x=1e-300, y=1e-160) == pytest.approx(1e20, rel=1e-15)


def test_a_square_of_an_expression_is_not_computed_twice():
    # Only a name is divided by twice: the planner names what is used more than once, and an expression printed
    # twice would be computed twice (digamma's cos(t)**2 / sin(t)**2 called sin twice).
    assert print_torch(x / sp.sin(y) ** 2)[0].text.count("torch.sin") == 1


@pytest.mark.parametrize("printer", [print_torch, print_jax])
def test_a_float_one_is_not_printed_as_a_factor(printer):
    # A rule's 0.5 * 2 is sympy's Float 1.0, printed as `1.0 * 1 / q_scale**3` in a KL divergence's partial.
    assert printer(sp.Float(1.0) / y**3)[0].text == "y**-3"
    assert printer(sp.Float(-1.0) * x * y)[0].text == "-x*y"
    assert printer(sp.Float(-1.0) * (x + y))[0].text == "-x - y"


def test_a_negative_power_of_a_name_is_a_power_whose_derivative_is_finite():
    # An asymptotic series in 1/x printed 1 / x**3: torch and JAX differentiate the quotient through x**3's
    # derivative 3 x**2, inf at the largest floats, times the quotient's 0: acosh's second derivative was nan there.
    expr = 1 / x + x**-3 / 2
    text = print_torch(expr)[0].text
    assert text == "torch.reciprocal(x) + x**-3 / 2"  # `1 / x` is two kernels in torch
    point = torch.tensor(1.7976931348623157e308, dtype=torch.float64, requires_grad=True)
    (slope,) = torch.autograd.grad(eval(text, {"torch": torch}, {"x": point}), point)
    assert slope == 0  # -1/x**2 - 3 x**-4 / 2, below the smallest subnormal


def test_an_integer_times_a_quotient_multiplies_last():
    # -2 c / (b + sqrt(b**2 - 4 a c)), the quadratic formula's stable root: (-2 c) / d is -inf at c = -1.8e308,
    # where the root is 1.95e199.  The search's numpy evaluation computes it as the printers do, so its gate saw
    # the overflow the generated code would have and turned the form down.
    a, b, c = sp.symbols("a b c", real=True)
    expr = -2 * c / (b + sp.sqrt(b**2 - 4 * a * c))
    assert print_torch(expr)[0].text == "-2 * (c/(b + torch.sqrt(b * b - 4 * (a*c))))"
    assert print_jax(expr)[0].text.startswith("-2 * quotient(c, ")
    values = {"a": 4.7295197743819505e-91, "b": 7.039856586209132e101, "c": -1.7976931348623157e308}
    assert _torch_value(expr, **values) == pytest.approx(1.949616719326133e199, rel=1e-15)
    from rulegen.derive.expr import lambdified

    numpy_value = lambdified([a, b, c], expr, modules=["numpy"])(*values.values())
    assert numpy_value == pytest.approx(1.949616719326133e199, rel=1e-15)


def test_a_power_over_a_power_is_a_power_of_the_quotient():
    # A KL divergence of two normals as torch writes it, ((p_loc - q_loc) / q_scale)**2: sympy distributes the
    # power, and (p_loc - q_loc)**2 / q_scale / q_scale overflowed from |p_loc - q_loc| = 1.3e154 where the value is
    # 1e200 (inf at 87 of 64 x 4 points of the distributions suite, float64).
    expr = sp.Float(0.5) * (x - z) ** 2 / y**2
    assert print_torch(expr)[0].text == "0.5 * ((x - z)/y)**2"
    assert print_jax(expr)[0].text == "0.5 * quotient(x - z, y)**2"
    assert _torch_value(expr, x=2e200, z=0.0, y=1e100) == pytest.approx(2e200, rel=1e-15)
    assert _torch_value(expr, x=2e-200, z=0.0, y=1e-100) == pytest.approx(2e-200, rel=1e-15)  # no underflow


def test_a_power_over_a_higher_power_divides_once_more_after_the_quotient():
    # Its partial in q_scale, -((p_loc - q_loc) / q_scale)**2 / q_scale: the square of the quotient overflows at
    # (-8.3e294, 4.9e133) where the value is -5.8e188; (u / v) * ((u / v) / v) does not.
    expr = -((x - z) ** 2) / y**3
    text = print_torch(expr)[0].text
    assert text == "-((x - z)/y)*(((x - z)/y)/y)"
    assert print_jax(expr)[0].text == "-quotient(x - z, y)*quotient(quotient(x - z, y), y)"
    point = {"x": -8.288927067780894e294, "z": -1.8854566170208712e233, "y": 4.9049854243951e133}
    assert _torch_value(expr, **point) == pytest.approx(-5.822151112936418e188, rel=1e-14)


def test_the_search_computes_a_power_of_a_quotient_as_the_printers_do():
    from rulegen.derive.stabilise.gate import as_computed
    from rulegen.derive.stabilise.points import _numpy_function

    for expr, point, exact in (
        (sp.Float(0.5) * (x - z) ** 2 / y**2, (2e200, 1e100, 0.0), 2e200),
        (-((x - z) ** 2) / y**3, (-8.288927067780894e294, 4.9049854243951e133, -1.8854566170208712e233), -5.822e188),
    ):
        for form in (expr, as_computed(expr)):
            value = _numpy_function(form, (x, y, z))(*point)
            assert value == pytest.approx(exact, rel=1e-3), (form, value)


def test_a_shared_power_is_put_back_into_a_quotient_of_its_degree():
    # cse named (p_loc - q_loc)**2, shared by a KL divergence's value and torch's saved residual, and the value
    # divided the name by q_scale twice: inf from |p_loc - q_loc| = 1.3e154.
    from rulegen.computation.sharing import shared_subexpressions

    replacements, (value, _residual) = shared_subexpressions(
        [sp.Float(0.5) * (x - z) ** 2 / y**2 + sp.log(y), (x - z) ** 2 * sp.exp(y)], sp.numbered_symbols("t")
    )
    assert value.has((x - z) ** 2), (replacements, value)
    assert print_torch(value)[0].text.count("((x - z)/y)**2") == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_an_integer_times_a_product_multiplies_last(dtype):
    # -2 x exp(-x**2), a Gaussian's derivative: (-2 x) overflows past half the largest float, where exp(-x**2) is
    # 0, and inf * 0 is nan; multiplied last, -2 (x exp(-x**2)) is 0 there, as the exact value rounds.  No clamp
    # is needed, so the derivative reads the forward's exp.
    expr = -2 * x * sp.exp(-(x**2))
    text = print_torch(expr)[0].text
    assert text.replace(" ", "") == "-2*(x*torch.exp(-(x*x)))"
    assert print_jax(expr)[0].text.replace(" ", "") == "-2*(x*jnp.exp(-(x*x)))"
    top = torch.finfo(dtype).max
    point = torch.tensor([top, -top, 1.0], dtype=dtype)
    assert eval(text, {"torch": torch}, {"x": point}).tolist() == pytest.approx([0.0, 0.0, -2 * math.exp(-1)])
    # The search's numpy evaluation computes it as the printers do.
    from rulegen.derive.expr import lambdified

    with np.errstate(all="ignore"):
        got = lambdified([x], expr, modules=["numpy"])(point.numpy())
    assert np.isfinite(got).all()
    # A product of numbers and one variable keeps its one constant: 2 sqrt(2) x / sqrt(pi) is one multiplication.
    assert "2 * (" not in print_jax(2 * sp.sqrt(2) * x / sp.sqrt(sp.pi))[0].text
