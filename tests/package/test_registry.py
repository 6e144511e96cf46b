"""Every registered function built and run: JAX, torch, math and mpmath agree, and one entry is enough.

Every other table of math functions is derived from the registry; these
tests fail when an entry cannot be parsed, printed in a backend, or
evaluated, when its backends disagree on its value, and when adding an
entry is not enough to parse, print and update it in place.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
import sympy as sp
import torch

from rulegen.derive import functions as fn
from rulegen.derive.expr import parse_expression
from rulegen.plan import forms
from rulegen.plan.code import Import, Value, import_statements
from rulegen.plan.printers import print_jax, print_torch
from tests.derive.test_registry import EXAMPLES, LOC, RULE_NAMES, SYMBOLS, example

jax.config.update("jax_enable_x64", True)

X, Y, BETA = sp.symbols("x y beta")
POINT = {"x": 0.3, "y": 0.7}


def runtime_import(line: str, backend: str) -> str:
    """A generated package's import of its runtime helper (`from ._special import ...`), from rulegen's copy."""
    helper = line.replace("from ._", f"from rulegen.runtime.{backend}._")
    return helper.replace("from . import", f"from rulegen.runtime.{backend} import")


def evaluate(printed: tuple[Value, frozenset[Import]], values: dict[str, object], backend: str) -> float:
    return float(evaluate_array(printed, values, backend))


@pytest.mark.parametrize("name", RULE_NAMES)
def test_jax_torch_math_and_mpmath_agree_on_every_function_a_rule_may_call(name):
    function = fn.RULE_FUNCTIONS[name]
    expr = parse_expression(example(name), SYMBOLS, LOC)
    jax_value = evaluate(print_jax(expr), {k: jnp.asarray(v) for k, v in POINT.items()}, "jax")
    torch_value = evaluate(
        print_torch(expr), {k: torch.tensor(v, dtype=torch.float64) for k, v in POINT.items()}, "torch"
    )
    modules = [dict(fn.MPMATH_IMPLEMENTATIONS), "mpmath"]  # as the checks' high-precision reference
    reference = sp.lambdify([X, Y], expr, modules=modules)
    with mpmath.workdps(40):
        exact = float(reference(mpmath.mpf(POINT["x"]), mpmath.mpf(POINT["y"])))
    assert jax_value == pytest.approx(exact, rel=1e-9)
    assert torch_value == pytest.approx(exact, rel=1e-9)
    if function.math and name not in EXAMPLES:
        scalar = evaluate(print_torch(expr, scalars=frozenset(POINT)), POINT, "torch")
        # Static inputs through the runtime's IEEE version of the math function (inf and nan where math raises).
        ieee = "_numbers." + function.math.removeprefix("math.")
        assert f"{ieee}(" in print_torch(expr, scalars=frozenset(POINT))[0].text
        assert scalar == pytest.approx(exact, rel=1e-12)


NEW_ENTRY = """\
    MathFunction("exp2", exp2, "jnp.exp2", "torch.exp2", math="math.exp2", in_place="exp2_"),
"""

ROUND_TRIP = """\
import itertools
import sympy as sp
import rulegen
from rulegen.spec.errors import Loc
from rulegen.derive.expr import parse_expression
from rulegen.plan.inplace import InPlaceWriter
from rulegen.plan.printers import print_jax, print_torch

assert rulegen.__file__.startswith({root!r}), rulegen.__file__
x, y, beta = sp.symbols("x y beta")
expr = parse_expression("exp2(x * y) + exp2(beta)", {{"x": x, "y": y, "beta": beta}}, Loc("new", 1, 0))
print(print_jax(expr, scalars=frozenset({{"beta"}}))[0].text)
print(print_torch(expr, scalars=frozenset({{"beta"}}))[0].text)
writer = InPlaceWriter(lambda e: print_torch(e)[0], {{"x", "y"}}, (sp.Symbol(f"t{{k}}") for k in itertools.count()))
writer.value(parse_expression("exp2(x * y)", {{"x": x, "y": y}}, Loc("new", 1, 0)))
print("; ".join(s.line for s in writer.steps))
"""


def test_one_registry_entry_is_enough_to_parse_print_and_update_a_new_function(tmp_path):
    assert "exp2" not in fn.RULE_FUNCTIONS
    package = Path(fn.__file__).parent.parent
    shutil.copytree(package, tmp_path / "rulegen", ignore=shutil.ignore_patterns("__pycache__"))
    source = tmp_path / "rulegen" / "derive" / "functions.py"
    text = source.read_text()
    anchor = "REGISTRY: tuple[MathFunction, ...] = (\n"
    assert text.count(anchor) == 1
    text = text.replace(anchor, anchor + NEW_ENTRY)
    text = text.replace("from sympy.codegen.cfunctions import ", "from sympy.codegen.cfunctions import exp2, ")
    source.write_text(text)
    script = ROUND_TRIP.format(root=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "_numbers.exp2(beta) + jnp.exp2(x*y)",
        "_numbers.exp2(beta) + torch.exp2(x*y)",
        "t0 = (x*y).exp2_()",
    ]


def _statics_times_array(name: str) -> sp.Expr:
    """The registry's example call with its arguments static inputs (s and t), times the array a."""
    statics = {"x": sp.Symbol("s"), "y": sp.Symbol("t")}
    return sp.Symbol("a") * parse_expression(example(name), {**SYMBOLS, **statics}, LOC)


@pytest.mark.parametrize("name", RULE_NAMES)
@pytest.mark.parametrize("backend", ["jax", "torch"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_function_of_static_inputs_alone_computes_in_the_arrays_dtype(name, backend, dtype):
    # x**2 * sigmoid(s): torch.sigmoid(0.5) raised, for the 21 functions with no `math` counterpart,
    # and JAX's jax.scipy.special.ndtr(0.5) is a float64 array, which made a float32 rule's result float64.
    expr = _statics_times_array(name)
    a = sp.Symbol("a")
    scalars = frozenset({"s", "t"})
    rewritten = forms.float_forms((a,), (), for_torch=backend == "torch", scalars=scalars)(expr)
    printer, array = (
        (print_torch, torch.tensor([1.0, 2.0], dtype=getattr(torch, dtype)))
        if backend == "torch"
        else (print_jax, jnp.asarray([1.0, 2.0], dtype=dtype))
    )
    values = {"a": array, "s": POINT["x"], "t": POINT["y"]}
    got = evaluate_array(printer(rewritten, scalars=scalars), values, backend)
    assert str(got.dtype).removeprefix("torch.") == dtype
    modules = [dict(fn.MPMATH_IMPLEMENTATIONS), "mpmath"]
    reference = sp.lambdify([sp.Symbol("s"), sp.Symbol("t")], expr.subs(a, 1), modules=modules)
    with mpmath.workdps(40):
        exact = float(reference(mpmath.mpf(POINT["x"]), mpmath.mpf(POINT["y"])))
    rel = 1e-6 if dtype == "float32" else 1e-9  # as the frameworks compute them: polygamma to 1e-10
    np.testing.assert_allclose(np.asarray(got), [exact, 2 * exact], rtol=rel, atol=0)


def evaluate_array(printed: tuple[Value, frozenset[Import]], values: dict[str, object], backend: str) -> Any:
    value, imports = printed
    namespace: dict[str, object] = {}
    for line in import_statements(imports):
        exec(runtime_import(line, backend), namespace)
    return eval(value.text, {**namespace, **values})
