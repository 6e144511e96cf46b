"""Parse a symbolic expression from a rule file as data, never as code.

`sympify` and `parse_expr` evaluate their input with Python's `eval`; a rule
file is untrusted, so expressions are parsed with `ast` instead, checked
against a whitelist of node types, names and functions, and built into sympy
objects node by node.  Before sympy sees anything, limits on size, depth,
exponents and special-function arguments keep a hostile expression from
making it hang or exhaust memory.
"""

from __future__ import annotations

import ast
import builtins
import difflib
import importlib
import keyword
import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import sympy as sp
from sympy.codegen.cfunctions import log1p
from sympy.printing.numpy import NumPyPrinter
from sympy.printing.pycode import MpmathPrinter

from rulegen.computation.printed import PrintedOnce
from rulegen.computation.quotients import power_of_a_quotient, quotient_power, scaled_product
from rulegen.derive.functions import CONSTANTS, HOLOMORPHIC, RULE_FUNCTIONS, Piecewise, divided
from rulegen.spec.errors import Loc, SpecError

MAX_CHARS = 20_000
MAX_NODES = 5_000
MAX_DEPTH = 100
MAX_EXPONENT = 64
MAX_INT_DIGITS = 30
MAX_SPECIAL_ARG = 1000
MAX_POLYGAMMA_ORDER = 8

_BINARY: dict[type[ast.operator], Callable[[sp.Expr, sp.Expr], sp.Expr]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}
_REFUSED_BINARY = {
    ast.BitXor: "^ is not a power in Python; use ** for powers",
    ast.Mod: "% is not supported in a symbolic expression",
    ast.FloorDiv: "// is not supported in a symbolic expression",
    ast.MatMult: "@ is not supported in a symbolic expression",
    ast.BitAnd: "use `and` in conditions (& is not supported)",
    ast.BitOr: "use `or` in conditions (| is not supported)",
    ast.LShift: "<< is not supported in a symbolic expression",
    ast.RShift: ">> is not supported in a symbolic expression",
}
_COMPARE: dict[type[ast.cmpop], Callable[[sp.Expr, sp.Expr], sp.Basic]] = {
    ast.Lt: sp.Lt,
    ast.LtE: sp.Le,
    ast.Gt: sp.Gt,
    ast.GtE: sp.Ge,
    ast.Eq: sp.Eq,
    ast.NotEq: sp.Ne,
}
_NODE_NAMES = {
    ast.Attribute: "attributes",
    ast.Subscript: "subscripts",
    ast.Lambda: "lambdas",
    ast.ListComp: "comprehensions",
    ast.SetComp: "comprehensions",
    ast.DictComp: "comprehensions",
    ast.GeneratorExp: "comprehensions",
    ast.Starred: "starred arguments",
    ast.Dict: "dicts",
    ast.Set: "sets",
    ast.List: "lists",
    ast.JoinedStr: "f-strings",
    ast.NamedExpr: "assignment expressions",
    ast.Await: "await",
    ast.Yield: "yield",
    ast.YieldFrom: "yield",
    ast.Slice: "slices",
}


def _condition(value: object) -> bool:
    return isinstance(value, sp.logic.boolalg.Boolean) and not isinstance(value, sp.Expr)


def _exact(part: float) -> sp.Number:
    """A part of a complex literal: an integer stays one (`3j` is 3*I, not 3.0*I)."""
    return sp.Integer(int(part)) if part.is_integer() else sp.Float(part, 17)


#: Names of functions of a complex number that have no complex derivative (not holomorphic).
_NOT_HOLOMORPHIC_NAMES = frozenset({"conj", "conjugate", "real", "imag", "re", "im", "angle", "arg"})


class _Builder:
    def __init__(self, symbols: Mapping[str, sp.Symbol], loc: Loc) -> None:
        self.symbols = symbols
        self.loc = loc
        # Over complex symbols (a complex rule's), only holomorphic expressions have the derivatives derived.
        self.holomorphic = any(s.is_complex and s.is_real is None for s in symbols.values())

    def not_holomorphic(self, node: ast.AST, what: str) -> SpecError:
        allowed = ", ".join(sorted(n for n in RULE_FUNCTIONS if RULE_FUNCTIONS[n].name in HOLOMORPHIC))
        return self.error(
            node,
            f"{what} is not holomorphic: a complex rule's derivatives are complex derivatives, "
            f"of arithmetic, powers and {allowed}",
        )

    def error(self, node: ast.AST, message: str) -> SpecError:
        return SpecError(self.loc.offset(getattr(node, "lineno", 1), getattr(node, "col_offset", 0)), message)

    def value(self, node: ast.AST, *, indicator: bool = False) -> sp.Expr:
        """An arithmetic value; with `indicator`, a condition too, as 1 where it holds and 0 elsewhere."""
        result = self.build(node)
        if indicator and (_condition(result) or result in (sp.true, sp.false)):
            return Piecewise((1, result), (0, True))
        if _condition(result) or isinstance(result, tuple):
            raise self.error(node, "a condition is used where a value is expected")
        return result

    def condition(self, node: ast.AST) -> sp.Basic:
        result = self.build(node)
        if result in (sp.true, sp.false):
            return result
        if not _condition(result):
            raise self.error(node, "a value is used where a condition (a comparison) is expected")
        return result

    def build(self, node: ast.AST) -> sp.Basic:
        kind = type(node)
        if kind is ast.Constant:
            return self.constant(node)  # type: ignore[arg-type]
        if kind is ast.Name:
            return self.name(node)  # type: ignore[arg-type]
        if kind is ast.BinOp:
            return self.binary(node)  # type: ignore[arg-type]
        if kind is ast.UnaryOp:
            return self.unary(node)  # type: ignore[arg-type]
        if kind is ast.Compare:
            if self.holomorphic:
                raise self.not_holomorphic(node, "a comparison (complex numbers have no order)")
            return self.compare(node)  # type: ignore[arg-type]
        if kind is ast.BoolOp:
            parts = [self.condition(v) for v in node.values]  # type: ignore[attr-defined]
            return sp.And(*parts) if isinstance(node.op, ast.And) else sp.Or(*parts)  # type: ignore[attr-defined]
        if kind is ast.IfExp:
            cond = self.condition(node.test)  # type: ignore[attr-defined]
            return Piecewise((self.value(node.body), cond), (self.value(node.orelse), True))  # type: ignore[attr-defined]
        if kind is ast.Call:
            return self.call(node)  # type: ignore[arg-type]
        if kind is ast.Tuple:
            raise self.error(node, "tuples are only allowed as Piecewise arguments: Piecewise((value, condition), ...)")
        what = _NODE_NAMES.get(kind, type(node).__name__)
        raise self.error(node, f"{what} are not allowed in a symbolic expression")

    def constant(self, node: ast.Constant) -> sp.Basic:
        value = node.value
        if isinstance(value, bool):
            return sp.true if value else sp.false
        if isinstance(value, int):
            if len(str(abs(value))) > MAX_INT_DIGITS:
                raise self.error(node, f"integer literal longer than {MAX_INT_DIGITS} digits")
            return sp.Integer(value)
        if isinstance(value, float):
            return sp.Float(value, 17) if value == value else sp.nan
        if isinstance(value, complex) and self.holomorphic and all(map(math.isfinite, (value.real, value.imag))):
            return _exact(value.real) + sp.I * _exact(value.imag)
        raise self.error(node, f"{type(value).__name__} literals are not allowed in a symbolic expression")

    def name(self, node: ast.Name) -> sp.Basic:
        if node.id in self.symbols:
            return self.symbols[node.id]
        if node.id in CONSTANTS:
            return CONSTANTS[node.id]
        if node.id in ("True", "False"):
            return sp.true if node.id == "True" else sp.false
        if node.id in RULE_FUNCTIONS:
            raise self.error(node, f"{node.id!r} is a function; call it, e.g. {node.id}(x)")
        known = [*self.symbols, *CONSTANTS]
        close = difflib.get_close_matches(node.id, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; names in scope: {', '.join(sorted(self.symbols))}"
        raise self.error(node, f"unknown name {node.id!r}{hint}")

    def binary(self, node: ast.BinOp) -> sp.Expr:
        # A long sum or product is a deep left spine; fold it with a loop so
        # that its length costs no recursion.
        spine = [node]
        while isinstance(spine[-1].left, ast.BinOp) and not isinstance(spine[-1].op, ast.Pow):
            spine.append(spine[-1].left)
        result = self.value(spine[-1].left)
        quotient: tuple[sp.Expr, sp.Expr] | None = None  # the last step's, where it divided
        for step in reversed(spine):
            op = type(step.op)
            if op in _REFUSED_BINARY:
                raise self.error(step, _REFUSED_BINARY[op])
            right = self.value(step.right)
            if op is ast.Pow:
                self.check_power(step, result, right)
            if op is ast.Mult:
                result, right = self.written_quotients(step, result, quotient, right)
            quotient = (result, right) if op is ast.Div else None
            result = _BINARY[op](result, right)
        return result

    def written_quotients(
        self, step: ast.BinOp, left: sp.Expr, quotient: tuple[sp.Expr, sp.Expr] | None, right: sp.Expr
    ) -> tuple[sp.Expr, sp.Expr]:
        """The factors of a product, a written quotient among them kept whole where sympy would merge it.

        sympy makes `x * (x / w)` into `x**2 / w`, which overflows past
        |x| = 1.3e154 where the written order does not (torch's "safe where"
        idiom): a quotient that shares a base with the other factor is
        `divided(x, w)`, computed as written.  A product of quotients that
        share nothing is left to sympy, whose canonical forms read it.
        """
        if not _share_a_base(left, right):
            return left, right
        if quotient is not None and _share_a_base(quotient[0] / quotient[1], right):
            left = divided(*quotient)
        if isinstance(step.right, ast.BinOp) and isinstance(step.right.op, ast.Div):
            right = divided(self.value(step.right.left), self.value(step.right.right))
        return left, right

    def check_power(self, node: ast.BinOp, base: sp.Expr, exponent: sp.Expr) -> None:
        if exponent.is_number:
            if not exponent.is_finite or abs(complex(exponent)) > MAX_EXPONENT:
                raise self.error(node, f"exponent {exponent} is larger than {MAX_EXPONENT}")
        elif base.is_number and base.is_finite and abs(complex(base)) > 1e6:
            raise self.error(node, "the base of a symbolic power must be at most 1e6")
        if base.is_number and exponent.is_number:
            digits = len(str(abs(int(base)))) if base.is_Integer else 1
            if digits * abs(complex(exponent)) > 300:
                raise self.error(node, "this power of numbers is too large")

    def unary(self, node: ast.UnaryOp) -> sp.Basic:
        if isinstance(node.op, ast.USub):
            return -self.value(node.operand)
        if isinstance(node.op, ast.UAdd):
            return self.value(node.operand)
        if isinstance(node.op, ast.Not):
            return sp.Not(self.condition(node.operand))
        raise self.error(node, "~ is not supported in a symbolic expression")

    def compare(self, node: ast.Compare) -> sp.Basic:
        parts = []
        left = self.value(node.left)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            if type(op) not in _COMPARE:
                raise self.error(node, f"{type(op).__name__} comparisons are not supported")
            right = self.value(right_node)
            parts.append(_COMPARE[type(op)](left, right))
            left = right
        return parts[0] if len(parts) == 1 else sp.And(*parts)

    def call(self, node: ast.Call) -> sp.Basic:
        if not isinstance(node.func, ast.Name):
            raise self.error(node, "only whitelisted functions may be called, by name (e.g. exp(x))")
        name = node.func.id
        function = RULE_FUNCTIONS.get(name)
        if self.holomorphic and (name in _NOT_HOLOMORPHIC_NAMES or (function and function.name not in HOLOMORPHIC)):
            raise self.not_holomorphic(node.func, f"{name}()")
        if function is None:
            close = difflib.get_close_matches(name, list(RULE_FUNCTIONS), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise self.error(node.func, f"unknown function {name!r}{hint}")
        if node.keywords:
            raise self.error(node, f"{name}() takes positional arguments only")
        if any(isinstance(a, ast.Starred) for a in node.args):
            raise self.error(node, "starred arguments are not allowed in a symbolic expression")
        low, high = function.argument_counts
        if not low <= len(node.args) <= high:
            expected = str(low) if low == high else f"{low} to {high}"
            raise self.error(node, f"{name}() takes {expected} argument(s), got {len(node.args)}")
        if name == "Piecewise":
            return self.piecewise(node)
        if name == "where":
            cond = self.condition(node.args[0])
            return function.sympy(cond, self.value(node.args[1]), self.value(node.args[2]))
        args = [self.value(a) for a in node.args]
        if name == "polygamma" and not (args[0].is_Integer and 0 <= int(args[0]) <= MAX_POLYGAMMA_ORDER):
            raise self.error(node, f"polygamma's order must be an integer literal from 0 to {MAX_POLYGAMMA_ORDER}")
        if function.refuses_large_numbers and any(
            a.is_number and a.is_finite and abs(float(a)) > MAX_SPECIAL_ARG for a in args
        ):
            raise self.error(node, f"{name}() of a number larger than {MAX_SPECIAL_ARG} is not allowed")
        return function.sympy(*args)

    def piecewise(self, node: ast.Call) -> sp.Expr:
        pieces = []
        for arg in node.args:
            if not (isinstance(arg, ast.Tuple) and len(arg.elts) == 2):
                raise self.error(arg, "each Piecewise argument is a pair (value, condition)")
            pieces.append((self.value(arg.elts[0]), self.condition(arg.elts[1])))
        return Piecewise(*pieces)


def _share_a_base(a: sp.Expr, b: sp.Expr) -> bool:
    """Whether sympy's product of `a` and `b` merges a power of one with the other's (`x * x**-1`)."""
    bases = [{base for base in sp.Mul.make_args(e) if not base.is_number} for e in (a, b)]
    return bool({f.as_base_exp()[0] for f in bases[0]} & {f.as_base_exp()[0] for f in bases[1]})


def _depth_and_size(tree: ast.AST, builder: _Builder) -> None:
    stack: list[tuple[ast.AST, int]] = [(tree, 0)]
    count = 0
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > MAX_NODES:
            raise builder.error(tree, f"expression has more than {MAX_NODES} parts")
        if depth > MAX_DEPTH:
            raise builder.error(node, f"expression nested deeper than {MAX_DEPTH} levels")
        for child in ast.iter_child_nodes(node):
            on_spine = isinstance(node, ast.BinOp) and child is node.left and not isinstance(node.op, ast.Pow)
            stack.append((child, depth if on_spine else depth + 1))


_UNARY_RUN = re.compile(rf"(?:[-+~]\s*){{{MAX_DEPTH},}}")


def _bracket_depth(text: str) -> int:
    depth = deepest = 0
    for char in text:
        if char in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in ")]}":
            depth -= 1
    return deepest


def parse_expression(text: str, symbols: Mapping[str, sp.Symbol], loc: Loc, *, indicator: bool = False) -> sp.Expr:
    """The sympy expression written in `text`, or a SpecError at the offending place.

    With `indicator`, a condition (`x > 0`, the value of a boolean output)
    reads as 1 where it holds and 0 elsewhere.
    """
    if len(text) > MAX_CHARS:
        raise SpecError(loc, f"expression longer than {MAX_CHARS} characters")
    stripped = text.strip()
    if not stripped:
        raise SpecError(loc, "empty expression")
    # ast.parse recurses once per nesting level and per unary operator; refuse
    # texts that would take it near Python's recursion limit.
    if _bracket_depth(stripped) > MAX_DEPTH:
        raise SpecError(loc, f"expression nested deeper than {MAX_DEPTH} levels")
    if _UNARY_RUN.search(stripped):
        raise SpecError(loc, f"more than {MAX_DEPTH} unary operators in a row")
    lead = len(text) - len(text.lstrip())
    lead_lines = text[:lead].count("\n")
    start = loc if not lead_lines else loc.offset(lead_lines + 1, 0)
    try:
        tree = ast.parse(stripped, mode="eval")
    except SyntaxError as exc:
        where = start.offset(exc.lineno or 1, max((exc.offset or 1) - 1, 0))
        raise SpecError(where, f"invalid expression syntax: {exc.msg}") from None
    except (RecursionError, MemoryError, ValueError) as exc:
        raise SpecError(start, f"expression cannot be parsed: {type(exc).__name__}") from None
    builder = _Builder(symbols, start)
    _depth_and_size(tree.body, builder)
    try:
        result = builder.value(tree.body, indicator=indicator)
    except SpecError:
        raise
    except (TypeError, ValueError, AttributeError, ZeroDivisionError, RecursionError) as exc:
        raise SpecError(start, f"sympy cannot build this expression: {exc}") from None
    if result.has(sp.zoo, sp.nan) or result in (sp.oo, -sp.oo):
        raise SpecError(start, "the expression is not a finite value (division by zero?)")
    return result


def lambdified(args: Sequence[sp.Symbol], expr: Any, modules: Any) -> Callable[..., Any]:
    """`sympy.lambdify` of `expr` in `args` whose code cannot meet a name of the rule's.

    lambdify names the generated function's parameters after the symbols: an
    input `float` or `max` shadows the builtin its code calls (`float('inf')`,
    `max(...)` of mpmath's Max) and the reference fails.  A symbol named like
    anything lambdify's namespace holds (builtins, the modules' names) is
    renamed, keeping its assumptions, to a name the namespace lacks; the
    others keep theirs, so that the printed sums and products, and their
    roundings, are the generated code's (lambdify's `dummify` renames every
    symbol, reorders them, and drops their assumptions).
    """
    namespace = set(dir(builtins)) | set(keyword.kwlist)
    for module in modules if isinstance(modules, list | tuple) else [modules]:
        namespace |= set(module) if isinstance(module, dict) else set(dir(importlib.import_module(module)))
    fresh = {}
    for s in args:
        if s.name in namespace:
            name = s.name + "_"
            while name in namespace or any(a.name == name for a in args):
                name += "_"
            fresh[s] = sp.Symbol(name, **s.assumptions0)
    body = expr.xreplace(fresh) if fresh and isinstance(expr, sp.Basic) else expr
    listed = list(modules) if isinstance(modules, list | tuple) else [modules]
    if "mpmath" in listed:
        listed = [{"power_of": power_of}, *listed]
    # The settings lambdify gives the printer it picks itself.
    user_functions = {name: name for m in listed if isinstance(m, dict) for name in m}
    settings = {
        "fully_qualified_modules": False,
        "inline": True,
        "allow_unknown_functions": True,
        "user_functions": user_functions,
    }
    if "numpy" in listed:
        return sp.lambdify([fresh.get(s, s) for s in args], body, modules=listed, printer=_NumPyOrder(settings))
    if "mpmath" not in listed:
        return sp.lambdify([fresh.get(s, s) for s in args], body, modules=modules)
    return sp.lambdify([fresh.get(s, s) for s in args], body, modules=listed, printer=_MpmathPowers(settings))


def reciprocal_difference(
    p: sp.Expr, q: sp.Expr, d: sp.Expr, where: tuple[sp.Expr, sp.Expr] | None = None, weight: sp.Expr = sp.S.One
) -> sp.Expr:
    """1/p - 1/q, d = q - p, as (d/p)/q divided by the larger magnitude first: |d| is at most twice it, so the
    quotient is in range wherever the difference is (1/p - 1/q cancels at q ~ p; d/(p q) overflows where p q
    does, and (d/p)/q where p << q).  Of two positives, the larger is their Max; else a `where` on magnitudes.
    `where`: what p and q stand for (stand-ins a caller feeds them), whose signs and magnitudes decide; None: p, q.
    A positive symbol may stand for an argument of either sign: a pole part's 1/r - 1/(k + r) at k = -1894,
    r = 3e-36, where the larger magnitude is not the Max.  `weight` times the difference multiplies the first
    quotient, at most itself, before the smaller divides: q1 (1/p1 - 1/(p1 + p0)) at p1 = 1.5e-320 is 4e263, where
    1/p1 alone overflows."""
    at_p, at_q = where or (p, q)
    if at_p.is_positive and at_q.is_positive:
        return divided(weight * divided(d, sp.Max(p, q)), sp.Min(p, q))
    return sp.Piecewise(
        (divided(weight * divided(d, p), q), sp.Abs(at_p) >= sp.Abs(at_q)),
        (divided(weight * divided(d, q), p), True),
    )


#: Past this log of the ratio of two positives (either way) `log_difference` subtracts their logs: the ratio is near
#: float64's range there (e**709), and below it log(a/b) is correctly rounded where log(a) - log(b) loses
#: log2(|log a| / log(a/b)) bits (4 at a ratio of e**44 beside a = 1e300).
FAR_LOG_RATIO = sp.Integer(700)


#: Where a - b is at most this many times b (a >= b), `log_difference` takes log1p((a - b)/b): the quotient is in
#: range in float32 too, and past it log(a) - log(b) loses at most log2(89/69) bits to the quotient's log.
GROWTH_IN_RANGE = sp.Integer(2) ** 100


def log_difference(
    a: sp.Expr,
    b: sp.Expr,
    d: sp.Expr,
    where: tuple[sp.Expr, sp.Expr] | None = None,
    kept: Callable[[sp.Expr], sp.Expr] = lambda e: e,
    far_log_ratio: sp.Expr = FAR_LOG_RATIO,
) -> sp.Expr:
    """log(a) - log(b), d = a - b, for positive a and b, its conditions read at `where` (stand-ins fed a and b, where
    a caller evaluates a and b at points of its own; None: a and b): log1p(d/b) from a = b/2 to a = b
    `GROWTH_IN_RANGE` (log(a/b) rounds the ratio near 1), log(d) - log(b) past that, log(a/b) below b/2 (1 + d/b
    rounds a small ratio), log(a) - log(b) where the ratio's log is past `far_log_ratio` below it (the ratio may
    have underflowed: 2.2e-308/21.92), `kept` from a caller's rewriting it again."""
    at_a, at_b = where or (a, b)
    ahead = sp.expand(at_a - at_b)
    # a >= b: log1p(d/b) is accurate wherever d/b is in range, and past that log(d) - log(b), log1p(b/d) below
    # 2**-100 left out: a itself is never computed (a = k + r overflows where log(a/k) is 0.7, at k = 3.4e38 and
    # r = 2.3e35 in float32).
    past = kept(sp.log(d) - sp.log(b))
    if ahead.is_nonnegative:
        return sp.Piecewise((log1p(d / b), d <= GROWTH_IN_RANGE * b), (past, True))
    if ahead.is_nonpositive:
        # a <= b: the same without b, which may overflow where a does not (log(q1) - log(q1 + q0) at q1 = q0 =
        # 1.9e38 in float32 is -0.69).
        return -log_difference(b, a, -d, (at_b, at_a), kept, far_log_ratio)
    close = (ahead > -sp.Abs(at_b) / 2) & (ahead <= GROWTH_IN_RANGE * sp.Abs(at_b))
    far = sp.Abs(sp.log(at_a / at_b)) >= far_log_ratio
    return sp.Piecewise(
        (log1p(d / b), close),
        (past, ahead > 0),
        (kept(sp.log(a) - sp.log(b)), far),
        (sp.log(a / b), True),
    )


class _NumPyOrder(PrintedOnce, NumPyPrinter):
    """numpy's printer, multiplying a quotient or a product by an integer last (`scaled_product`) and taking a power
    of a quotient whole (`power_of_a_quotient`), as the generated code does."""

    def _print_isfinite(self, expr: sp.Basic) -> str:
        return f"{self._module_format('numpy.isfinite')}({self._print(expr.args[0])})"

    def _print_ITE(self, expr: sp.Basic) -> str:
        # numpy's where: a condition's branches are booleans, and sympy's select of them defaults to nan (a float).
        test, then, otherwise = (self._print(a) for a in expr.args)
        return f"{self._module_format('numpy.where')}({test}, {then}, {otherwise})"

    def _print_Piecewise(self, expr: sp.Piecewise) -> str:
        # sympy's printer simplifies a condition that holds an if-then-else first (`simplify_logic`, exponential in the
        # condition's atoms: a Beta KL's series spent half a minute a search there); printed as it stands
        # (`_print_ITE`), it is the same test.
        values = ",".join(self._print(a.expr) for a in expr.args)
        tests = ",".join(self._print(a.cond) for a in expr.args)
        return f"{self._module_format('numpy.select')}([{tests}], [{values}], default={self._print(sp.nan)})"

    def _print_Mul(self, expr: sp.Expr) -> str:
        powered = power_of_a_quotient(expr)
        if powered is not None:
            return str(self._print(quotient_power(*powered, divided)))
        scaled = scaled_product(expr)
        if scaled is None:
            return str(super()._print_Mul(expr))
        coefficient, rest = scaled
        return f"{self._print(coefficient)}*({self._print(rest)})"


class _MpmathPowers(PrintedOnce, MpmathPrinter):
    """mpmath's printer, with powers of a variable exponent through `power_of`."""

    def _print_isfinite(self, expr: sp.Basic) -> str:
        return f"{self._module_format('mpmath.isfinite')}({self._print(expr.args[0])})"

    def _print_Pow(self, expr: sp.Pow, rational: bool = False) -> str:
        if expr.exp.is_Number:
            return str(super()._print_Pow(expr, rational=rational))
        return f"power_of({self._print(expr.base)}, {self._print(expr.exp)})"


#: Integer exponents past this are raised through exp and log: mpmath raises by repeated squaring at the
#: working precision, some ms a call at the 2,000 bits a point near the float line's ends needs (x**y at
#: y = 1e300, an integer like every float past 2**52, was most of a whole-line check's time).
SQUARING_LIMIT = 2**32


def power_of(x: Any, y: Any) -> Any:
    """`x**y` for mpf numbers, as mpmath gives it, in microseconds at any integer exponent."""
    import mpmath

    if x == 0 or abs(y) <= SQUARING_LIMIT or not mpmath.isint(y):
        return x**y
    magnitude = mpmath.exp(y * mpmath.log(abs(x)))
    return -magnitude if x < 0 and int(y) % 2 else magnitude
