"""Print sympy expressions as JAX and PyTorch array code.

sympy 1.14 ships a JaxPrinter and a TorchPrinter, written for scalar or
host code in places: JAX gets `math.erf` and `math.lgamma`, torch gets
`torch.special.gamma` (which does not exist) and `torch.max(0, x)`, neither
prints `erfinv` or `polygamma(n, x)`, rationals become `(1/3)*x`, and
numeric constants such as `sqrt(2)` become array calls on Python numbers
(`torch.sqrt(2)` raises).  The printers here subclass them and override one
`_print_<Node>` method per fix.  Imports are collected through
`_module_format`, never guessed from the text; how tightly the printed code
binds (`binding`) is read off the expression as the printer prints it.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any, ClassVar

import sympy as sp
from sympy.printing.numpy import JaxPrinter
from sympy.printing.precedence import PRECEDENCE, precedence
from sympy.printing.pycode import PythonCodePrinter

from rulegen.computation.printed import PrintedOnce
from rulegen.computation.quotients import (
    divided_by_a_square,
    power_of_a_quotient,
    quotient_power,
    scaled_product,
    square_of_a_name,
)
from rulegen.computation.sharing import added, summation_order
from rulegen.derive import functions as fn
from rulegen.plan.code import LITERAL, LOOSEST, PRIMARY, Import, Value

#: Module prefixes the generated code spells, and the import each needs.
_IMPORTS = {
    "jnp": Import("jax.numpy", alias="jnp"),
    "jax.scipy.special": Import("jax.scipy.special"),
    "jax.nn": Import("jax"),
    "jax.lax": Import("jax"),
    "torch": Import("torch"),
    "torch.special": Import("torch"),
    "torch.nn.functional": Import("torch"),
    "torch.ops.aten": Import("torch"),
    "math": Import("math"),
    "_numbers": Import(".", "_numbers"),
}

# The function each backend calls for a registered one, by its name.
# JAX's, or where its derivative is wrong, the runtime's (MathFunction.jax_runtime).
_JAX_FUNCTIONS = {function.name: path for function in fn.REGISTRY if (path := function.jax_runtime or function.jax)}
_JAX_RUNTIME = frozenset(function.jax_runtime for function in fn.REGISTRY if function.jax_runtime)
# torch's, or where its op is wrong or lacks a derivative, the runtime's (MathFunction.torch_runtime).
_TORCH_FUNCTIONS = {
    function.name: path for function in fn.REGISTRY if (path := function.torch_runtime or function.torch)
}
_TORCH_RUNTIME = frozenset(function.torch_runtime for function in fn.REGISTRY if function.torch_runtime)
# The frameworks' own, where the runtime mends one: what autodiff of a forward written with the frameworks'
# ops computes (the accuracy check's baseline); the runtime's only where the framework has none.
_JAX_OWN = {function.name: path for function in fn.REGISTRY if (path := function.jax or function.jax_runtime)}
_TORCH_OWN = {function.name: path for function in fn.REGISTRY if (path := function.torch or function.torch_runtime)}
_MATH_FUNCTIONS = {function.name: function.math for function in fn.REGISTRY if function.math}
# The same of static inputs: the runtime's IEEE versions, which return inf and nan where math raises.
_NUMBER_FUNCTIONS = {name: "_numbers." + path.removeprefix("math.") for name, path in _MATH_FUNCTIONS.items()}

# torch's softplus (forward and backward) returns x itself, and a gradient of
# 1, above `threshold` (20 by default), an error of exp(-20) ~ 2e-9; past 40
# that error is below float64's.
SOFTPLUS_THRESHOLD = 40.0

# silu's backward kernel, called through a runtime helper: autograd cannot differentiate it.
SILU_BACKWARD_IMPORT = Import("._native", "silu_backward")
TANH_BACKWARD_IMPORT = Import("._native", "tanh_backward")

# A gradient (torch) or a tangent (JAX) summed over the terms present (functions.cotangent_sum), the runtime's.
SUMMED_LIKE_IMPORT = Import("._function", "summed_like")
JAX_SUMMED_LIKE_IMPORT = Import("._util", "summed_like")
# An absent tangent read as torch's efficient zero (plan.torch's jvp of several inputs).
TANGENT_OR_ZERO_IMPORT = Import("._native", "tangent_or_zero")

# The power of two that a homogeneous expression's inputs are scaled by (functions.binade), the runtime's.
BINADE_IMPORT = Import("._util", "binade")
# A product whose order of operations under- or overflows on the way (functions.power_product), the runtime's.
POWER_PRODUCT_IMPORT = Import("._util", "power_product")
# erfcx's derivatives from x = 8 (functions.erfcx_series), the runtime's.
ERFCX_SERIES_IMPORT = Import("._util", "erfcx_series")
# i0e's and i1e's derivatives beyond |x| = 25 (functions.bessel_ie_series), the runtime's.
BESSEL_IE_SERIES_IMPORT = Import("._util", "bessel_ie_series")
# log1p(z) - z without its cancellation (functions.log1pmx), the runtime's.
LOG1PMX_IMPORT = Import("._util", "log1pmx")

# Functions whose op is wrong or lacks a derivative, mended by the runtime (MathFunction.torch_runtime, jax_runtime).
SPECIAL_MODULE = "._special"
# The runtime functions of a module of their own, by name: beta's partial, whose cases (`_beta_cases.py`) only a
# package that calls it ships.
RUNTIME_MODULES = {"beta_slope": "._beta"}

# A rational power's exact root (x**(2/3) is nth_root(x, 3)**2), the runtime's: differentiated by its stated
# derivative, in JAX a custom_jvp of its helpers, in torch a Function of the mended functions.
NTH_ROOT_IMPORT = Import("._util", "nth_root")
TORCH_NTH_ROOT_IMPORT = Import(SPECIAL_MODULE, "nth_root")
# torch's power_product is an autograd.Function with its stated partials, beside the other such functions.
TORCH_POWER_PRODUCT_IMPORT = Import(SPECIAL_MODULE, "power_product")

# A quotient of arrays whose JAX derivative in the divisor is -(a / b) / b (JAX's own: -a * b**-2, inf * 0 where
# b**2 under- or overflows), the runtime's.
QUOTIENT_IMPORT = Import("._util", "quotient")


# What Python float arithmetic can print: the `math` functions and conditionals (MathFunction.numbers_alone).
# `added`, a cancelling pair summed first (computation.sharing), is Python's `+` of what it adds.
_SCALAR_FUNCTIONS = frozenset(f.name for f in fn.REGISTRY if f.numbers_alone in ("math", "python")) | {"added"}


def printed_terms(total: sp.Add) -> list[sp.Expr]:
    """The terms of `total` in the order the array printers add them, left to right.

    A negated first term and a second that is not swap places: `x - t0`, one operation (and the same number),
    where `-t0 + x` is a negation and a sum, two kernels in eager torch."""
    terms = summation_order(total)
    if len(terms) >= 2 and terms[0].could_extract_minus_sign() and not terms[1].could_extract_minus_sign():
        terms[0], terms[1] = terms[1], terms[0]
    return terms


#: Operators the printers write as sympy does, and how tightly each binds.
_OPERATOR_BINDINGS: tuple[tuple[type, int], ...] = (
    (sp.Add, PRECEDENCE["Add"]),
    (sp.core.relational.Relational, PRECEDENCE["Relational"]),
    (sp.And, PRECEDENCE["BitwiseAnd"]),  # `(x > 0) & (y > 0)`
    (sp.Or, PRECEDENCE["BitwiseOr"]),
    (sp.Not, PRECEDENCE["Add"]),  # `~x`: a unary operator, looser than a power
)


def _power_of_two_text(value: float) -> bool:
    """Whether `float_text` writes `value` as a power `2.0**k`."""
    return abs(math.frexp(value)[0]) == 0.5 and "e" in repr(value)


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def float_text(value: float) -> str:
    """`value` as Python source, exactly: its shortest repr, but a power of two that repr writes with an exponent
    as `2.0**k` (`2.0**-120`, not 7.52316384526264e-37: the search's thresholds, the points of a branch's own
    region and the scalings it prints are powers of two, and their digits would hide it)."""
    if _power_of_two_text(value):
        return f"{'-' if value < 0 else ''}2.0**{math.frexp(value)[1] - 1}"
    return repr(value)


class _ArrayCode(PrintedOnce):
    """What both array printers (and the constant printer) print alike."""

    functions: ClassVar[dict[str, str]] = {}
    #: The function that tests a number for finiteness (`isfinite`).
    finite_test: ClassVar[str] = "math.isfinite"
    # The names in `functions` that are the runtime's own (`_special.py`: MathFunction.jax_runtime, torch_runtime).
    runtime: ClassVar[frozenset[str]] = frozenset()
    module_imports_: set[Import]

    def __init__(self, own: Mapping[str, str] | None = None) -> None:
        super().__init__({"fully_qualified_modules": True})  # type: ignore[call-arg]
        self.module_imports_ = set()
        # How the module spells the modules, helpers and builtins it reads (`Rule.own_names`).
        self.own: Mapping[str, str] = own or {}

    def _spelled(self, path: str) -> str:
        """`path` (`torch.special.erfc`, `silu_backward`, `max`) as the module spells its first name."""
        root, dot, rest = path.partition(".")
        return self.own.get(root, root) + dot + rest

    def _record(self, path: str) -> str:
        if path in self.runtime:
            self.module_imports_.add(Import(RUNTIME_MODULES.get(path, SPECIAL_MODULE), path))
        else:
            self.module_imports_.add(_IMPORTS[path.rsplit(".", 1)[0]])
        return self._spelled(path)

    def _module_format(self, fqn: str, register: bool = True) -> str:
        # sympy's own methods name functions through here (`abs`, `max`, `math.fmod`).
        return self._spelled(fqn)

    # Whether a term's partial is computed only where its cotangent is present (`None if c is None else c * p`):
    # eager torch runs a kernel per operation, where JAX under jit computes nothing no present tangent reads.
    lazy_terms: ClassVar[bool] = False
    present: frozenset[str] = frozenset()  # cotangents present whenever the code runs

    def _print_cotangent_term(self, expr: fn.cotangent_term) -> str:
        # `(c, p)`, which the runtime's summed_like multiplies where c is present; `c` alone where p is 1.  Eager,
        # a partial that costs a kernel is computed only where its cotangent is present, unless it always is.
        cotangent, partial = expr.args
        if partial == 1:
            return self._print(cotangent)
        if self.lazy_terms and not partial.is_Atom and str(cotangent) not in self.present:
            product = self._print(sp.Mul(cotangent, partial, evaluate=False))
            return f"None if {self._print(cotangent)} is None else {product}"
        return f"({self._print(cotangent)}, {self._print(partial)})"

    def _print_cotangent_product(self, expr: fn.cotangent_product) -> str:
        cotangent, product = expr.args
        return f"None if {self._print(cotangent)} is None else {self._print(product)}"

    def _helper_call(self, helper: Import, *args: sp.Basic) -> str:
        """A call of the runtime's `helper` (imported by name) on `args`."""
        assert helper.name is not None
        self.module_imports_.add(helper)
        return f"{self._spelled(helper.name)}({', '.join(self._print(a) for a in args)})"

    def _call(self, path: str, *args: sp.Basic, fixed: Sequence[str] = ()) -> str:
        """A call of `path` on `args`, then the `fixed` arguments, already code (`threshold=40.0`)."""
        return f"{self._record(path)}({', '.join([*(self._argument(a) for a in args), *fixed])})"

    def _argument(self, arg: sp.Basic) -> str:
        # Every math function takes floats: an integer literal would be an
        # integer array to JAX, whose custom rules (xlogy's) then give it a
        # float0 tangent at second order.
        if isinstance(arg, sp.Integer):
            return f"{int(arg)}.0"
        return self._print(arg)

    # -- numbers

    def _print_Integer(self, expr: sp.Integer) -> str:
        value = int(expr)
        if -(2**63) <= value < 2**63:
            return str(value)
        # Beyond int64 the frameworks refuse a Python int (JAX: OverflowError);
        # next to float arrays it is the float it rounds to, as NumPy would take it.
        if abs(value) < 2**1024:
            return repr(float(value))
        return f"{'-' if value < 0 else ''}{self._spelled('float')}('inf')"

    def _print_Rational(self, expr: sp.Rational) -> str:
        return f"{self._print_Integer(sp.Integer(expr.p))} / {self._print_Integer(sp.Integer(expr.q))}"

    def _print_Half(self, expr: sp.Rational) -> str:
        return "1 / 2"

    def _print_Float(self, expr: sp.Float) -> str:
        return float_text(float(expr))

    def _print_NaN(self, expr: sp.Basic) -> str:
        return self._record("math.nan")

    def _print_Infinity(self, expr: sp.Basic) -> str:
        return self._record("math.inf")

    def _print_NegativeInfinity(self, expr: sp.Basic) -> str:
        return "-" + self._record("math.inf")

    def _print_Pi(self, expr: sp.Basic) -> str:
        return self._record("math.pi")

    def _print_Exp1(self, expr: sp.Basic) -> str:
        return self._record("math.e")

    def _print_BooleanTrue(self, expr: sp.Basic) -> str:
        return "True"

    def _print_BooleanFalse(self, expr: sp.Basic) -> str:
        return "False"

    #: Rational powers through the runtime's nth_root (arrays); Python floats keep `**`.
    exact_roots = True
    #: Where the runtime's nth_root is imported from.
    nth_root_import: ClassVar[Import] = NTH_ROOT_IMPORT
    #: Where the runtime's power_product is imported from.
    power_product_import: ClassVar[Import] = POWER_PRODUCT_IMPORT
    #: Symbols that stand for Python numbers (static inputs), not arrays.
    scalars: frozenset[str] = frozenset()
    #: Symbols that stand for boolean arrays, which neither framework
    #: negates or (torch) subtracts: they are read as integers.
    booleans: frozenset[str] = frozenset()
    as_integer = ""

    #: Symbols printed under another name: a shared subexpression an output merely copies, as the output.
    renamed: Mapping[str, str] = {}

    def _print_Symbol(self, expr: sp.Symbol) -> str:
        if expr.name in self.renamed:
            return self.renamed[expr.name]
        text = super()._print_Symbol(expr)  # type: ignore[misc]
        return f"{text}{self.as_integer.format(int=self._spelled('int'))}" if expr.name in self.booleans else text

    def _of_scalars(self, expr: sp.Expr) -> bool:
        """A function of static inputs only, where `math` has every function: Python float arithmetic.

        torch.exp(beta) of the Python float beta raises; math.exp(beta) is the number.
        """
        if not self.scalars:
            # No static input: no expression is one (its free symbols are a walk of the whole subexpression, asked
            # of every subexpression printed, and beta's code by cases is thousands).
            return False
        symbols = expr.free_symbols
        return (
            bool(symbols)
            and all(s.name in self.scalars for s in symbols)
            and all(f.func.__name__ in _SCALAR_FUNCTIONS for f in expr.atoms(sp.Function))
        )

    def _print_constant(self, expr: sp.Expr) -> str:
        """A number such as sqrt(2)/2 as Python float arithmetic, readable where `math` has the functions."""
        value = expr.evalf(30) if expr.is_number else None
        if value is not None and value.is_Float and abs(value) > sys.float_info.max:
            # Python's math raises OverflowError there (math.exp(729)); the frameworks' float is inf.
            return self._print(sp.oo if value > 0 else -sp.oo)
        root = one_square_root(expr)
        if root is not None:
            negative, numerator, denominator = root
            if denominator == 1:
                text = self._math_sqrt(numerator)
            elif numerator == 1:
                text = f"1 / {self._math_sqrt(denominator)}"
            else:
                below = self._constant_text(denominator)
                below = below if denominator.is_Atom else f"({below})"
                text = f"{self._record('math.sqrt')}({self._constant_text(numerator)} / {below})"
            return f"-{text}" if negative else text
        if all(f.func.__name__ in _SCALAR_FUNCTIONS for f in expr.atoms(sp.Function)):
            return self._constant_text(expr)
        return float_text(float(expr.evalf(30)))

    def _constant_text(self, expr: sp.Expr) -> str:
        # A number is evaluated here and cannot raise; Python arithmetic of a static input can.
        printer = (_StaticPrinter if expr.free_symbols else _ConstantPrinter)(self.own)
        printer.renamed = self.renamed  # a static read from ctx is read so in its Python arithmetic too
        text = printer.doprint(expr)
        self.module_imports_ |= printer.module_imports_
        return text

    def _math_sqrt(self, expr: sp.Expr) -> str:
        return f"{self._record('math.sqrt')}({self._constant_text(expr)})"

    def _prints_as_constant(self, expr: Any) -> bool:
        """Whether `_print` writes `expr` as a constant (Python arithmetic of numbers and scalar statics)."""
        return (
            isinstance(expr, sp.Expr)
            and not isinstance(self, _ConstantPrinter)
            and not expr.is_Atom
            # Asked last: sympy's assumptions are the costliest of these, and most subexpressions are neither.
            and (expr.is_number or self._of_scalars(expr))
            and expr.is_real is not False
        )

    def _print_uncached(self, expr: Any, **kwargs: Any) -> str:
        if self._prints_as_constant(expr):
            return self._print_constant(expr)
        return super()._print_uncached(expr, **kwargs)

    # -- arithmetic

    def _as_ordered_terms(self, expr: sp.Expr, order: Any = None) -> list[sp.Expr]:
        # A sum is computed left to right: a pair of like functions with opposite coefficients goes first, so
        # that it cancels before anything is added to it (logits - digamma(k + 1) + digamma(11 - k) at k = 5,
        # logits = 1e-6 keeps logits whole only as digamma(11 - k) - digamma(k + 1) + logits).
        # One order for the printers and the torch in-place writer, which adds the same terms in place.
        return printed_terms(expr)

    def _print_Pow(self, expr: sp.Pow, rational: bool = False) -> str:
        base, exponent = expr.as_base_exp()
        if self._square_of_name(expr):
            return f"{self._print(base)} * {self._print(base)}"
        if exponent == sp.S.Half:
            return self._print_sqrt(base)
        if exponent == -sp.S.Half:
            return self._print_rsqrt(base)
        if exponent.is_Integer and exponent < -2 and base.is_Symbol:
            # x**-3, not 1 / x**3: the frameworks differentiate the quotient as -(1 / x**6) * 3x**2, 0 * inf = nan
            # where x**3 overflows (an asymptotic series in 1/x at the largest floats); x**-3's derivative is
            # -3 x**-4, 0 there.
            return f"{self._print(base)}**{exponent}"
        if exponent.is_Integer and exponent < 0:
            return self._print_reciprocal(base**-exponent)
        if exponent.is_Rational and exponent.q > 2 and self.exact_roots:
            # x**(p/q) as nth_root(x, q)**p: pow's rounded exponent p/q costs |ln x| ulps (100 at 1e300).
            # A negative one as the root's power, not a quotient by it: the frameworks differentiate 1 / r**2 as
            # -(1 / r**4) * 2 r r', inf * 0 = nan at x = inf (r' = 0), where r**-2's derivative is -2 r**-3 r', 0.
            self.module_imports_.add(self.nth_root_import)
            root = f"{self._spelled('nth_root')}({self._print(base)}, {exponent.q})"
            return root if exponent.p == 1 else f"{root}**{exponent.p}"
        base_text = self.parenthesize(base, PRECEDENCE["Pow"] + 1)
        if exponent.is_Integer:
            return f"{base_text}**{exponent}"
        exponent_text = self._print(exponent)
        if not (exponent.is_Atom and not exponent.is_Rational):
            exponent_text = f"({exponent_text})"
        return f"{base_text}**{exponent_text}"

    def _print_sqrt(self, base: sp.Expr) -> str:
        return self._call(self.functions["sqrt"], base)

    def _print_reciprocal(self, denominator: sp.Expr) -> str:
        return f"1 / {self.parenthesize(denominator, PRECEDENCE['Mul'] + 1)}"

    def _reciprocal_binding(self, denominator: sp.Expr) -> int:
        return PRECEDENCE["Mul"]  # `1 / x**2`

    def _print_rsqrt(self, base: sp.Expr) -> str:
        return self._call(self.functions["rsqrt"], base)

    def _print_polygamma(self, expr: sp.polygamma) -> str:
        order, x = expr.args
        if order == 0:
            return self._call(self.functions["digamma"], x)
        return f"{self._record(self.functions['polygamma'])}({int(order)}, {self._print(x)})"

    def _print_gamma_sign(self, expr: fn.gamma_sign) -> str:
        return self._print(fn.sign_of_gamma(expr.args[0]))

    def _print_isfinite(self, expr: fn.isfinite) -> str:
        return f"{self._record(self.finite_test)}({self._print(expr.args[0])})"

    def _print_where_finite(self, expr: fn.where_finite) -> str:
        t, a, b = expr.args
        return self._piece(fn.isfinite(t), a, self._print(b))

    def _print_binade(self, expr: fn.binade) -> str:
        self.module_imports_.add(BINADE_IMPORT)
        return f"{self._spelled('binade')}({self._print(expr.args[0])})"

    def _print_power_product(self, expr: fn.power_product) -> str:
        self.module_imports_.add(self.power_product_import)
        pairs = ", ".join(f"{self._print(b)}, {int(k)}" for b, k in zip(expr.args[0::2], expr.args[1::2], strict=True))
        return f"{self._spelled('power_product')}({pairs})"

    def _print_erfcx_series(self, expr: fn.erfcx_series) -> str:
        self.module_imports_.add(ERFCX_SERIES_IMPORT)
        order, x = expr.args
        return f"{self._spelled('erfcx_series')}({int(order)}, {self._print(x)})"

    def _print_bessel_ie_series(self, expr: fn.bessel_ie_series) -> str:
        self.module_imports_.add(BESSEL_IE_SERIES_IMPORT)
        nu, order, x = expr.args
        return f"{self._spelled('bessel_ie_series')}({int(nu)}, {int(order)}, {self._print(x)})"

    def _print_log1pmx(self, expr: fn.log1pmx) -> str:
        self.module_imports_.add(LOG1PMX_IMPORT)
        return f"{self._spelled('log1pmx')}({self._print(expr.args[0])})"

    def _print_added(self, expr: added) -> str:
        # A chain of them (`summed_in_order`) is Python's left-to-right sum: `a + b - c` adds a and b first.
        left, right = expr.args
        if not isinstance(left, added) and left.could_extract_minus_sign() and not right.could_extract_minus_sign():
            left, right = right, left  # `b - a`, the same number as `-a + b`
        text = self._print(left) if isinstance(left, added) else self.parenthesize(left, PRECEDENCE["Add"], strict=True)
        if right.could_extract_minus_sign():
            text = f"{text} - {self.parenthesize(-right, PRECEDENCE['Add'])}"
        else:
            text = f"{text} + {self.parenthesize(right, PRECEDENCE['Add'])}"
        # sympy's sum reads a term's leading `-` as its sign and negates the rest: `-a - b` is a whole here.
        return f"({text})" if text.startswith("-") else text

    def _print_divided(self, expr: fn.divided) -> str:
        x, s = expr.args
        mul = PRECEDENCE["Mul"]
        if (scale := fn.undone_scale(s)) is not None:
            # x / (1 / t), a scaling undone: x * t, the same number where t is a power of two.
            return f"{self._dividend(x)} * {self.parenthesize(scale, mul + 1)}"
        return f"{self._dividend(x)} / {self.parenthesize(s, mul + 1)}"

    def _dividend(self, x: sp.Expr) -> str:
        """`x` as the left operand of `x / s`: bare where Python computes it first anyway.

        `*` and `/` group from the left, and a unary minus binds tighter than either: `y / h / h` is
        `(y / h) / h`, `-y / h` is `(-y) / h` (a negation is exact), the same numbers in the same order.
        """
        negated = x.is_Mul and x.could_extract_minus_sign()
        if self.binding(-x if negated else x) >= PRECEDENCE["Mul"]:
            return self._print(x)
        return f"({self._print(x)})"

    def parenthesize(self, item: Any, level: int, strict: bool = False) -> str:
        # sympy ranks a call such as divided(x, s) above every operator: printed `x / s`, it is computed whole
        # wherever an operator holds it ((x / s)**2; -a * (x / s), where sympy asks a negative product's
        # factors at the level of a sum, and -a * x / s would round another way), bare where nothing does
        # (`return t3 / t4, t3`, a call's argument).
        return f"({self._print(item)})" if self._parenthesized(item, level, strict) else self._print(item)

    def _parenthesized(self, item: sp.Basic, level: int, strict: bool = False) -> bool:
        """Whether `parenthesize(item, level, strict)` writes parentheses around `item`."""
        if isinstance(item, fn.divided) or (self._square_of_name(item) and level >= PRECEDENCE["Add"]):
            return True
        if isinstance(item, sp.UnevaluatedExpr) and item.args[0].is_Mul and level >= PRECEDENCE["Add"]:
            return True  # a quotient kept whole (`_print_power_of_a_quotient`): Python multiplies left to right
        if isinstance(item, sp.Float) and level >= PRECEDENCE["Pow"] and _power_of_two_text(float(item)):
            return True  # a power of two as a base or exponent: (2.0**-120)**2
        # sympy's StrPrinter.parenthesize: an equal precedence too, unless `strict`.
        return precedence(item) < level or (not strict and precedence(item) <= level)

    # -- how tightly the printed code binds

    def binding(self, expr: sp.Basic) -> int:
        """How tightly the code `_print` writes for `expr` binds (rulegen.plan.code.PRIMARY and its scale).

        Read off the expression as `_print` dispatches it, never off the
        text.  A primary only where the printer writes a name or a call;
        where it is unsure, looser, which costs parentheses, never a wrong
        order (`tests/plan/test_binding.py` holds it to Python's grammar).
        """
        if self._prints_as_constant(expr):
            return self._constant_binding(expr)
        if expr.is_Atom:
            return self._atom_binding(expr)
        fixed = next((level for kind, level in _OPERATOR_BINDINGS if isinstance(expr, kind)), None)
        if fixed is not None:
            return fixed
        if isinstance(expr, sp.Mul):
            return self._product_binding(expr)
        if isinstance(expr, sp.Pow):
            return self._power_binding(expr)
        if isinstance(expr, sp.Piecewise):
            (value, cond), *others = expr.args
            # The first piece is the outermost `_piece`; a lone one that always holds is its value.
            return self.binding(value) if cond == sp.true and not others else self._piece_binding(cond)
        return self._function_binding(expr)

    def _atom_binding(self, expr: sp.Basic) -> int:
        """How tightly a name or a number binds as printed."""
        if isinstance(expr, sp.Symbol | sp.NumberSymbol) or expr in (sp.nan, sp.oo):
            return PRIMARY  # a name, `ctx.beta`, `x.int()`; `math.pi`, `math.nan`, `math.inf`
        if isinstance(expr, sp.Integer):
            return LITERAL if 0 <= expr < 2**1024 else PRECEDENCE["Add"] if expr < 0 else PRIMARY
        if isinstance(expr, sp.Float):
            if float(expr) < 0:
                return PRECEDENCE["Add"]  # `-0.5`, `-2.0**-120`: a unary minus
            return PRECEDENCE["Pow"] if _power_of_two_text(float(expr)) else LITERAL
        if isinstance(expr, sp.Rational):
            return PRECEDENCE["Mul"]  # `1 / 2`
        if expr == -sp.oo:
            return PRECEDENCE["Add"]  # `-math.inf`
        return LITERAL if expr in (sp.true, sp.false, sp.I) else LOOSEST

    def _constant_binding(self, expr: sp.Expr) -> int:
        """How tightly `_print_constant`'s Python arithmetic binds: a primary only as one `math.sqrt(n)`."""
        root = one_square_root(expr)
        if root is not None and not root[0] and root[2] == 1:
            return PRIMARY
        return LOOSEST

    def _product_binding(self, expr: sp.Mul) -> int:
        unit = float_unit(expr)
        if unit is not None and any(s.name not in self.scalars for s in unit[1].free_symbols):
            sign, rest = unit
            if sign < 0:
                return PRECEDENCE["Add"]  # `-x`
            return (
                self.binding(rest)
                if rest.is_Mul or not self._parenthesized(rest, PRECEDENCE["Mul"], strict=True)
                else PRIMARY
            )
        if scaled_product(expr, self.scalars) is not None:
            return PRECEDENCE["Mul"]
        return precedence(expr)  # `a * b / c`, `-a * b`: a product, or a negated one at a sum's level

    def _power_binding(self, expr: sp.Pow) -> int:
        base, exponent = expr.as_base_exp()
        if self._square_of_name(expr):
            return PRECEDENCE["Mul"]  # `x * x`
        if exponent in (sp.S.Half, -sp.S.Half):
            return PRIMARY  # sqrt(x), rsqrt(x)
        if exponent.is_Integer and exponent < -2 and base.is_Symbol:
            return PRECEDENCE["Pow"]
        if exponent.is_Integer and exponent < 0:
            return self._reciprocal_binding(base**-exponent)
        if exponent.is_Rational and exponent.q > 2 and self.exact_roots:
            return PRIMARY if exponent.p == 1 else PRECEDENCE["Pow"]
        return PRECEDENCE["Pow"]

    def _piece_binding(self, cond: sp.Basic) -> int:
        """How tightly the code `_piece` writes for a piece under `cond` binds: a `where` call."""
        return PRIMARY

    #: Registered functions the printers write as an operator, not a call: how tightly that binds.
    operator_functions: ClassVar[dict[str, int]] = {
        "divided": PRECEDENCE["Mul"],  # `x / s`, `x * t`
        "added": PRECEDENCE["Add"],  # `a + b`
        "Heaviside": PRECEDENCE["Mul"],  # `(sign(x) + 1) / 2`
        "cotangent_term": LOOSEST,  # `(c, p)`, `None if c is None else c * p`
        "cotangent_product": LOOSEST,  # `None if c is None else e`
    }
    #: Registered functions the printers write as another expression, by the function that gives it.
    rewritten: ClassVar[dict[str, Callable[[sp.Basic], sp.Basic]]] = {
        "gamma_sign": lambda e: fn.sign_of_gamma(e.args[0]),
    }

    def _function_binding(self, expr: sp.Basic) -> int:
        name = type(expr).__name__
        if isinstance(expr, sp.UnevaluatedExpr) or (name == "cotangent_term" and expr.args[1] == 1):
            return self.binding(expr.args[0])  # printed as its argument (`c` of `(c, 1)`)
        if name in self.rewritten:
            return self.binding(self.rewritten[name](expr))
        if name in self.operator_functions:
            return self.operator_functions[name]
        # A registered function is a call (`_call`, `_helper_call`, `_print_Max`'s nested calls ...); any other,
        # sympy's printing, is not known here to be one.
        return PRIMARY if name in fn.BY_NAME else LOOSEST

    #: Whether a square of a name is printed `x * x` (`_square_of_name`); the constant printer's stays `x**2`.
    squares_as_products: ClassVar[bool] = True

    def _square_of_name(self, item: Any) -> bool:
        """Whether `item` is the square of a name (an input, a temporary), printed `x * x`, whole in a product.

        Both frameworks differentiate `x**2` as `2 * x`, which overflows at the largest floats where the
        derivative it multiplies is 0: atan's second derivative, the autodiff of 1 / (x**2 + 1), was
        -0 * inf = nan at x = max, erf's (of exp(-x**2)) too.  The product `x * x` is the same number,
        and its derivative `g * x + g * x` is -0 there.
        """
        return self.squares_as_products and square_of_a_name(item)

    def _print_DiracDelta(self, expr: sp.DiracDelta) -> str:
        # The frameworks' own autodiff differentiates a kink to 0 away from it.
        return self._call(self.functions["DiracDelta"], expr.args[0])

    def _print_one_plus_erf(self, expr: fn.one_plus_erf) -> str:
        # erfc(-u), never 1 + erf(u), whose every bit cancels where erf(u) nears -1 (x * Phi(x) below x = -5).
        return self._call(self.functions["erfc"], -expr.args[0])

    def _print_Mul(self, expr: sp.Mul) -> str:
        unit = float_unit(expr)
        if unit is not None and any(s.name not in self.scalars for s in unit[1].free_symbols):
            # A rule's 0.5 * 2 is sympy's Float 1.0: an array's product with it is the array.
            sign, rest = unit
            body = self._print(rest) if rest.is_Mul else self.parenthesize(rest, PRECEDENCE["Mul"])
            return body if sign > 0 else f"-{body}"
        numbers = [f for f in expr.args if f.is_number]
        if len(numbers) < len(expr.args) and (len(numbers) > 1 or (numbers and not numbers[0].is_Rational)):
            # sympy keeps 2, sqrt(2) and 1/sqrt(pi) apart, and eager torch
            # would make a pass over the array for each: one Python number.
            rest = sp.Mul(*(f for f in expr.args if not f.is_number))
            root = one_square_root(sp.Mul(*numbers))
            if root is not None and not root[0] and root[1] == 1 and root[2] != 1:
                # x / math.sqrt(2 * math.pi), as a person writes it, not (1 / math.sqrt(2 * math.pi)) * x;
                # a negative one stays one factor: `-x / c` would be two passes in eager torch.
                body = self._print(rest) if rest.is_Mul else self.parenthesize(rest, PRECEDENCE["Mul"])
                return f"{body} / {self._math_sqrt(root[2])}"
            constant = self._print_constant(sp.Mul(*numbers))
            one_call = root is not None and (root[1] != 1 or root[2] == 1)  # math.sqrt(...), not 1 / math.sqrt(...)
            if not one_call and not _one_factor(sp.Mul(*numbers)):
                constant = f"({constant})"
            body = self._print(rest) if rest.is_Mul else self.parenthesize(rest, PRECEDENCE["Mul"])
            return f"{constant} * {body}"
        coefficient, rest = expr.as_coeff_Mul()
        if coefficient.is_Rational and not coefficient.is_Integer and rest != 1:
            body = self._print_Mul(rest) if isinstance(rest, sp.Mul) else self.parenthesize(rest, PRECEDENCE["Mul"])
            return self._print_rational_times(coefficient, body, first=isinstance(rest, sp.Mul))
        return self._print_quotient_in_order(expr) or super()._print_Mul(expr)  # type: ignore[misc]

    def _print_rational_times(self, coefficient: sp.Rational, body: str, *, first: bool = False) -> str:
        """p/q times `body`, never `p * body / q`: p * x overflows where the product does not (a Stirling series'
        `691 * x / 32760` at x = 1.5e37 in float32).  One rounding where p/q or q/p is a float (`0.75 * x`, `x / 1.5`,
        `x / 3`), as the search's numpy measures it; else the constant's rounding and the product's.  A power of two
        below 1 times a product (`first`) multiplies first, exactly: `t / s / s / 2` overflows where the value is
        in range (a normal KL's `(m - n)**2/(2 s**2)`, 2e38 at m - n = 1.1e19, s = 0.54 in float32), `0.5 * t / s / s`
        only where it is not."""
        p, q = coefficient.p, coefficient.q
        sign = "-" if p < 0 else ""
        if first and abs(p) == 1 and _power_of_two(q):
            return f"{sign}{float_text(1 / q)} * {body}"
        if abs(p) == 1 or (_power_of_two(abs(p)) and Fraction(q / abs(p)) == Fraction(q, abs(p))):
            # Through `_print_Integer`: a denominator of 2**100 is the float it rounds to, not an int torch refuses.
            divisor = self._print_Integer(sp.Integer(q)) if abs(p) == 1 else float_text(q / abs(p))
            return f"{sign}{body} / {divisor}"
        if _power_of_two(q) and Fraction(p / q) == Fraction(p, q):
            return f"{float_text(p / q)} * {body}"
        numerator, denominator = (self._print_Integer(sp.Integer(n)) for n in (p, q))
        return f"({numerator} / {denominator}) * {body}"

    def _print_reordered(self, expr: sp.Mul) -> str | None:
        """A power of a quotient taken whole, or an integer times a quotient or a product multiplied last, in every
        printer's order (`power_of_a_quotient`, `scaled_product`); None for another product."""
        powered = power_of_a_quotient(expr)
        if powered is not None:
            return self._print_power_of_a_quotient(*powered)
        scaled = scaled_product(expr, self.scalars)
        if scaled is not None:
            return self._print_scaled_product(*scaled)
        return None

    def _print_quotient_in_order(self, expr: sp.Mul) -> str | None:
        """A quotient in the order that over- or underflows only where its value does; None for another product."""
        reordered = self._print_reordered(expr)
        if reordered is not None:
            return reordered
        squared = divided_by_a_square(expr)
        if squared is None:
            return None
        # a / b**2 as (a / b) / b: as many roundings, and b * b over- or underflows where the quotient does not
        # ((p_loc - q_loc) / q_scale**2 at 6.6e226 and 1.5e159 is 3.1e-92, not 0).
        rest, base = squared
        body = self._print(rest) if rest.is_Mul or rest.is_Atom else self.parenthesize(rest, PRECEDENCE["Mul"])
        divisor = self.parenthesize(base, PRECEDENCE["Mul"] + 1)
        return f"{body} / {divisor} / {divisor}"

    def _print_power_of_a_quotient(self, rest: sp.Expr, u: sp.Expr, v: sp.Expr, k: int, e: int) -> str:
        """rest * u**k / v**(k + e) as `quotient_power` computes it, each quotient one product this printer writes
        its way, unevaluated: a product rebuilt around it (sympy's Mul) distributes a power of a product."""

        def divide(a: sp.Expr, b: sp.Expr) -> sp.Expr:
            return sp.UnevaluatedExpr(sp.Mul(a, sp.Pow(b, -1), evaluate=False))

        return self._print(quotient_power(rest, u, v, k, e, divide))

    def _print_scaled_product(self, coefficient: sp.Integer, quotient: sp.Expr) -> str:
        """k * (r): an integer times a quotient or a product multiplies last (`scaled_product`)."""
        return f"{self._print(coefficient)} * {self.parenthesize(quotient, PRECEDENCE['Mul'])}"

    # -- functions

    def _print_Function(self, expr: sp.Function) -> str:
        name = type(expr).__name__
        if name not in self.functions:
            raise sp.printing.codeprinter.PrintMethodNotImplementedError(f"{type(self).__name__} cannot print {name}")
        return self._call(self.functions[name], *expr.args)

    def _print_registered(self, expr: sp.Function) -> str:
        # Dispatched at call time, so that a printer's own _print_Function (torch's) applies.
        return self._print_Function(expr)

    #: The function that promotes several arrays' dtypes (see _float_dtype).
    result_type = ""

    def _float_dtype(self, anchors: Sequence[str]) -> str:
        """The dtype of a rule's float arrays, given their names (see rulegen.plan.forms), as code."""
        if not anchors:
            return self._default_float()
        if len(anchors) == 1:
            return f"{anchors[0]}.dtype"
        return self._promoted_dtype(anchors)

    def _promoted_dtype(self, anchors: Sequence[str]) -> str:
        return f"{self._record(self.result_type)}({', '.join(anchors)})"

    def _default_float(self) -> str:
        raise NotImplementedError

    def _print_in_float(self, expr: fn.in_float) -> str:
        value, *anchors = expr.args
        names = [self._print(a) for a in anchors]
        if value.is_number or self._of_scalars(value):
            return self._number_in_float(self._print(value), names)
        text = value.name if isinstance(value, sp.Symbol) else self.parenthesize(value, PRECEDENCE["Atom"])
        return f"{text}{self._cast(self._float_dtype(names))}"

    def _number_in_float(self, number: str, anchors: Sequence[str]) -> str:
        raise NotImplementedError

    def _cast(self, dtype: str) -> str:
        raise NotImplementedError

    def _print_Heaviside(self, expr: sp.Heaviside) -> str:
        # Heaviside(0) is 1/2 in sympy and in the frameworks' own derivative
        # of maximum at a tie; (sign(x) + 1) / 2 is exactly that, with no
        # tensors to build for the constants.
        return f"({self._print(sp.sign(expr.args[0], evaluate=False))} + 1) / 2"

    def _print_Relational(self, expr: sp.core.relational.Relational) -> str:
        op = {"==": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}[expr.rel_op]
        prec = PRECEDENCE["Relational"]
        return f"{self.parenthesize(expr.lhs, prec)} {op} {self.parenthesize(expr.rhs, prec)}"

    def _bitwise_operand(self, arg: sp.Basic) -> str:
        # `&`, `|` and `~` bind tighter than comparisons: a comparison needs its parentheses, a name or a call
        # does not.
        return self._print(arg) if isinstance(arg, (sp.Symbol, fn.isfinite)) else f"({self._print(arg)})"

    def _print_And(self, expr: sp.And) -> str:
        return " & ".join(self._bitwise_operand(a) for a in expr.args)

    def _print_Or(self, expr: sp.Or) -> str:
        return " | ".join(self._bitwise_operand(a) for a in expr.args)

    def _print_Not(self, expr: sp.Not) -> str:
        return f"~{self._bitwise_operand(expr.args[0])}"

    def _print_Piecewise(self, expr: sp.Piecewise) -> str:
        *pieces, (last, otherwise) = expr.args
        if otherwise == sp.true:
            text = self._print(last)
        else:
            pieces.append((last, otherwise))
            text = self._print(sp.nan)
        for value, cond in reversed(pieces):
            text = self._piece(cond, value, text)
        return text

    def _piece(self, cond: sp.Basic, value: sp.Expr, otherwise: str) -> str:
        """`value` where `cond` holds, else the code `otherwise`."""
        return f"{self._record(self.functions['Piecewise'])}({self._print(cond)}, {self._print(value)}, {otherwise})"

    def _print_betaln(self, expr: fn.betaln) -> str:
        return self._print(fn.betaln_by_cases(*expr.args))


class _ConstantPrinter(_ArrayCode, PythonCodePrinter):
    """Python floats for numeric subexpressions (`math.sqrt(2) / 2`) and functions of static inputs."""

    functions = _MATH_FUNCTIONS
    exact_roots = False
    squares_as_products = False

    def _argument(self, arg: sp.Basic) -> str:
        return self._print(arg)  # math functions take Python ints as they are

    # Python bools, not arrays: keywords and conditional expressions.
    def _print_Not(self, expr: sp.Not) -> str:
        return f"(not {self._print(expr.args[0])})"

    def _print_And(self, expr: sp.And) -> str:
        return "(" + " and ".join(self._print(a) for a in expr.args) + ")"

    def _print_Or(self, expr: sp.Or) -> str:
        return "(" + " or ".join(self._print(a) for a in expr.args) + ")"

    def _piece(self, cond: sp.Basic, value: sp.Expr, otherwise: str) -> str:
        return f"({self._print(value)} if {self._print(cond)} else {otherwise})"

    def _print_rsqrt(self, base: sp.Expr) -> str:
        return f"1 / {self._call('math.sqrt', base)}"


class _StaticPrinter(_ConstantPrinter):
    """Python arithmetic of static inputs as the frameworks' float arrays compute it: through the runtime's
    `_numbers`, which gives inf and nan where `math.log(0.0)`, `math.exp(1000.0)`, `1 / 0.0` or
    `1e200 ** 2` raise.  Sums and products of floats never raise, and stay as they are."""

    functions = _NUMBER_FUNCTIONS

    def _print_Mul(self, expr: sp.Mul) -> str:
        numerator, denominator = sp.fraction(expr)
        if denominator.free_symbols:
            return f"{self._record('_numbers.div')}({self._print(numerator)}, {self._print(denominator)})"
        return super()._print_Mul(expr)

    def _print_Pow(self, expr: sp.Pow, rational: bool = False) -> str:
        base, exponent = expr.as_base_exp()
        if not expr.free_symbols or exponent == sp.S.Half:
            return super()._print_Pow(expr, rational)
        if exponent.could_extract_minus_sign():
            return f"{self._record('_numbers.div')}(1, {self._print(base**-exponent)})"
        return self._call("_numbers.pow", base, exponent)

    def _print_rsqrt(self, base: sp.Expr) -> str:
        return f"{self._record('_numbers.div')}(1, {self._call(self.functions['sqrt'], base)})"

    def _print_divided(self, expr: fn.divided) -> str:
        return self._call("_numbers.div", *expr.args)


class JaxArrayPrinter(_ArrayCode, JaxPrinter):
    """jax.numpy / jax.scipy.special code."""

    functions = _JAX_FUNCTIONS
    finite_test = "jnp.isfinite"
    runtime = _JAX_RUNTIME
    as_integer = ".astype({int})"

    result_type = "jnp.result_type"

    def _default_float(self) -> str:
        return self._spelled("float")  # jnp's default float: float64 with jax_enable_x64, else float32

    def _cast(self, dtype: str) -> str:
        return f".astype({dtype})"

    def _number_in_float(self, number: str, anchors: Sequence[str]) -> str:
        return f"{self._record('jnp.asarray')}({number}, dtype={self._float_dtype(anchors)})"

    def _print_cotangent_sum(self, expr: fn.cotangent_sum) -> str:
        return self._helper_call(JAX_SUMMED_LIKE_IMPORT, *expr.args)

    def _as_quotient(self, expr: Any) -> tuple[sp.Expr, sp.Expr] | None:
        """A product of arrays with array divisors among its factors, as (numerator, denominator); else None.

        A divisor of static inputs alone is a Python number, which nothing differentiates.
        """
        if not isinstance(expr, sp.Mul):
            return None

        def array(factor: sp.Expr) -> bool:
            return any(s.name not in self.scalars for s in factor.free_symbols)

        divisors = [f for f in expr.args if f.is_Pow and f.exp.is_Integer and f.exp < 0 and array(f)]
        rest = [f for f in expr.args if f not in divisors]
        if not divisors or not any(array(f) and not (f.is_Pow and f.exp.is_negative) for f in rest):
            return None
        return sp.Mul(*rest), sp.Mul(*(f.base**-f.exp for f in divisors))

    def _print_Mul(self, expr: sp.Mul) -> str:
        # a / b of arrays through the runtime's `quotient`: JAX differentiates a / b in b as -a * b**-2, whose
        # square under- or overflows where the quotient's derivative -(a / b) / b is a float (xlogy's partial
        # x / y at (0, 1e-38): 0 * inf = nan in its second derivative).
        reordered = self._print_reordered(expr)
        if reordered is not None:
            return reordered
        quotient = self._as_quotient(expr)
        if quotient is not None:
            numerator, divisor = quotient
            if square_of_a_name(divisor):  # (a / b) / b, as _ArrayCode._print_Mul divides by a square
                numerator = sp.Mul(numerator, 1 / divisor.base, evaluate=False)
                return self._helper_call(QUOTIENT_IMPORT, numerator, divisor.base)
            return self._helper_call(QUOTIENT_IMPORT, *quotient)
        return super()._print_Mul(expr)

    def _parenthesized(self, item: sp.Basic, level: int, strict: bool = False) -> bool:
        # A quotient is a call here: whole at every level (a power of one is a product: `c * quotient(u, v)**2`).
        if isinstance(item, sp.UnevaluatedExpr):
            item = item.args[0]
        whole = self._as_quotient(item) is not None and power_of_a_quotient(item) is None
        return not whole and super()._parenthesized(item, level, strict)

    def _product_binding(self, expr: sp.Mul) -> int:
        if power_of_a_quotient(expr) is not None:
            return PRECEDENCE["Mul"]  # `c * quotient(u, v)**2`
        if scaled_product(expr, self.scalars) is None and self._as_quotient(expr) is not None:
            return PRIMARY  # `quotient(a, b)`
        return super()._product_binding(expr)

    def _print_Max(self, expr: sp.Max) -> str:
        return self._nested(self.functions["Max"], expr.args)

    def _print_Min(self, expr: sp.Min) -> str:
        return self._nested(self.functions["Min"], expr.args)

    def _nested(self, path: str, args: tuple[sp.Expr, ...]) -> str:
        text = self._print(args[0])
        for arg in args[1:]:
            text = f"{self._record(path)}({text}, {self._print(arg)})"
        return text


class TorchArrayPrinter(_ArrayCode, PythonCodePrinter):
    """torch / torch.special code that accepts Python numbers where torch does not.

    It extends sympy's Python printer, the base of sympy's TorchPrinter:
    that module imports torch itself (a second at every build) and every
    method it adds is replaced here anyway.
    """

    nth_root_import = TORCH_NTH_ROOT_IMPORT
    power_product_import = TORCH_POWER_PRODUCT_IMPORT

    lazy_terms = True

    functions = _TORCH_FUNCTIONS
    finite_test = "torch.isfinite"

    def _print_sign(self, expr: sp.sign) -> str:
        # torch.sign(nan) is 0 (JAX's and C's nan): Abs's derivative and Max's at a nan were 0 and 1/2.
        # A nan of its own, not x: differentiated, the piece that is x would give 1.
        x = self._print(expr.args[0])
        x = x if isinstance(expr.args[0], sp.Symbol) else f"({x})"
        sign = self._call(self.functions["sign"], expr.args[0])
        return f"{self._record('torch.where')}({x}.isnan(), {self._record('math.nan')}, {sign})"

    runtime = _TORCH_RUNTIME
    as_integer = ".int()"

    result_type = "torch.result_type"

    def _default_float(self) -> str:
        return f"{self._record('torch.get_default_dtype')}()"

    def _cast(self, dtype: str) -> str:
        return f".to({dtype})"

    def _promoted_dtype(self, anchors: Sequence[str]) -> str:
        # torch.result_type takes two operands: a third promotes with their result.
        text = f"{self._record(self.result_type)}({anchors[0]}, {anchors[1]})"
        for anchor in anchors[2:]:
            text = f"{self._record('torch.promote_types')}({text}, {anchor}.dtype)"
        return text

    def _number_in_float(self, number: str, anchors: Sequence[str]) -> str:
        # A 0-d tensor of the arrays' dtype and device: torch.where and the
        # tensor-only functions take it beside tensors of any shape.
        if len(anchors) == 1:
            return f"{anchors[0]}.new_tensor({number})"
        device = f", device={anchors[0]}.device" if anchors else ""
        return f"{self._record('torch.tensor')}({number}, dtype={self._float_dtype(anchors)}{device})"

    def _print_Function(self, expr: sp.Function) -> str:
        name = type(expr).__name__
        if name in fn.TORCH_TENSOR_ONLY and any(a.is_number for a in expr.args):
            # torch.atan2(x, 2.0) raises; a 0-d tensor promotes to x's dtype
            # and device like the number would.
            args = ", ".join(
                f"{self._record('torch.tensor')}({float(a)!r})" if a.is_number else self._print(a) for a in expr.args
            )
            return f"{self._record(self.functions[name])}({args})"
        return super()._print_Function(expr)

    def _print_reciprocal(self, denominator: sp.Expr) -> str:
        # `1 / t` is `t.reciprocal() * 1` in torch (Tensor.__rtruediv__): two kernels where reciprocal is one.
        if not denominator.free_symbols or self._of_scalars(denominator):
            return super()._print_reciprocal(denominator)
        return self._call("torch.reciprocal", denominator)

    def _reciprocal_binding(self, denominator: sp.Expr) -> int:
        if not denominator.free_symbols or self._of_scalars(denominator):
            return super()._reciprocal_binding(denominator)
        return PRIMARY

    def _print_softplus(self, expr: fn.softplus) -> str:
        return self._call(self.functions["softplus"], expr.args[0], fixed=[f"threshold={SOFTPLUS_THRESHOLD}"])

    def _print_sigmoid_product(self, expr: fn.sigmoid_product) -> str:
        a, u, beta = expr.args
        return self._call(self.functions["sigmoid_product"], a, u, beta, fixed=[repr(SOFTPLUS_THRESHOLD)])

    def _print_softplus_scaled(self, expr: fn.softplus_scaled) -> str:
        # torch reverts to u where u * beta > threshold: where softplus(beta * u) would revert to beta * u.
        u, beta = expr.args
        path = self._record(self.functions["softplus_scaled"])
        return f"{path}({self._print(u)}, beta={self._argument(beta)}, threshold={SOFTPLUS_THRESHOLD})"

    def _print_cotangent_sum(self, expr: fn.cotangent_sum) -> str:
        return self._helper_call(SUMMED_LIKE_IMPORT, *expr.args)

    def _print_tanh_backward(self, expr: fn.tanh_backward) -> str:
        return self._helper_call(TANH_BACKWARD_IMPORT, *expr.args)

    def _print_silu_backward(self, expr: fn.silu_backward) -> str:
        return self._helper_call(SILU_BACKWARD_IMPORT, *expr.args)

    def _print_silu_derivative(self, expr: fn.silu_derivative) -> str:
        # No cotangent to hand silu_backward: the plan rewrites a lone one so before printing, sharing its sigmoid.
        return self._print(expr.rewrite(fn.sigmoid))

    def _print_beta(self, expr: sp.beta) -> str:
        # torch has none: by cases, from log|Gamma| and Gamma's sign, as the registry replaces JAX's too.
        return self._print(fn.beta_by_cases(*expr.args))

    def _print_gamma(self, expr: sp.gamma) -> str:
        x = self._print(expr.args[0])
        magnitude = f"{self._record('torch.exp')}({self._record('torch.special.gammaln')}({x}))"
        # Gamma is negative on (-1, 0), (-3, -2), ...: where floor(x) is odd; at a pole (a negative
        # integer, or -inf) it has no value, nan as JAX's gamma and C's tgamma give it (gammaln is inf there).
        where, floor = self._record("torch.where"), self._record("torch.floor")
        pole = f"({x} < 0) & ({x} == {floor}({x}))"
        sign = f"{where}({pole}, {self._record('math.nan')}, {where}(({x} < 0) & ({floor}({x}) % 2 == 1), -1.0, 1.0))"
        return f"{magnitude} * {sign}"

    def _piece(self, cond: sp.Basic, value: sp.Expr, otherwise: str) -> str:
        # torch.where takes a tensor condition; one on static inputs alone is
        # a Python bool, which picks its piece in Python.
        if self._of_scalars(cond):
            return f"({self._print(value)} if {self._print_constant(cond)} else {otherwise})"
        return super()._piece(cond, value, otherwise)

    def _piece_binding(self, cond: sp.Basic) -> int:
        return LOOSEST if self._of_scalars(cond) else PRIMARY  # `(value if cond else otherwise)`, torch.where

    operator_functions: ClassVar[dict[str, int]] = {
        **_ArrayCode.operator_functions,
        "gamma": PRECEDENCE["Mul"],  # `exp(gammaln(x)) * sign`
    }
    rewritten: ClassVar[dict[str, Callable[[sp.Basic], sp.Basic]]] = {
        **_ArrayCode.rewritten,
        "beta": lambda e: fn.beta_by_cases(*e.args),
        "betaln": lambda e: fn.betaln_by_cases(*e.args),
        "silu_derivative": lambda e: e.rewrite(fn.sigmoid),
    }

    def _print_Max(self, expr: sp.Max) -> str:
        return self._extreme(expr.args, self.functions["Max"], "min")

    def _print_Min(self, expr: sp.Min) -> str:
        clip = self._clip_of(expr)
        if clip is not None:
            return f"{self._record('torch.clamp')}({', '.join(self._print(a) for a in clip)})"
        return self._extreme(expr.args, self.functions["Min"], "max")

    def _clip_of(self, expr: sp.Min) -> tuple[sp.Expr, sp.Expr, sp.Expr] | None:
        """(x, lo, hi) where `expr` is clip(x, lo, hi), Min(Max(x, lo), hi), of a tensor x and numbers: one clamp,
        not a clamp of a clamp."""
        highs = [a for a in expr.args if a.is_number]
        inner = [a for a in expr.args if isinstance(a, sp.Max)]
        if len(expr.args) != 2 or len(highs) != 1 or len(inner) != 1 or len(inner[0].args) != 2:
            return None
        lows = [a for a in inner[0].args if a.is_number]
        tensors = [a for a in inner[0].args if not a.is_number and not self._of_scalars(a)]
        if len(lows) != 1 or len(tensors) != 1:
            return None
        return tensors[0], lows[0], highs[0]

    def _extreme(self, args: tuple[sp.Expr, ...], path: str, bound: str) -> str:
        # Numbers and static inputs are Python numbers, which torch.maximum refuses: clamp bounds.
        numbers = [a for a in args if a.is_number or self._of_scalars(a)]
        tensors = [a for a in args if a not in numbers]
        text = self._print(tensors[0])
        for arg in tensors[1:]:
            text = f"{self._record(path)}({text}, {self._print(arg)})"
        for number in numbers:
            text = f"{self._record('torch.clamp')}({text}, {bound}={self._print(number)})"
        return text


def one_kernel(expr: sp.Expr, tensors: frozenset[sp.Symbol], scalars: frozenset[sp.Symbol]) -> bool:
    """Whether the torch printer writes `expr` as one kernel of `tensors`, numbers and `scalars` (Python numbers).

    What the TorchArrayPrinter prints as one call or one operator: a
    registered function, a product or sum of two operands, a power with a
    number or scalar exponent.  Conservative: `1 - x` (a negation, then a
    subtraction) and `2 * x / 3` are two.
    """

    def python_number(e: sp.Expr) -> bool:
        return e.free_symbols <= scalars

    def operand(e: sp.Expr) -> bool:
        return e in tensors or python_number(e)

    if python_number(expr) or expr in tensors:
        return True
    if not all(operand(a) for a in expr.args):
        return False
    if isinstance(expr, sp.core.function.Application):  # functions, Max and Min
        function = fn.BY_NAME.get(type(expr).__name__)
        # Max and Min of more than two are a chain of calls.
        return (
            function is not None
            and function.one_torch_kernel
            and (function.name not in ("Max", "Min") or len(expr.args) == 2)
        )
    if isinstance(expr, sp.Mul):
        coefficient = next((a for a in expr.args if a.is_Rational), sp.S.One)
        # A rational other than 1/q prints as `p * x / q`, two operations.
        return len(expr.args) == 2 and (coefficient.is_Integer or coefficient.p == 1)
    if isinstance(expr, sp.Add):
        return len(expr.args) == 2
    if isinstance(expr, sp.Pow):
        base, exponent = expr.args
        # A negative integer power prints as `1 / x**k`, two operations past k = 1.
        return base in tensors and not (exponent.is_Integer and exponent < -1)
    return False


TANH_EXPM1_IMPORT = Import("._fuse", "tanh_expm1")


class CompiledTorchPrinter(TorchArrayPrinter):
    """torch code for the bodies of `fuse: true` rules that only torch.compile runs.

    Nothing differentiates these, so a function may be written in a form
    whose derivative differs at a point.  Inductor's vectorised CPU `tanh`
    is several times slower than its `expm1` (2^22 float32: 4.0 ms against
    1.1 ms), so `tanh` calls `_fuse.tanh_expm1`; on a GPU the kernel is
    memory-bound and the extra arithmetic free.  Its `erfc` is a scalar
    loop (9.9 ms against 2.5 ms for `erf` then `+ 1`), yet `1 + erf(u)` is
    erfc here too: the sum loses every bit where erf(u) nears -1.
    """

    def _print_tanh(self, expr: sp.tanh) -> str:
        self.module_imports_.add(TANH_EXPM1_IMPORT)
        return f"{self._spelled('tanh_expm1')}({self._print(expr.args[0])})"


def _register_functions() -> None:
    """Give every registered sympy Function a `_print_<Class>` method, as sympy's NumPyPrinter does its known functions.

    A method of the printers' own (polygamma's, torch's gamma) stays.  The
    inherited ones of sympy's printers would print the registered functions
    of their own module (`numpy.exp`, `math.erf`), and any other a printer
    cannot print must say so.  Min and Max are no Functions: the array
    printers have methods for them, and the constant printer's are sympy's,
    Python's `min` and `max` of static inputs.
    """
    for function in fn.REGISTRY:
        method = f"_print_{function.name}"
        dispatched = isinstance(function.sympy, type) and issubclass(function.sympy, sp.Function)
        if dispatched and method not in vars(_ArrayCode):
            setattr(_ArrayCode, method, _ArrayCode._print_registered)


_register_functions()


def one_square_root(number: sp.Expr) -> tuple[bool, sp.Expr, sp.Expr] | None:
    """sqrt(2)/(2*sqrt(pi)) as (negative, 1, 2*pi): one square root, `1 / math.sqrt(2 * math.pi)`, for several.

    sympy keeps the square roots of a product apart (sqrt(2*pi) evaluates to
    sqrt(2)*sqrt(pi)); printed as they are, Python computes three roundings
    where a person writes one.  None for a number with no square root in it,
    or one, or whose square is not a quotient of rationals and powers of pi and E.
    """
    if not number.is_number or number.is_Rational:
        return None
    radicands = {p.base for p in sp.preorder_traversal(number) if p.is_Pow and p.exp.is_Rational and p.exp.q == 2}
    if len(radicands) < 2:
        return None  # one square root already reads as a person writes it: 2 / math.sqrt(math.pi)
    square = number**2
    powers = square.as_powers_dict()
    if not all((b.is_Rational or b in (sp.pi, sp.E)) and e.is_Integer for b, e in powers.items()):
        return None
    numerator, denominator = sp.fraction(square)
    return bool(number.is_negative), numerator, denominator


def float_unit(term: sp.Expr) -> tuple[int, sp.Expr] | None:
    """(1 or -1, rest) where `term` is rest times sympy's Float 1.0 or -1.0 (a rule's 0.5 * 2); else None."""
    coefficient, rest = term.as_coeff_Mul()
    if coefficient.is_Float and abs(float(coefficient)) == 1:
        return int(coefficient), rest
    return None


def _one_factor(number: sp.Expr) -> bool:
    """Whether `number` prints as a name, a literal or one call (`math.sqrt(2)`): no parentheses before `* x`."""
    magnitude = -number if number.could_extract_minus_sign() else number
    if magnitude.is_NumberSymbol or magnitude.is_Float:
        return True
    if magnitude.is_Pow:
        return magnitude.exp == sp.S.Half and magnitude.base.is_Integer
    return isinstance(magnitude, sp.Function) and all(a.is_Integer or a.is_NumberSymbol for a in magnitude.args)


def _printer(cls: Callable[[Mapping[str, str] | None], _ArrayCode]) -> Callable[..., tuple[Value, frozenset[Import]]]:
    def print_expr(
        expr: sp.Expr,
        scalars: frozenset[str] = frozenset(),
        booleans: frozenset[str] = frozenset(),
        own: Mapping[str, str] | None = None,
        renamed: Mapping[str, str] | None = None,
        present: frozenset[str] = frozenset(),
    ) -> tuple[Value, frozenset[Import]]:
        """`expr` as code (its Value: the text, and how tightly it binds), and the imports it needs.

        `scalars` name the symbols that hold Python numbers, `booleans` those that hold boolean arrays;
        `own` spells the modules, helpers and builtins the code reads as its module does (`Rule.own_names`);
        `renamed` prints symbols under other names; `present` names the cotangents present wherever it runs.
        """
        printer = cls(own)
        printer.scalars = scalars
        printer.booleans = booleans
        printer.renamed = renamed or {}
        printer.present = present
        text = printer.doprint(expr)
        return Value(text, printer.binding(expr)), frozenset(printer.module_imports_)

    return print_expr


class FrameworkJaxPrinter(JaxArrayPrinter):
    """JAX code that calls JAX's own functions where the runtime would mend one (erfcx's derivative)."""

    functions = _JAX_OWN


class FrameworkTorchPrinter(TorchArrayPrinter):
    """torch code that calls torch's own functions where the runtime would mend one (float64 trigamma).

    beta, which torch lacks, as a user writes it: exp of log|Gamma| sums, and its partial as sympy's product.
    """

    functions = _TORCH_OWN
    rewritten: ClassVar[dict[str, Callable[[sp.Basic], sp.Basic]]] = {
        **TorchArrayPrinter.rewritten,
        "beta": lambda e: fn.beta_by_log_gamma(*e.args),
        "beta_slope": lambda e: e.rewrite(fn.beta),
        "betaln": lambda e: e.rewrite(sp.loggamma),
    }

    def _print_beta(self, expr: sp.beta) -> str:
        return self._print(fn.beta_by_log_gamma(*expr.args))

    def _print_reciprocal(self, denominator: sp.Expr) -> str:
        return _ArrayCode._print_reciprocal(self, denominator)  # `1 / x`, as a user writes it

    def _reciprocal_binding(self, denominator: sp.Expr) -> int:
        return _ArrayCode._reciprocal_binding(self, denominator)

    def _print_beta_slope(self, expr: fn.beta_slope) -> str:
        a, b = expr.args
        return self._print(fn.beta_by_log_gamma(a, b) * (sp.digamma(a) - sp.digamma(a + b)))

    def _print_betaln(self, expr: fn.betaln) -> str:
        return self._print(expr.rewrite(sp.loggamma))


print_jax = _printer(JaxArrayPrinter)
print_torch = _printer(TorchArrayPrinter)
print_torch_compiled = _printer(CompiledTorchPrinter)
print_jax_framework = _printer(FrameworkJaxPrinter)
print_torch_framework = _printer(FrameworkTorchPrinter)

__all__ = [
    "CompiledTorchPrinter",
    "FrameworkJaxPrinter",
    "FrameworkTorchPrinter",
    "JaxArrayPrinter",
    "TorchArrayPrinter",
    "print_jax",
    "print_jax_framework",
    "print_torch",
    "print_torch_compiled",
    "print_torch_framework",
]
