"""The function registry (rulegen.derive.functions.REGISTRY) against the parser, the printers and the frameworks.

Every other table of math functions is derived from the registry; these
tests fail when an entry cannot be parsed, printed in a backend, or
evaluated, when its backends disagree on its value, and when adding an
entry is not enough to parse, print and update it in place.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from types import MappingProxyType

import jax
import jax.numpy as jnp
import pytest
import sympy as sp
import torch

from rulegen.derive import functions as fn
from rulegen.derive.expr import parse_expression
from rulegen.plan import printers
from rulegen.plan.printers import print_jax, print_torch
from rulegen.spec.errors import Loc, SpecError
from rulegen.spec.names import HELPER_NAMES

jax.config.update("jax_enable_x64", True)

X, Y, BETA = sp.symbols("x y beta")
SYMBOLS = {"x": X, "y": Y, "beta": BETA}
LOC = Loc("test", 1, 0)

# Calls whose arguments are not one value per argument, or whose domain excludes x = 0.3.
EXAMPLES = {
    "acosh": "acosh(x + 1)",
    "Piecewise": "Piecewise((x, x > 0.5), (y, True))",
    "where": "where(x > 0.5, x, y)",
    "clip": "clip(x, 0.1, 0.2)",
    "polygamma": "polygamma(1, x)",
    "zeta": "zeta(2, x)",  # the frameworks' is nan for s < 1, where mpmath continues it
}
RULE_NAMES = sorted(fn.RULE_FUNCTIONS)
INTERNAL = [f for f in fn.REGISTRY if f.internal]


def example(name: str) -> str:
    low, _ = fn.RULE_FUNCTIONS[name].argument_counts
    return EXAMPLES.get(name, f"{name}({', '.join('xy'[:low])})")


def resolve(path: str) -> Callable[..., object]:
    """The framework function a printed path names, as the generated code's imports bind it."""
    module, _, attribute = path.rpartition(".")
    head, _, rest = module.partition(".")
    root: object = {"jnp": jnp, "torch": torch, "math": math, "jax": jax}[head]
    if head == "jax" and rest:
        root = importlib.import_module(module)
    elif rest:
        for part in rest.split("."):
            root = getattr(root, part)
    return getattr(root, attribute)


@pytest.mark.parametrize("name", RULE_NAMES)
def test_every_function_a_rule_may_call_prints_in_both_backends_with_its_registered_spelling(name):
    function = fn.RULE_FUNCTIONS[name]
    expr = parse_expression(example(name), SYMBOLS, LOC)
    jax_text = print_jax(expr)[0].text
    torch_text = print_torch(expr)[0].text
    if function.jax_runtime:
        assert f"{function.jax_runtime}(" in jax_text
    elif function.jax:
        assert function.jax in jax_text
    if function.torch_runtime:
        assert f"{function.torch_runtime}(" in torch_text
    elif function.torch:
        assert function.torch in torch_text


@pytest.mark.parametrize("function", INTERNAL, ids=lambda f: f.name)
def test_every_internal_function_prints_in_the_backends_that_meet_it(function):
    low, _ = function.argument_counts
    # An order (erfcx_series' n) is an integer literal, as the derivatives write it; every other argument an input
    # of its own, as a rule's are.  Arguments of one symbol (x, x + 1) make each condition of beta's cases one of
    # x alone, which sympy solves as it builds the Piecewise: beta_slope printed in 35 s of CPU, for 4 s.
    if function.sympy is fn.power_product:  # (base, integer exponent) pairs: x0**-1 * x2**1
        expr = fn.power_product(*(sp.Symbol(f"x{k}") if k % 2 == 0 else sp.Integer(k - 2) for k in range(low)))
    else:
        expr = function.sympy(*(sp.Integer(1) if k < function.orders else sp.Symbol(f"x{k}") for k in range(low)))
    print_torch(expr)
    if function.torch_only:
        with pytest.raises(sp.printing.codeprinter.PrintMethodNotImplementedError):
            print_jax(expr)
    else:
        print_jax(expr)


@pytest.mark.parametrize("function", fn.REGISTRY, ids=lambda f: f.name)
def test_every_registered_spelling_names_a_function_the_printers_know_how_to_import(function):
    for path in (function.jax, function.torch, function.math):
        if path is not None:
            assert callable(resolve(path)), path
            assert path.rpartition(".")[0] in printers._IMPORTS, path


@pytest.mark.parametrize("function", [f for f in fn.REGISTRY if f.in_place], ids=lambda f: f.name)
def test_every_in_place_method_computes_the_function_into_its_buffer(function):
    assert isinstance(function.sympy, type) and function.argument_counts == (1, 1)
    x = torch.tensor([-0.6, 0.3, 1.3], dtype=torch.float64)  # inside every domain somewhere
    out_of_place = resolve(function.torch)(x)
    buffer = x.clone()
    assert getattr(buffer, function.in_place)() is buffer
    torch.testing.assert_close(buffer, out_of_place, equal_nan=True)


@pytest.mark.parametrize("function", [f for f in fn.REGISTRY if f.torch_tensor_only], ids=lambda f: f.name)
def test_tensor_only_functions_refuse_a_python_number_and_are_printed_with_a_tensor(function):
    with pytest.raises(TypeError):
        resolve(function.torch)(torch.ones(2), 2.0)
    text = print_torch(function.sympy(X, 2))[0].text
    assert text == f"{function.torch}(x, torch.tensor(2.0))"


def test_min_and_max_of_static_inputs_stay_python_numbers():
    # Min and Max are no sympy Functions, so the registered printing of functions does not reach them.
    c = sp.Symbol("c")
    assert print_jax(sp.Max(BETA, c) * X, scalars=frozenset({"beta", "c"}))[0].text == "x*max(beta, c)"
    assert print_torch(sp.Min(BETA, c) * X, scalars=frozenset({"beta", "c"}))[0].text == "x*min(beta, c)"
    assert print_torch(sp.Min(BETA, X), scalars=frozenset({"beta"}))[0].text == "torch.clamp(x, max=beta)"


def test_a_clip_of_a_tensor_between_numbers_is_one_clamp():
    # The stabilising search clamps an input where a form has reached its limits: one kernel, not a clamp of a clamp.
    assert print_torch(sp.Min(sp.Max(X, -2), 3))[0].text == "torch.clamp(x, -2, 3)"
    assert print_torch(sp.Max(sp.Min(X, 3), -2))[0].text == "torch.clamp(torch.clamp(x, max=3), min=-2)"


def test_the_derived_tables_agree_with_the_registry_and_are_read_only():
    names = [f.name for f in fn.REGISTRY]
    assert len(names) == len(set(names))
    rule_names = [n for f in fn.REGISTRY for n in f.rule_names]
    assert len(rule_names) == len(set(rule_names))
    assert set(fn.FUNCTIONS) == set(fn.RULE_FUNCTIONS) == set(rule_names)
    assert set(fn.MPMATH_IMPLEMENTATIONS) <= set(names)
    assert fn.TORCH_TENSOR_ONLY.issubset(names)
    assert isinstance(fn.FUNCTIONS, MappingProxyType)
    assert isinstance(fn.MPMATH_IMPLEMENTATIONS, MappingProxyType)
    assert isinstance(fn.TORCH_TENSOR_ONLY, frozenset)
    # A runtime function is imported into generated modules by its name, which no rule may take.
    assert {f.torch_runtime for f in fn.REGISTRY if f.torch_runtime} <= HELPER_NAMES
    assert {f.jax_runtime for f in fn.REGISTRY if f.jax_runtime} <= HELPER_NAMES
    for function in fn.REGISTRY:
        assert printers._JAX_FUNCTIONS.get(function.name) == (function.jax_runtime or function.jax)
        assert printers._TORCH_FUNCTIONS.get(function.name) == (function.torch_runtime or function.torch)
        assert printers._MATH_FUNCTIONS.get(function.name) == function.math


def _candidate_names() -> set[str]:
    """Function names a rule might try: sympy's and the frameworks'."""
    sympy_names = {n for n in dir(sp) if isinstance(getattr(sp, n), type) and issubclass(getattr(sp, n), sp.Function)}
    torch_names = {n for n in dir(torch.special) if not n.startswith("_")}
    jnp_names = {n for n in dir(jnp) if not n.startswith("_") and callable(getattr(jnp, n))}
    return sympy_names | torch_names | jnp_names | {"abs", "min", "max", "pow", "round"}


def test_the_parser_accepts_a_function_name_only_if_the_registry_has_it():
    accepted = set()
    for name in sorted(_candidate_names()):
        try:
            parse_expression(f"{name}(x)", SYMBOLS, LOC)
        except SpecError as exc:
            if "unknown function" not in str(exc):
                accepted.add(name)  # known, but not with one argument
        else:
            accepted.add(name)
    assert accepted == accepted & set(fn.RULE_FUNCTIONS)
    assert not {f.name for f in INTERNAL} & accepted


@pytest.mark.parametrize("name", [n for n in RULE_NAMES if fn.RULE_FUNCTIONS[n].refuses_large_numbers])
def test_functions_sympy_evaluates_exactly_refuse_large_numbers(name):
    call = {"polygamma": "polygamma(1, 5000)", "beta": "beta(5000, 3)"}.get(name, f"{name}(5000)")
    with pytest.raises(SpecError, match="larger than"):
        parse_expression(call, SYMBOLS, LOC)


_CORRECTED = """
rules:
  - name: with_residuals
    inputs: [x]
    forward: digamma(x) * exp(-x**2)
    # As derived and factored, -(2 x digamma(x) - polygamma(1, x)) exp(-x**2): torch saves the polygamma.
    stabilise: false
  - name: snippet_sympy_vjp
    inputs: [x]
    forward: {python: "return xp.sin(x)"}
    vjp: polygamma(1, x) * out_bar
    checks: {true_derivative: false}
"""


def test_every_printed_call_of_a_corrected_function_is_its_correction(tmp_path):
    """A registry correction (polygamma by reflection for x < 0) holds wherever the call is printed.

    torch's backward of a rule whose Function saves intermediates called `torch.special.polygamma(1, x)` as it
    is (its own cotangent forms replaced the emitter's, corrections and all), and a sympy body of a snippet rule
    was printed with no corrections in either backend; forward and jvp were corrected.
    """
    import ast

    from rulegen.render.build import generate
    from rulegen.spec.rules import read_rule_file

    path = tmp_path / "corrected.yaml"
    path.write_text(_CORRECTED)
    raw, reflected = [], 0
    for rule in read_rule_file(path, "corrected.yaml"):
        for name, text in generate(rule).modules.items():
            tree = ast.parse(text)
            # The reflection is where(x < 0, <at 1 - x>, polygamma(1, x)): its call at x is a `where`'s argument.
            inside_where = {
                id(a)
                for n in ast.walk(tree)
                if isinstance(n, ast.Call) and ast.unparse(n.func).endswith("where")
                for a in n.args
            }
            # A stand-in the body names first (`t4 = where(t2 | t3, 2**27 - 1, x)`) is read through its name.
            assigned = {
                n.targets[0].id: n.value
                for n in ast.walk(tree)
                if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
            }
            for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
                # At x, or at x's stand-in below the asymptotic series, where(x >= 2**27, 2**27 - 1, x).
                argument = call.args[1] if len(call.args) > 1 else call
                if isinstance(argument, ast.Name):
                    argument = assigned.get(argument.id, argument)
                at_x = ast.unparse(argument) == "x" or (
                    isinstance(argument, ast.Call)
                    and ast.unparse(argument.func).endswith("where")
                    and ast.unparse(argument.args[-1]) == "x"
                )
                if ast.unparse(call.func).endswith("polygamma") and at_x:
                    reflected += id(call) in inside_where
                    if id(call) not in inside_where:
                        raw.append((rule.name, name, ast.unparse(call)))
    assert not raw, raw
    assert reflected >= 5
