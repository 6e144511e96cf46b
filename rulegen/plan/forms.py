"""What each backend computes of an expression: float dtypes throughout, the registry's corrections, and each
backend's one-kernel forms.

The derivation's expressions (rulegen.derive) are in closed form, in the canonical stable forms; these rewrites
are how a backend prints them, applied to every expression a planner prints.

Array frameworks pick a result's dtype from its operands, and two kinds of
operand would pick the wrong one: integer and boolean arrays (`2**k` is
integer arithmetic, `exp(k)` is the default float dtype, float32) and, in
torch, numbers alone (`torch.where(c, 0.1, 0.2)` is a float32 tensor, and
`torch.tensor(0.1)` is float32 whatever it meets later).  Both are wrapped
in `in_float`, which the printers write as a cast to the dtype of the rule's
float arrays, so float64 in is float64 throughout, and float32 stays float32.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import sympy as sp
from sympy.codegen.cfunctions import log1p

from rulegen.derive.functions import (
    BY_NAME,
    in_float,
    sigmoid,
    sigmoid_product,
    silu,
    silu_backward,
    silu_derivative,
    softplus,
    softplus_scaled,
    tanh_backward,
)
from rulegen.spec.rules import Rule


def float_anchors(rule: Rule, symbols: Mapping[str, sp.Symbol]) -> tuple[sp.Symbol, ...]:
    """The rule's float arrays, whose promoted dtype every value takes."""
    return tuple(symbols[i.name] for i in rule.inputs if not i.static and i.dtype == "float")


def integral_arrays(rule: Rule, symbols: Mapping[str, sp.Symbol]) -> tuple[sp.Symbol, ...]:
    return tuple(symbols[i.name] for i in rule.inputs if not i.static and i.dtype in ("int", "bool"))


def float_forms(
    anchors: Sequence[sp.Symbol],
    integral: Sequence[sp.Symbol],
    *,
    for_torch: bool,
    scalars: frozenset[str] = frozenset(),
) -> Callable[[sp.Expr], sp.Expr]:
    """A rewrite of integer arrays, and of numbers that would become arrays, into `in_float`.

    A `Piecewise` whose pieces are all numbers (or static inputs, Python
    numbers too) is an array built from numbers: torch makes it float32 (or int64), and JAX a weakly typed
    array that, returned as an output, is float64 (or an integer) whatever
    the inputs' dtype.  A registered function of Python numbers alone with
    no `math` counterpart (`MathFunction.numbers_alone`) is computed of 0-d
    arrays of the rule's float dtype; `for_torch` also casts the numbers that
    torch's atan2, hypot and logaddexp refuse beside a tensor
    (`MathFunction.torch_tensor_only`).  `scalars` name the static inputs: a
    `Piecewise` on them alone is Python arithmetic, no array.
    """
    casts = {k: in_float(k, *anchors) for k in integral}

    # `replace` asks of every subexpression, and sympy's free_symbols walks the whole subtree each time: on large
    # forms that was quadratic (a third of the conformance package's planning).
    @functools.cache
    def names(e: sp.Basic) -> frozenset[str]:
        if e.is_Atom or getattr(e, "bound_symbols", ()):
            return frozenset(s.name for s in e.free_symbols)
        return frozenset().union(*map(names, e.args))

    def pieces_of_numbers(e: sp.Basic) -> bool:
        return isinstance(e, sp.Piecewise) and all(names(v) <= scalars for v, _ in e.args) and not names(e) <= scalars

    def cast_first_piece(e: sp.Piecewise) -> sp.Piecewise:
        (value, cond), *rest = e.args
        return sp.Piecewise((in_float(value, *anchors), cond), *rest, evaluate=False)

    def python_number(e: sp.Basic) -> bool:
        return names(e) <= scalars

    def numbers_to_cast(e: sp.Basic) -> list[sp.Basic]:
        """The arguments of a call that become arrays of the rule's float dtype: none where the call stays as it is."""
        function = BY_NAME.get(type(e).__name__) if isinstance(e, sp.Function) else None
        if function is None:
            return []
        numbers = [a for a in e.args if python_number(a)]
        if for_torch and function.torch_tensor_only and len(numbers) < len(e.args):
            return numbers  # beside a tensor; of Python numbers alone it is Python's (`math`), where it has one
        if len(numbers) < len(e.args) or function.numbers_alone != "array":
            return []
        # Python numbers alone, where `math` has no such function: the backend's, of an array.  An
        # integer literal stays (polygamma's order); a float is what the function needs.
        return [a for a in numbers if not a.is_Integer] or numbers

    def cast_numbers(e: sp.Function) -> sp.Expr:
        cast = numbers_to_cast(e)
        return e.func(*(in_float(a, *anchors) if a in cast else a for a in e.args), evaluate=False)

    def rewrite(expr: sp.Expr) -> sp.Expr:
        expr = expr.xreplace(casts) if casts else expr
        expr = expr.replace(pieces_of_numbers, cast_first_piece)
        return expr.replace(lambda e: bool(numbers_to_cast(e)), cast_numbers)

    return rewrite


def corrections(backend: Literal["jax", "torch"]) -> Callable[[sp.Expr], sp.Expr]:
    """A rewrite of each call of a function `backend` computes wrongly somewhere, as the registry replaces it.

    Each call once, bottom up: the replacement's own call (polygamma of 1 - x) stays the framework's.
    """

    def builder(e: sp.Basic) -> Callable[..., sp.Expr] | None:
        function = BY_NAME.get(type(e).__name__)
        if function is None:
            return None
        return function.jax_replacement if backend == "jax" else function.torch_replacement

    def replace(e: sp.Function) -> sp.Expr:
        build = builder(e)
        assert build is not None
        return build(*e.args)

    return lambda expr: expr.replace(lambda e: builder(e) is not None, replace)


#: What `torch_forms` writes: each one kernel of torch's.
NATIVE_KERNELS = (silu, silu_backward, softplus_scaled, sigmoid_product, tanh_backward)


def torch_forms(
    scalars: Iterable[str], integral: Iterable[str], tanh_values: Iterable[str] = (), inputs: Iterable[str] = ()
) -> Callable[[sp.Expr], sp.Expr]:
    """A rewrite of products with a sigmoid, softplus, silu's or tanh's derivative into torch's one-kernel forms.

    `a * sigmoid(beta * u)` is softplus's backward, `u * sigmoid(u)` is
    silu, `a * silu_derivative(u)` silu's backward, `a * (1 - t**2)` with
    t = tanh(u) tanh's backward, and `softplus(beta * u) / beta` softplus
    with its `beta`: one pass over memory each where the composites take two
    or more.  `scalars` name the static inputs (Python numbers, which the
    native kernels do not take as tensors), `integral` the integer and
    boolean arrays (silu refuses them; softplus's backward promotes them),
    `tanh_values` the saved values that are a tanh (`saved_tanh`); none for
    a complex rule, whose conjugated partials aten's tanh_backward would
    conjugate again.  `inputs` name the rule's array inputs: softplus's
    backward computes `a * z / (z + 1)`, z = exp(beta * u), inf where
    `a * z` overflows, and is handed no `a` that holds an input `u` does not
    (a negative binomial's `r * sigmoid(logits)` at r = 8.4e37, logits =
    5.48 in float32, where it is -8.4e37): a cotangent, a saved value, or a
    function of u's own inputs (gelu's `x` beside `x + 0.044715 x**3`) is.
    """
    return _TorchForms(frozenset(scalars), frozenset(integral), frozenset(tanh_values), frozenset(inputs))


@dataclass(frozen=True)
class _TorchForms:
    """`torch_forms`' rewrite: each product once, bottom up, as `sp.Expr.replace` visits it."""

    scalars: frozenset[str]
    integral: frozenset[str]
    tanh_values: frozenset[str] = frozenset()
    inputs: frozenset[str] = frozenset()

    def __call__(self, expr: sp.Expr) -> sp.Expr:
        # A partial kept whole before its cotangent multiplies it (plan.symbolic.linear_combination) opens
        # where it holds silu's derivative: silu_backward takes the cotangent and rounds the product once.
        expr = expr.replace(
            lambda e: isinstance(e, sp.UnevaluatedExpr) and e.args[0].has(silu_derivative), lambda e: e.args[0]
        )
        expr = expr.replace(lambda e: e.is_Mul, self._product)
        if expr.has(silu_derivative):
            # Nothing to hand silu_backward as its cotangent: the composite, whose sigmoid cse shares.
            expr = expr.replace(lambda e: isinstance(e, silu_derivative), lambda e: e.rewrite(sigmoid))
            expr = expr.replace(lambda e: e.is_Mul, self._product)
        return expr

    def _product(self, product: sp.Expr) -> sp.Expr:
        for form in (
            self._distributed,
            self._silu_backward,
            self._softplus_scaled,
            self._sigmoid_product,
            self._tanh_backward,
        ):
            if not product.is_Mul:
                break
            product = form(product)
        return product

    def _operand(self, expr: sp.Expr) -> bool:
        """A float tensor a native kernel takes: not a Python number, not an integer mask (`torch.where(c, 1, 0)`)."""
        return any(s.name not in self.scalars for s in expr.free_symbols) and not expr.has(sp.Piecewise)

    def _varies(self, expr: sp.Expr) -> bool:
        """An `_operand` of an array, not only of static inputs cast to a float (`in_float(s, x)`, a 0-d tensor):
        a sigmoid of statics is a number, `a * sigmoid(s)` one multiplication, and softplus's backward computes
        `a * z / (z + 1)`, z = exp(s), inf where `a * z` overflows (x = 2.7e38 in float32 at s = 0.5)."""
        held = expr.replace(lambda e: isinstance(e, in_float), lambda e: e.args[0])
        return self._operand(expr) and any(s.name not in self.scalars for s in held.free_symbols)

    def _tensor_operand(self, factors: Sequence[sp.Expr], skip: int, beside: sp.Expr | None = None) -> int | None:
        """The factor to hand a native kernel as its tensor, a bare name first (it needs no pass of its own); with
        `beside`, one that holds no input `beside` does not hold."""
        candidates = [
            j
            for j, f in enumerate(factors)
            if j != skip and self._operand(f) and (beside is None or not self._independent_of(f, beside))
        ]
        return min(candidates, key=lambda j: (not factors[j].is_Atom, j)) if candidates else None

    def _independent_of(self, factor: sp.Expr, argument: sp.Expr) -> bool:
        """Whether `factor` holds an array input that `argument` does not: the two are drawn apart."""
        held = {s.name for s in argument.free_symbols}
        return any(s.name in self.inputs and s.name not in held for s in factor.free_symbols)

    def _split(self, expr: sp.Expr) -> tuple[sp.Expr, sp.Expr]:
        """`expr` as (numbers and static inputs, the rest): `2*beta*x` is (2*beta, x)."""
        tensors = [s for s in expr.free_symbols if s.name not in self.scalars]
        return expr.as_independent(*tensors, as_Add=False)

    def _distributed(self, product: sp.Expr) -> sp.Expr:
        """`a * (c * silu_derivative(u) + rest)` -> `c * silu_backward(a, u) + a * rest`.

        Inside the sum the derivative has no tensor to multiply, and would be
        computed as its composite (five kernels); multiplied out, the sum
        costs one multiplication more.
        """
        factors = list(product.args)
        k = next(
            (k for k, f in enumerate(factors) if f.is_Add and any(_times_silu_derivative(t) for t in f.args)), None
        )
        a = self._tensor_operand(factors, k) if k is not None else None
        if k is None or a is None:
            return product
        rest = [f for j, f in enumerate(factors) if j not in (a, k)]
        return sp.Mul(*rest, sp.Add(*(self._product(factors[a] * t) for t in factors[k].args)))

    def _silu_backward(self, product: sp.Expr) -> sp.Expr:
        """`a * silu_derivative(u) * rest` -> `silu_backward(a, u) * rest`, where a and u are float tensors."""

        def argument(factor: sp.Expr) -> sp.Expr | None:
            return factor.args[0] if isinstance(factor, silu_derivative) and self._operand(factor) else None

        return self._backward_kernel(product, argument, silu_backward)

    def _backward_kernel(
        self, product: sp.Expr, argument: Callable[[sp.Expr], sp.Expr | None], kernel: type[sp.Function]
    ) -> sp.Expr:
        """`a * d * rest` -> `kernel(a, argument(d)) * rest`: a derivative factor d and a tensor factor a (a
        cotangent, a tangent) into one kernel, where `argument` finds d's argument (None: no such factor)."""
        factors = list(product.args)
        k = next((k for k, f in enumerate(factors) if argument(f) is not None), None)
        a = self._tensor_operand(factors, k) if k is not None else None
        if k is None or a is None:
            return product
        rest = [f for j, f in enumerate(factors) if j not in (a, k)]
        return sp.Mul(*rest, kernel(factors[a], argument(factors[k])))

    def _softplus_scaled(self, product: sp.Expr) -> sp.Expr:
        """`c * softplus(beta * u) * rest` -> `(c * beta) * softplus_scaled(u, beta) * rest` where c divides by beta.

        Only where c * beta is simpler than c (`1 / beta` becomes 1): elsewhere
        the scale costs the pass that folding beta into the kernel saves.
        """
        factors = list(product.args)
        k = next((k for k, f in enumerate(factors) if isinstance(f, softplus) and self._operand(f)), None)
        if k is None:
            return product
        beta, u = self._split(factors[k].args[0])
        coefficient, rest = self._split(sp.Mul(*(f for j, f in enumerate(factors) if j != k)))
        scale = coefficient * beta
        if beta == 1 or sp.count_ops(scale) >= sp.count_ops(coefficient):
            return product
        return sp.Mul(scale, rest, softplus_scaled(u, beta))

    def _sigmoid_product(self, product: sp.Expr) -> sp.Expr:
        """`u * sigmoid(u) * rest` -> `silu(u) * rest`; `a * sigmoid(beta * u) * rest` -> softplus's backward * rest."""
        factors = list(product.args)
        k = next((k for k, f in enumerate(factors) if isinstance(f, sigmoid) and self._varies(f)), None)
        if k is None:
            return product
        beta, u = self._split(factors[k].args[0])
        if u.could_extract_minus_sign():  # the sign rides on beta, not on a negated copy of u
            beta, u = -beta, -u
        if beta == 1 and u in factors and not any(s.name in self.integral for s in u.free_symbols):
            rest = [f for j, f in enumerate(factors) if j != k]
            rest.remove(u)
            return sp.Mul(*rest, silu(u))
        a = self._tensor_operand(factors, k, beside=u)
        if a is None:
            return product
        rest = [f for j, f in enumerate(factors) if j not in (a, k)]
        return sp.Mul(*rest, sigmoid_product(factors[a], u, beta))

    def _tanh_backward(self, product: sp.Expr) -> sp.Expr:
        """`a * (1 - t**2) * rest` -> `tanh_backward(a, t) * rest`, t a tanh: one kernel where the square, the
        difference and the product are three."""
        return self._backward_kernel(product, self._tanh_of, tanh_backward)

    def _tanh_of(self, factor: sp.Expr) -> sp.Expr | None:
        """t where `factor` is `1 - t**2` and t a float tensor's tanh (`tanh(u)`, or a saved one by name)."""
        if not factor.is_Add or len(factor.args) != 2 or sp.S.One not in factor.args:
            return None
        (square,) = (-term for term in factor.args if term != 1)
        if not (square.is_Pow and square.exp == 2):
            return None
        t = square.base
        saved = t.is_Symbol and t.name in self.tanh_values
        return t if saved or (isinstance(t, sp.tanh) and self._operand(t)) else None


def _times_silu_derivative(term: sp.Expr) -> bool:
    """`term` is silu_derivative(u) or a product with it."""
    return any(isinstance(f, silu_derivative) for f in sp.Mul.make_args(term))


def jax_forms(exprs: Iterable[sp.Expr], scalars: Iterable[str]) -> Callable[[sp.Expr], sp.Expr]:
    """A rewrite of softplus and sigmoid of one argument into forms that share one `exp`.

    XLA computes `jax.nn.softplus(u)` and `jax.nn.sigmoid(u)` with an `exp`
    each, even under one `jit`.  Where a rule reads both of u (log1pexp and
    its derivative, mish's), both are written over e = exp(-|u|):

        softplus(u) = where(u >= 0, u, 0) + log1p(e)
        sigmoid(u) = where(u >= 0, 1, e) / (1 + e)
        sigmoid(-u) = where(u >= 0, e, 1) / (1 + e)

    These are exact at every order under JAX's autodiff: at u = 0 each takes
    its `u >= 0` piece, and JAX differentiates |u| there as u (its abs
    rule selects on x >= 0), so the pieces agree with the derivatives.  An
    argument with a static input in it is left alone: its sign, and so the
    piece at 0, is unknown.

    A softplus of an argument no greater than 0 (-|u|, the logistic
    log-density's) is `log1p(exp(u))`, the number `jax.nn.softplus` computes
    there, where that computes `logaddexp(u, 0)`: a maximum, an absolute
    value, a select for nan and an `exp` of its own.  Beside a sigmoid of
    u, softplus(-|u|) is log1p(e) with the sigmoid's e.
    """
    scalars = frozenset(scalars)

    def canonical(u: sp.Expr) -> sp.Expr:
        return -u if u.could_extract_minus_sign() else u

    found: dict[type, set[sp.Expr]] = {softplus: set(), sigmoid: set()}
    for expr in exprs:
        for f in expr.atoms(softplus, sigmoid):
            found[type(f)].add(f.args[0])
    shared = {
        canonical(u)
        for u in found[softplus]
        if (u in found[sigmoid] or -u in found[sigmoid]) and not any(s.name in scalars for s in u.free_symbols)
    }
    # softplus(-|u|) is log1p(exp(-|u|)) (below), whose exp a sigmoid of u shares.
    shared |= {
        canonical(u.args[0])
        for u in (-w for w in found[softplus] if isinstance(-w, sp.Abs))
        if (u.args[0] in found[sigmoid] or -u.args[0] in found[sigmoid])
        and not any(s.name in scalars for s in u.free_symbols)
    }
    nonpositive = {u for u in found[softplus] if u.is_nonpositive and canonical(u) not in shared}
    if not shared and not nonpositive:
        return lambda expr: expr

    def pieces(u: sp.Expr, at_least_zero: sp.Expr, below: sp.Expr) -> sp.Expr:
        return sp.Piecewise((at_least_zero, sp.Ge(u, 0)), (below, True))

    def rewrite(f: sp.Function) -> sp.Expr:
        if isinstance(f, softplus) and f.args[0] in nonpositive:
            return log1p(sp.exp(f.args[0]))
        u = canonical(f.args[0])
        if u not in shared:
            return f
        negated = u != f.args[0]
        e = sp.exp(-sp.Abs(u))
        if isinstance(f, softplus):
            return (pieces(u, 0, -u) if negated else pieces(u, u, 0)) + log1p(e)
        return (pieces(u, e, 1) if negated else pieces(u, 1, e)) / (1 + e)

    return lambda expr: expr.replace(lambda e: isinstance(e, softplus | sigmoid), rewrite)
