"""A sum is added in one order, the one the stabilising search measures (`as_computed`) and the planners print
(`summed_in_order`), whatever subexpressions a body shares and whatever names they get."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp
import torch

from rulegen.computation.sharing import added, summed_in_order
from rulegen.derive import functions as fn
from rulegen.derive.stabilise.gate import as_computed
from rulegen.derive.stabilise.points import _numpy_function
from rulegen.plan import Result
from rulegen.plan.code import Import, import_statements
from rulegen.plan.emit import Emitter
from rulegen.plan.forms import jax_forms, torch_forms
from rulegen.plan.printers import print_jax, print_torch

K, R = sp.symbols("k r", positive=True)
LOGITS = sp.Symbol("logits", real=True)
# A negative binomial's log-mass as the gamma series writes it at large k and r: four terms of 6.9e299 that cancel
# exactly at logits = 0, and -log(k)/2, the value.
LOG_MASS = (
    -K * fn.softplus(-LOGITS) - R * fn.softplus(LOGITS) + K * sp.log(1 + R / K) + R * sp.log(1 + K / R) - sp.log(K) / 2
)
POINT = {"k": 1e300, "r": 1e300, "logits": 0.0}
EXACT = -math.log(1e300) / 2


def _measured() -> float:
    computed = _numpy_function(as_computed(LOG_MASS), (K, R, LOGITS))
    assert computed is not None
    return float(np.asarray(computed(*(np.asarray([v]) for v in POINT.values()))).reshape(-1)[0])


def _generated(printer, forms, module, backend: str) -> float:
    # Beside it the body computes log(k) and r*softplus(logits) (a residual, a saved intermediate): cse names them,
    # and a sum ordered by its terms' names added -log(k)/2 to 6.9e299 before those cancelled (0.0).
    emit = Emitter(printer, {"k", "r", "logits"}, forms)
    results = [Result("out", LOG_MASS), Result("log_k", sp.log(K)), Result("scaled", R * fn.softplus(LOGITS))]
    block = emit.block([], results)
    env = {name: module(value) for name, value in POINT.items()}
    imports = import_statements(emit.imports | {Import(backend), Import("math")})
    package = [line.replace("from . import", f"from generated.{backend} import") for line in imports]
    exec("\n".join([line.replace("from ._", f"from generated.{backend}._") for line in package]), env)
    exec("\n".join(a.line for a in block.lines), env)
    exec(f"__result = ({block.result},)", env)
    return float(np.asarray(env["__result"][0]).reshape(-1)[0])


def test_the_search_measures_the_value():
    assert math.isclose(_measured(), EXACT, rel_tol=1e-15)


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_generated_code_adds_as_measured(backend):
    if backend == "torch":
        as_tensor = lambda v: torch.tensor([v], dtype=torch.float64)  # noqa: E731
        value = _generated(print_torch, torch_forms(set(), ()), as_tensor, "torch")
    else:
        jax = pytest.importorskip("jax")
        jax.config.update("jax_enable_x64", True)
        value = _generated(print_jax, jax_forms([LOG_MASS], ()), lambda v: jax.numpy.asarray([v], "float64"), "jax")
    assert value == _measured(), value


def test_a_pinned_sum_prints_as_python_adds_it():
    x, y, z = sp.symbols("x y z", real=True)
    pinned = summed_in_order(x + y - z)
    assert isinstance(pinned, added)
    text = print_torch(pinned)[0].text
    # Python adds left to right: the chain needs no parentheses of its own; a product of it does.
    assert "(" not in text and text.count("+") + text.count("-") == 2, text
    assert print_torch(2 * pinned)[0].text.startswith("2*("), print_torch(2 * pinned)[0].text


def test_a_pinned_sum_with_a_leading_negation_keeps_its_signs():
    # sympy's sum reads a term whose text starts with `-` as a negated term and negates the rest: a pinned
    # -a - b inside a sum was printed -(a - b), and a Student t's log-density's -betaln(df/2, 1/2) lost a sign.
    x, y, z = sp.symbols("x y z", real=True)
    values = {x: 1.3, y: 2.7, z: 0.4}
    env = {"torch": torch, "math": math, **{str(s): v for s, v in values.items()}}
    for expr in (
        z + added(-x, y),
        z + added(-x, -y),
        z - added(-x, y),
        2 * added(-x, -y),
        x * z - summed_in_order(-x - y - z),
    ):
        plain = expr.replace(lambda e: isinstance(e, added), lambda e: sp.Add(*e.args))
        text = print_torch(expr)[0].text
        assert math.isclose(eval(text, env), float(plain.subs(values)), rel_tol=1e-15), text


def test_a_difference_of_inputs_is_added_before_the_terms_beside_it():
    # A Gumbel log-density's partial in its scale over one denominator, -loc - scale + x + (loc - x) exp(...): in
    # sympy's order (-loc - scale) + x is -inf at loc = x = 1.5e308, scale = 1e308, where x - loc is 0 and the
    # sum -1e308.  Inputs a sum subtracts from each other pair up as a function's cancelling values do.
    x, loc = sp.symbols("x loc", real=True)
    scale = sp.Symbol("scale", positive=True)
    numerator = -loc - scale + x + (loc - x) * sp.exp((loc - x) / scale)
    computed = _numpy_function(as_computed(numerator), (x, loc, scale))
    assert computed is not None
    value = float(np.asarray(computed(*(np.asarray([v]) for v in (1.5e308, 1.5e308, 1e308)))).reshape(-1)[0])
    assert value == -1e308, value
