"""How tightly printed code binds: the Values the printers and the snippet planner give, held to Python's grammar."""

from __future__ import annotations

import ast
from types import SimpleNamespace

import pytest
import sympy as sp
from sympy.printing.precedence import PRECEDENCE

from rulegen.derive import functions as fn
from rulegen.plan.code import LITERAL, LOOSEST, PRIMARY, Value
from rulegen.plan.model import Wrap
from rulegen.plan.printers import print_jax, print_torch, print_torch_compiled
from rulegen.plan.snippet import inline_expression

x, y, z = sp.symbols("x y z")
beta = sp.Symbol("beta")

#: Places code goes, `{}` for it, and the precedence it must have there to go bare.
PLACES = [
    ("{}.real", PRIMARY),
    ("{}[0]", PRIMARY),
    ("w**{}", PRECEDENCE["Pow"]),
    ("{}**w", PRECEDENCE["Pow"] + 1),
    ("{} * w", PRECEDENCE["Mul"]),
    ("w / {}", PRECEDENCE["Mul"] + 1),
    ("{} + w", PRECEDENCE["Add"]),
    ("w - {}", PRECEDENCE["Add"] + 1),
    ("{} < w", PRECEDENCE["Relational"] + 1),
    ("{} & w", PRECEDENCE["BitwiseAnd"]),
    ("{} | w", PRECEDENCE["BitwiseOr"]),
]
#: The name that stands for the code in a place's tree.
HOLE = "_the_code_"


def same_bare_as_parenthesised(value: Value) -> list[str]:
    """The places where `value` goes bare (its precedence says so) yet would mean other than in parentheses."""
    # In parentheses the code parses as it does alone, wherever it goes: its tree, dumped once, in the place's tree
    # (beta's code by cases is 27,000 characters, dumped at every place it took seconds).
    alone = ast.dump(ast.parse(value.text, mode="eval").body)
    wrong = []
    for place, level in PLACES:
        if value.precedence < level:
            continue
        bare = place.format(value.text)
        whole = ast.dump(ast.parse(place.format(HOLE), mode="eval")).replace(
            ast.dump(ast.Name(HOLE, ast.Load())), alone
        )
        try:
            meant = ast.dump(ast.parse(bare, mode="eval"))
        except SyntaxError:
            wrong.append(bare)
            continue
        if meant != whole:
            wrong.append(bare)
    return wrong


EXPRESSIONS = [
    x,
    x + y,
    x * y,
    -x,
    -x * y,
    x - y,
    sp.sin(x),
    sp.sin(x) * 2,
    x**2,
    x**3,
    x**-3,
    1 / x**2,
    1 / x,
    sp.sqrt(x),
    1 / sp.sqrt(x),
    x ** sp.Rational(1, 3),
    x ** sp.Rational(2, 3),
    x ** sp.Rational(-2, 3),
    x**y,
    sp.Float(0.5),
    sp.Float(-0.5),
    sp.Float(2.0**-120),
    sp.Float(-(2.0**-120)),
    sp.Float(1.0) * sp.sin(x),
    sp.Float(-1.0) * sp.sin(x),
    sp.Float(1.0) * (x + y),
    sp.Integer(3),
    sp.Integer(-3),
    sp.Rational(1, 3),
    sp.Rational(2, 3) * x,
    sp.pi,
    sp.sqrt(2),
    sp.sqrt(2) / 2,
    -sp.sqrt(2),
    sp.sqrt(2) * x,
    sp.nan,
    sp.oo,
    -sp.oo,
    sp.exp(beta),
    beta * 2,
    x / y,
    x / y**2,
    2 * (x / y),
    sp.Piecewise((x, x > 0), (y, True)),
    sp.Piecewise((x, beta > 0), (y, True)),
    sp.Max(x, y),
    sp.Min(x, 3),
    sp.Min(sp.Max(x, -2), 3),
    sp.Heaviside(x),
    sp.sign(x),
    sp.Abs(x),
    sp.gamma(x),
    sp.beta(x, y),
    x > y,
    sp.And(x > 0, y > 0),
    sp.Or(x > 0, y > 0),
    sp.Not(x > 0),
    fn.divided(x, y),
    fn.divided(fn.divided(-x, y), y),
    fn.divided(-x * y, y),
    fn.divided(x + y, y),
    fn.divided(-(x + y), y),
    fn.in_float(2, x),
    fn.in_float(x + y, x),
    fn.cotangent_term(x, sp.sin(y)),
    fn.cotangent_term(x, 1),
    sp.UnevaluatedExpr(x + y),
    sp.tanh(x),
]


@pytest.mark.parametrize("printer", [print_torch, print_jax, print_torch_compiled])
@pytest.mark.parametrize("expr", EXPRESSIONS, ids=str)
def test_printed_code_goes_bare_only_where_it_means_the_same(printer, expr):
    """A printer's Value says how tightly its code binds: wherever that lets the code go bare, Python reads it as
    it reads it in parentheses."""
    value, _ = printer(expr, scalars=frozenset({"beta"}))
    assert same_bare_as_parenthesised(value) == [], value


@pytest.mark.parametrize("printer", [print_torch, print_jax])
@pytest.mark.parametrize("expr", [x, sp.sin(x), sp.sqrt(x), 1 / sp.sqrt(x), sp.Max(x, y), sp.Float(1.0) * sp.exp(x)])
def test_a_name_or_a_call_is_a_primary(printer, expr):
    """What `.mul_()` or `.sum_to_size()` is chained onto bare: a name, a call."""
    assert printer(expr)[0].precedence == PRIMARY


def test_operators_bind_as_sympy_ranks_them():
    assert print_torch(x + y)[0] == Value("x + y", PRECEDENCE["Add"])
    assert print_torch(x * y)[0] == Value("x*y", PRECEDENCE["Mul"])
    assert print_torch(x**y)[0] == Value("x**y", PRECEDENCE["Pow"])
    assert print_torch(x**2)[0] == Value("x * x", PRECEDENCE["Mul"])
    assert print_torch(-x)[0].precedence < PRECEDENCE["Mul"]  # a unary minus
    assert print_torch(sp.Float(0.5))[0] == Value("0.5", LITERAL)
    assert print_torch(sp.Piecewise((x, beta > 0), (y, True)), scalars=frozenset({"beta"}))[0].precedence == LOOSEST
    assert print_jax(x / y)[0] == Value("quotient(x, y)", PRIMARY)


def test_a_value_is_parenthesised_where_it_binds_more_loosely():
    total = Value("a + b", PRECEDENCE["Add"])
    assert total.within(PRECEDENCE["Add"]) == "a + b"
    assert total.within(PRECEDENCE["Mul"]) == "(a + b)"
    assert total.method("clone()") == Value("(a + b).clone()", PRIMARY)
    assert Value("t0").method("mul_(x)").method("add_(1)").text == "t0.mul_(x).add_(1)"
    assert Value("2.0", LITERAL).receiver == "(2.0)"


def test_a_wrap_places_its_value_by_its_binding():
    """A method wrap parenthesises what binds more loosely than a primary; a call's argument is placed bare."""
    cast = Wrap.method("long()")
    assert cast.apply(Value("x*y", PRECEDENCE["Mul"])).text == "(x*y).long()"
    assert cast.apply(Value("torch.floor(p)")).text == "torch.floor(p).long()"
    broadcast = Wrap("broadcast({}, x, p)", frozenset({"x", "p"}))
    assert broadcast.apply(Value("2 * x", PRECEDENCE["Mul"])).text == "broadcast(2 * x, x, p)"
    # The cast of a broadcast: the call is a primary, cast bare.
    both = cast.around(broadcast)
    assert both.apply(Value("a + b", PRECEDENCE["Add"])).text == "broadcast(a + b, x, p).long()"
    assert both.reads == frozenset({"x", "p"})
    assert Wrap().apply(total := Value("a + b", PRECEDENCE["Add"])) is total


SNIPPETS = [
    "return take(x, dim)",
    "return x.real",
    "return x[0]",
    "return 2.0",
    "return -x",
    "return x + y",
    "return x * y",
    "return x ** y",
    "return x @ y",
    "return x << 1",
    "return x | y",
    "return x ^ y",
    "return x & y",
    "return x < y",
    "return not x",
    "return x and y",
    "return x or y",
    "return a if c else b",
    "return lambda: x",
    "return [x, y]",
    "return ~x",
]


@pytest.mark.parametrize("text", SNIPPETS)
def test_a_snippet_s_expression_binds_as_its_syntax_tree_says(text):
    value = inline_expression(SimpleNamespace(kind="python", text=text))
    assert value is not None
    assert same_bare_as_parenthesised(value) == [], value


def test_a_snippet_s_call_is_a_primary_and_its_sum_is_not():
    def bound(text: str) -> int:
        value = inline_expression(SimpleNamespace(kind="python", text=text))
        assert value is not None
        return value.precedence

    assert bound("return xp.clip(out_bar, lo, hi)") == PRIMARY
    assert bound("return out_bar * 2") == PRECEDENCE["Mul"]
    assert bound("return a if c else b") == LOOSEST


@pytest.mark.parametrize(("printer", "module"), [(print_jax, "._util"), (print_torch, "._special")])
def test_a_negative_rational_power_is_the_roots_power_not_a_quotient(printer, module):
    """x**(-2/3) as nth_root(x, 3)**-2: the frameworks differentiate 1 / r**2 as -(1 / r**4) * 2 r r', inf * 0
    at x = inf (where r' = 0), and r**-2 as -2 r**-3 r', 0.  The root is the runtime's, with a stated derivative."""
    value, imports = printer(x ** sp.Rational(-2, 3))
    assert value == Value("nth_root(x, 3)**-2", PRECEDENCE["Pow"])
    assert {(i.module, i.name) for i in imports} == {(module, "nth_root")}


@pytest.mark.parametrize("printer", [print_torch, print_jax])
def test_a_condition_of_static_inputs_halved_is_python_arithmetic(printer):
    """`_is_inf(s)` of a static s, s / 2 >= s: a 0-d tensor of s before, whose `where` of Python numbers torch makes
    float32 (torch's default dtype) in a float64 rule.  Python's IEEE division now, and the `where` a conditional."""
    from rulegen.plan.forms import float_forms

    s, u = sp.Symbol("s", real=True), sp.Symbol("u", real=True)
    expr = fn.Piecewise((sp.Float(0.5), (s > 0) & (fn.divided(s, 2) >= s)), (s / 3, True)) * u
    rewritten = float_forms((u,), (), for_torch=printer is print_torch, scalars=frozenset({"s"}))(expr)
    value, _ = printer(rewritten, scalars=frozenset({"s"}))
    assert "_numbers.div(s, 2)" in value.text
    assert "where" not in value.text and "tensor" not in value.text and "asarray" not in value.text, value.text
