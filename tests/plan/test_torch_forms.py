"""torch's one-kernel forms of what a rule computes.

`1 + erf(u)` is `erfc(-u)`: one kernel, and exact where erf(u) nears -1.
silu's derivative times a cotangent or tangent is `silu_backward`, and
`softplus(beta * u) / beta` is softplus with its `beta`.
"""

from __future__ import annotations

import pytest
import sympy as sp
import torch

from rulegen.derive import functions as fn
from rulegen.derive.forms import canonical, silu_derivatives
from rulegen.derive.partials import derive_rule
from rulegen.plan import plan_jax, plan_torch
from rulegen.plan.code import Import
from rulegen.spec.rules import read_rules
from tests.conftest import RULES as RULE_FOLDER

# -- silu's derivative and softplus's beta

X, Y, BETA = sp.symbols("x y beta", real=True)
K = sp.Symbol("k", integer=True)
D = fn.silu_derivative


def _derived(forward: sp.Expr, wrt: sp.Symbol, scalars=("beta",), integral=()) -> sp.Expr:
    """The partial as the torch planner sees it: canonical forms, then silu's derivative recognised."""
    return canonical(canonical(sp.diff(forward, wrt)), (silu_derivatives(scalars, integral),))


def test_silu_derivative_as_a_rule_writes_it():
    composite = fn.sigmoid(X) * (1 + X * (1 - fn.sigmoid(X)))
    assert canonical(composite, (silu_derivatives((), ()),)) == D(X)


@pytest.mark.parametrize(
    ("forward", "wrt"),
    [
        (X * fn.sigmoid(BETA * X), X),  # a static input in the argument
        ((X + K) * fn.sigmoid(X + K), X),  # an integer array in it
        (X * sp.exp(X) * fn.sigmoid(X), X),  # quadratic in sigmoid(x), but no multiple of silu's derivative
    ],
)
def test_silu_derivative_is_left_alone_where_no_kernel_takes_it(forward, wrt):
    assert not _derived(forward, wrt, integral=("k",)).has(D)


def _rule_plan(file: str, name: str):
    (rule,) = [r for r in read_rules([RULE_FOLDER / file]) if r.name == name]
    return plan_torch(derive_rule(rule)), plan_jax(derive_rule(rule))


def test_f_swish_runs_silu_backward_and_saves_no_output():
    torch_plan, _ = _rule_plan("functions.yaml", "f_swish")
    assert torch_plan.forward.result == "torch.nn.functional.silu(x)"
    assert (torch_plan.backward.lines, torch_plan.backward.result) == ((), "silu_backward(out_bar, x)")
    assert (torch_plan.jvp.lines, torch_plan.jvp.result) == ((), "silu_backward(x_dot, x)")
    assert torch_plan.saved == ("x",)
    assert torch_plan.backward_in_place is None
    assert Import("._native", "silu_backward") in torch_plan.imports


def test_softplus_beta_forward_is_one_softplus_with_its_beta():
    torch_plan, jax_plan = _rule_plan("softplus_beta.yaml", "softplus_beta")
    assert (torch_plan.forward.lines, torch_plan.forward.result) == (
        (),
        "torch.nn.functional.softplus(x, beta=beta, threshold=40.0)",
    )
    assert torch_plan.forward_in_place is None
    assert torch_plan.backward.result == "torch.ops.aten.softplus_backward(out_bar, x, ctx.beta, 40.0), None"
    assert torch_plan.jvp.result == "torch.ops.aten.softplus_backward(x_dot, x, ctx.beta, 40.0)"
    # XLA fuses the composite: JAX keeps it.
    assert jax_plan.forward.result == "jax.nn.softplus(beta*x)/beta"


def test_silu_backward_kernel_is_not_differentiable_so_the_helper_switches():
    """torch's kernel has no derivative: where one is taken, the helper computes the composite."""
    from generated.torch._native import silu_backward

    x = torch.linspace(-5, 5, 11, dtype=torch.float64, requires_grad=True)
    g = torch.linspace(-1, 1, 11, dtype=torch.float64, requires_grad=True)
    with pytest.raises(RuntimeError, match="not implemented"):
        torch.ops.aten.silu_backward(g, x).sum().backward()
    with torch.no_grad():
        kernel = silu_backward(g, x)
    composite = silu_backward(g, x)
    assert composite.grad_fn is not None and kernel.grad_fn is None
    torch.testing.assert_close(kernel, composite, rtol=1e-15, atol=1e-17)
    assert torch.autograd.gradgradcheck(silu_backward, (g, x), check_fwd_over_rev=True)


def test_a_quotient_kept_whole_is_parenthesised_only_where_an_operator_holds_it():
    """divided(x, s) printed `x / s`: in parentheses inside any product or power (a negative product's factors
    too, whose order of rounding the search measured), bare where it stands alone (`return t3 / t4, t3`, where
    `return (t3 / t4), t3` was printed)."""
    from rulegen.derive.functions import divided
    from rulegen.plan.printers import print_jax, print_torch

    t, x = sp.symbols("t x", real=True)
    for printer in (print_torch, print_jax):
        assert printer(divided(t, x))[0].text == "t / x"
        assert printer(divided(t, x) + t)[0].text == "t + t / x"
        assert printer(t * divided(1, x))[0].text == "t*(1 / x)"
        # JAX divides arrays through the runtime's quotient, whose derivative in the divisor is -(a/b)/b.
        product = "-t*(1 / x)/(t * t + 1)" if printer is print_torch else "quotient(-t*(1 / x), t * t + 1)"
        assert printer(-t * divided(1, x) / (t**2 + 1))[0].text == product
        assert printer(divided(t, x) ** 2)[0].text == "(t / x)**2"


def test_a_quotient_kept_whole_divides_left_to_right_without_parentheses():
    """The dividend of divided(x, s) goes bare where Python computes it first anyway: polar's partial
    `((-y / h) / b) / h` is `-y / h / b / h`, the same tree as the parenthesised one (it was printed
    `(((-t2) / t3) / t0) / t3`); a sum stays in parentheses."""
    import ast

    from rulegen.derive.functions import divided
    from rulegen.plan.printers import print_jax, print_torch

    y, h, b = sp.symbols("y h b", real=True)
    for printer in (print_torch, print_jax):
        text = printer(divided(divided(divided(-y, h), b), h))[0].text
        assert text == "-y / h / b / h"
        assert ast.dump(ast.parse(text)) == ast.dump(ast.parse("(((-y) / h) / b) / h"))
        assert printer(divided(y * h, b))[0].text == "h*y / b"
        assert printer(divided(y + h, b))[0].text == "(h + y) / b"


def test_a_scaling_is_undone_by_a_product_and_its_reciprocal_cancels_in_a_derivative():
    """A homogeneous form scaled by b = binade(...) is scaled back as divided(v, divided(1, b)): printed `v * b`
    (it was `v / (1 / b)`), and its derivative's 1 / (1 / b) is b, which cancels against the 1 / b beside it
    (to_polar's backward computed `1 / (b * v * (1 / b))`)."""
    from rulegen.derive.functions import binade, divided
    from rulegen.plan.printers import print_jax, print_torch

    v, x, y = sp.symbols("v x y", real=True)
    b = binade(sp.Max(sp.Abs(x), sp.Abs(y)))
    for printer in (print_torch, print_jax):
        assert printer(divided(v, divided(1, b)).subs(b, sp.Symbol("b")))[0].text == "v * b"
    root = divided(sp.sqrt(divided(x, b) ** 2 + divided(y, b) ** 2), divided(1, b))
    assert sp.diff(root, x) == divided(x, b) / sp.sqrt(divided(x, b) ** 2 + divided(y, b) ** 2)


def test_a_sigmoid_of_statics_alone_is_no_softplus_backward():
    # softplus's backward computes a * z / (z + 1), z = exp(u): with u a static (s = 0.5, z = 1.65) and a = x,
    # inf past x = 2.1e38 in float32 where x * sigmoid(s) is 1.7e38; the sigmoid of a static is a number, and
    # multiplying by it one kernel.  A sigmoid of an array stays one kernel.
    from rulegen.plan.forms import torch_forms

    s = sp.Symbol("s", real=True)
    native = torch_forms(("s",), ())
    assert not native(X * fn.sigmoid(fn.in_float(s, X))).has(fn.sigmoid_product)
    assert native(X * fn.sigmoid(Y)).has(fn.sigmoid_product)
    assert native(X * fn.sigmoid(s * Y)).has(fn.sigmoid_product)


def test_softplus_s_backward_is_handed_no_input_its_argument_does_not_hold(tmp_path):
    # softplus's backward computes a * z / (z + 1), z = exp(u): a negative binomial's partial in its logits,
    # k sigmoid(-logits) - r sigmoid(logits), was -inf in float32 at r = 8.4e37, logits = 5.48 (r * z overflows),
    # where it is -8.4e37; r and logits are drawn apart.  A cotangent, or a factor of u's own inputs, is handed to it.
    from rulegen.plan.forms import torch_forms
    from tests.conftest import rules_from

    c = sp.Symbol("out_bar", real=True)
    native = torch_forms((), (), inputs=("x", "y"))
    assert not native(X * fn.sigmoid(Y)).has(fn.sigmoid_product)
    assert native(c * fn.sigmoid(Y)).has(fn.sigmoid_product)
    assert native(X * fn.sigmoid(X + X**3 / 20)).has(fn.sigmoid_product)
    (rule,) = rules_from(
        tmp_path,
        "name: nb\ninputs: {k: {domain: {ge: 0}}, r: {assume: positive, domain: {gt: 0}}, logits: {}}\n"
        "forward: r * log(sigmoid(-logits)) + k * log(sigmoid(logits))\n",
    )
    torch_plan = plan_torch(derive_rule(rule))
    code = "\n".join([*(str(line) for line in torch_plan.backward.lines), str(torch_plan.backward.result)])
    assert "softplus_backward(k" not in code and "softplus_backward(r" not in code, code
