"""What the torch Function saves for backward, and what it recomputes.

Eager, an intermediate costs a pass over memory per operation to recompute,
so the forward keeps what is dearer than one (bounded by what autodiff
keeps). Compiled (`fuse`), arithmetic is free and only functions cost: an
intermediate is kept when keeping it spares the backward two functions or
more, against the write and the read that saving it costs.
"""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
import yaml

from rulegen.computation.sharing import shared_subexpressions
from rulegen.derive.partials import derive_rule
from rulegen.plan import plan_torch
from rulegen.spec.rules import read_rules

RULES = [
    {"name": "mish", "inputs": ["x"], "forward": "x * tanh(softplus(x))"},
    {"name": "gelu", "inputs": ["x"], "forward": "x * (1 + erf(x / sqrt(2))) / 2"},
    {"name": "sin_exp_mul", "inputs": ["x", "y"], "forward": "sin(x) * exp(-x**2) * y"},
    {"name": "swish", "inputs": ["x"], "forward": "x * sigmoid(x)"},
    {"name": "x_exp_abs", "inputs": ["x"], "forward": "x * exp(Abs(x))"},
    {"name": "radius", "inputs": ["x", "y"], "forward": "sqrt(x**2 + y**2)"},
    {"name": "swish_fast", "inputs": ["x"], "forward": "x * sigmoid(x)", "accuracy": "fast"},
    {"name": "poisson_nll", "inputs": ["r", "y"], "forward": "exp(r) - y * r"},
    {
        "name": "softplus_beta",
        "inputs": {"x": {}, "beta": {"static": True, "default": 1.0}},
        "forward": "softplus(beta * x) / beta",
    },
]

# rule: (saved eagerly, saved with `fuse`)
EXPECTED = {
    # tanh(softplus(x)): two functions either way.
    "mish": (("x", "saved_tanh"), ("x", "saved_tanh")),
    # erf(x/sqrt(2)) is one function: worth a pass eagerly, not compiled.
    "gelu": (("x", "saved_one_plus_erf"), ("x",)),
    # Eagerly, never sin(x)*exp(-x**2) beside its factors (a tensor kept to spare one multiplication).
    # Compiled, keeping sin(x)*exp(-x**2) spares only sin: the backward needs exp(-x**2) * cos(x).
    "sin_exp_mul": (("x", "y", "saved_exp", "saved_sin"), ("x", "y")),
    # silu's backward is one kernel of x alone (silu_backward), so neither keeps the output.
    "swish": (("x",), ("x",)),
    # exp(|x|): compiled, |x| is a select, as cheap as arithmetic, so one function only.
    "x_exp_abs": (("x", "saved_exp"), ("x",)),
    # Under `fast` too, though the policy kept sympy's x*(1 - s)*s + s for its cost: silu_backward is torch's
    # own kernel for it, not a form the policy weighed.
    "swish_fast": (("x",), ("x",)),
    # exp(r), though cse shares it with the partial -y + exp(r) as -exp(r); compiled, one function only.
    "poisson_nll": (("r", "y", "saved_exp"), ("r", "y")),
    # beta * x is one operation, folded into softplus_backward's beta.
    "softplus_beta": (("x",), ("x",)),
    # Computed as hypot(x, y), one kernel that neither over- nor underflows, its derivative the runtime's
    # hypot_slope(x, y), which reads x and y alone (its own hypot of them over their binade): x and y either way.
    "radius": (("x", "y"), ("x", "y")),
}


@pytest.fixture(scope="module")
def rules(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rules")
    read = {}
    for mode, fuse in (("eager", False), ("fused", True)):
        path = folder / f"{mode}.yaml"
        path.write_text(yaml.safe_dump({"rules": [{**rule, "fuse": fuse} for rule in RULES]}, sort_keys=False))
        read[mode] = {rule.name: rule for rule in read_rules([path])}
    return read


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_saved_for_backward(rules, name):
    eager, fused = EXPECTED[name]
    for mode, want in (("eager", eager), ("fused", fused)):
        rule = rules[mode][name]
        assert rule.fuse == (mode == "fused")
        assert plan_torch(derive_rule(rule)).saved == want, mode


def test_an_intermediate_is_named_for_its_functions_past_every_name_of_the_rule(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("name: r\ninputs: [saved_exp, y]\nforward: sin(saved_exp) * exp(-saved_exp**2) * y\n")
    (rule,) = read_rules([path])
    saved = plan_torch(derive_rule(rule)).saved
    assert saved == ("saved_exp", "y", "_saved_exp", "_saved_sin")


def test_a_product_shared_with_a_partial_is_computed_in_its_own_order():
    # cse took y*z of x*y*z out for dout/dx and computed out = (y*z)*x: inf at (-2.4e-184, 1.4e206, -3.7e121),
    # where x*y*z is 1.2e144 (JAX's JVP of a ChainRules product rule).
    x, y, z = sp.symbols("x y z", real=True)
    replacements, (out, d_x, *_) = shared_subexpressions([x * y * z, y * z, x * z, x * y], sp.numbered_symbols("t"))
    assert out == x * y * z
    assert d_x.xreplace(dict(replacements)) == y * z
    value = sp.lambdify([x, y, z], out, "numpy")(np.float64(-2.4e-184), np.float64(1.4e206), np.float64(-3.7e121))
    assert value == pytest.approx(1.2432e144)


def test_a_function_in_products_put_back_is_computed_once():
    # cse shares exp(-x**2)*sin(x) of sin_exp_mul's value and of its partial in x, -2 (x y exp(-x**2) sin(x))
    # (an integer multiplied last); put back into the products as factors, sin(x) was computed three times.
    x, y = sp.symbols("x y", real=True)
    gauss = sp.exp(-(x**2))
    exprs = [gauss * sp.sin(x) * y, gauss * y * sp.cos(x) - 2 * x * y * gauss * sp.sin(x), gauss * sp.sin(x)]
    replacements, reduced = shared_subexpressions(exprs, sp.numbered_symbols("t"))
    computed = [*(v for _, v in replacements), *reduced]
    assert sum(sum(1 for n in sp.preorder_traversal(e) if n == sp.sin(x)) for e in computed) == 1
    names = dict(replacements)
    for expr, shared in zip(exprs, reduced, strict=True):
        for _ in range(len(names)):
            shared = shared.xreplace(names)
        assert sp.simplify(shared - expr) == 0
