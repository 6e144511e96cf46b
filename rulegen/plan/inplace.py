"""Straight-line torch code that updates its own temporaries in place.

Eager torch allocates a fresh tensor for every operation, and on the CPU a
large allocation costs about what the arithmetic does: its pages are mapped
and zeroed anew.  Mish's first-order backward written out of place,
`out_bar * (s + x * (1 - s**2) * sigmoid(x))`, allocates seven tensors;
written as updates of buffers it owns, two:

    t1 = s**2
    t1.neg_().add_(1).mul_(x)
    t2 = torch.sigmoid(x)
    t1.mul_(t2).add_(s).mul_(out_bar)

A buffer is only ever a tensor this code allocated itself (an input, a saved
tensor or a shared subexpression is never written), so this is right
whenever the tensors are plain: no autograd recording, no torch.func
transform, one shape and dtype for all.  The generated Function checks that
at run time (`torch/_inplace.py`) and runs the out-of-place code otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import sympy as sp

from rulegen.computation.quotients import power_of_a_quotient, square_of_a_name
from rulegen.computation.sharing import added
from rulegen.derive import functions as fn
from rulegen.plan.code import Assign, Expr, Value, fits_a_line
from rulegen.plan.printers import float_unit, printed_terms

# Functions of one argument whose torch method has an in-place form.
_IN_PLACE_METHODS: dict[type, str] = {
    function.sympy: function.in_place
    for function in fn.REGISTRY
    if function.in_place is not None and isinstance(function.sympy, type)
}


class InPlaceWriter:
    """Writes expressions as steps that allocate once per compound operand.

    `code` prints an expression out of place (its Value: how tightly it
    binds decides whether an update chained onto it takes parentheses); `tensors` names the symbols
    that hold tensors (the others are Python numbers: static inputs);
    `names` gives fresh names for buffers.
    """

    def __init__(self, code: Callable[[sp.Expr], Value], tensors: set[str], names: Iterator[sp.Symbol]) -> None:
        self.code = code
        self.tensors = set(tensors)
        self.names = names
        self.steps: list[Assign | Expr] = []
        # The value each buffer's last assignment step assigns it.
        self.values: dict[str, Value] = {}
        # The buffer the last step updates, when that step is a bare update (an Expr).
        self.updated: str | None = None
        # Allocations the out-of-place code makes that the updates written spare: none, and the steps are
        # out-of-place code.
        self.spared = 0
        # Temporaries that hold a selection (a Piecewise): `sp.cse` names a
        # shared `torch.where(x > 0, 1, 0)`, and the expressions that read it
        # then have no Piecewise in them to tell.
        self.selections: set[str] = set()

    def assign(self, target: str, expr: sp.Expr) -> None:
        """Compute `expr` into `target`, which later steps read but never write."""
        if self._is_tensor(expr) and not expr.is_Atom:
            self._owned(expr, target)
        else:
            self._assign(target, self.code(expr))
        if self._is_tensor(expr):
            self.tensors.add(target)
        if self._selects(expr):
            self.selections.add(target)

    def value(self, expr: sp.Expr) -> Value:
        """`expr` as a returned value: a fresh buffer when it is a compound tensor."""
        if self._is_tensor(expr) and not expr.is_Atom:
            return Value(self._owned(expr))
        return self.code(expr)

    def made(self, step: Assign | Expr) -> Value:
        """The value `step`, one of `steps`, makes: what it assigns, or the buffer its updates return."""
        if isinstance(step, Assign):
            return self.values[step.target]
        return Value(step.code)  # `t0.mul_(x)`: a method's call

    def _assign(self, target: str, value: Value) -> None:
        self.steps.append(Assign(target, value.text))
        self.values[target] = value

    def _is_tensor(self, expr: sp.Expr) -> bool:
        # in_float(s, x) of a static s is a 0-d tensor: x names only its dtype, and no buffer of x's shape holds it.
        arrays = expr.replace(lambda e: isinstance(e, fn.in_float), lambda e: e.args[0]).free_symbols
        return any(s.name in self.tensors for s in arrays)

    def _compound(self, expr: sp.Expr) -> bool:
        return not expr.is_Atom and self._is_tensor(expr)

    def _selects(self, expr: sp.Expr) -> bool:
        """A Piecewise is in `expr`, or a temporary that holds one."""
        return expr.has(sp.Piecewise) or any(s.name in self.selections for s in expr.free_symbols)

    def _buildable(self, expr: sp.Expr) -> bool:
        """A compound tensor to build a buffer from and update in place.

        Nothing with a Piecewise in it, named by a temporary or not:
        `torch.where(x > 0, 1, 0) + 1` is an integer tensor, which an
        in-place update with floats cannot write, and `beta * t0` of such a
        `t0` is float32, which one with float64 writes rounded.
        """
        return self._compound(expr) and not self._selects(expr)

    def _operand(self, expr: sp.Expr) -> str:
        """Text for the argument of an in-place method: inline when one out-of-place call computes it."""
        if not self._compound(expr):
            return self.code(expr).text
        before = len(self.steps)
        name = self._owned(expr)
        last = self.steps[-1] if len(self.steps) == before + 1 else None
        if isinstance(last, Assign) and last.target == name:
            return self.steps.pop().code
        return name

    def _update(self, buffer: str, call: str, spared: int = 1) -> None:
        """Apply `buffer.call`, chained onto the last step where that step made or updated `buffer`.

        An in-place method returns its tensor, so `t0 = torch.cos(x)` then
        `t0.mul_(a)` is `t0 = torch.cos(x).mul_(a)`: one statement, as a
        person writes it, and the same kernels.
        """
        last = self.steps[-1] if self.steps else None
        chained = self.values[buffer].method(call) if isinstance(last, Assign) and last.target == buffer else None
        if chained and fits_a_line(chained.text):
            self.steps.pop()
            self._assign(buffer, chained)
        elif isinstance(last, Expr) and self.updated == buffer:
            self.steps[-1] = Expr(f"{last.code}.{call}")
        else:
            self.steps.append(Expr(f"{buffer}.{call}"))
        self.updated = buffer
        self.spared += spared

    def _fresh(self, expr: sp.Expr, target: str | None) -> str:
        name = target or str(next(self.names))
        value = self.code(expr)
        if value.text.isidentifier():
            # A name is a tensor someone else holds (an input, a saved value): the buffer updated in place is a
            # copy of it, never it (a rule's 1.0 * t prints as t).
            value = value.method("clone()")
        self._assign(name, value)
        self.updated = None
        return name

    def _owned(self, expr: sp.Expr, target: str | None = None) -> str:
        """The name of a buffer allocated here that holds `expr`."""
        if isinstance(expr, sp.UnevaluatedExpr):  # a partial, computed whole before its tangent multiplies it
            return self._owned(expr.args[0], target)
        expr = _without_float_units(expr)
        if isinstance(expr, sp.Add):
            return self._sum(printed_terms(expr), expr, target)
        if isinstance(expr, added):
            return self._sum(_chained_terms(expr), expr, target)
        if isinstance(expr, sp.Mul):
            return self._product(expr, target)
        if isinstance(expr, sp.Pow):
            return self._power(expr, target)
        method = _IN_PLACE_METHODS.get(type(expr))
        if method is not None and len(expr.args) == 1 and self._buildable(expr.args[0]):
            buffer = self._owned(expr.args[0], target)
            self._update(buffer, f"{method}()")
            return buffer
        return self._fresh(expr, target)

    def _seed(self, terms: Sequence[sp.Expr]) -> int | None:
        """Which compound tensor term to build the buffer from, if any.

        A negated one only when no other is, and a product of tensors last:
        added to a buffer, it takes one pass (addcmul_); as the buffer, two.
        Never the negation of a name: `(-y).add_(x)` is two passes where `x - y` is one.
        """
        compound = [
            k for k, t in enumerate(terms) if self._buildable(t) and not (_is_negated(t) and not self._compound(-t))
        ]
        if not compound:
            return None
        return min(compound, key=lambda k: (_is_negated(terms[k]), self._tensor_product(terms[k]), k))

    def _tensor_product(self, term: sp.Expr) -> bool:
        return term.is_Mul and sum(self._is_tensor(f) for f in term.args) >= 2

    def _sum(self, terms: list[sp.Expr], expr: sp.Expr, target: str | None) -> str:
        """`expr`, the sum of `terms` in the order they are added, into a buffer."""
        if len(terms) > 2:
            # Left to right, as the out-of-place code adds them: a sum's rounding depends on its order
            # (softsign's (|x| - x sign(x)) + 1 is 1; (1 - x sign(x)) + |x| is 0 from |x| = 2**53).
            head = sp.Add(*terms[:2])
            if not self._buildable(head):
                return self._fresh(expr, target)
            buffer = self._owned(head, target)
            terms = terms[2:]
        else:
            k = self._seed(terms)
            if k is None:
                return self._fresh(expr, target)
            buffer = self._owned(terms.pop(k), target)
        for term in terms:
            if self._fused_product(buffer, term):
                continue
            if _is_negated(term):
                self._update(buffer, f"sub_({self._operand(-term)})")
            else:
                self._update(buffer, f"add_({self._operand(term)})")
        return buffer

    def _fused_product(self, buffer: str, term: sp.Expr) -> bool:
        """Add `term`, a product or quotient of tensors, to `buffer` in one pass (addcmul_, addcdiv_), if it is one.

        Numbers and static inputs among its factors become `value`.
        """
        if not term.is_Mul or power_of_a_quotient(term) is not None:  # the printers' (u / v)**k, not addcdiv_
            return False
        scale = [f for f in term.args if not self._is_tensor(f)]
        tensors = [f for f in term.args if self._is_tensor(f)]
        if any(self._selects(f) for f in tensors):
            return False
        divisors = [1 / f for f in tensors if _is_reciprocal(f)]
        factors = [f for f in tensors if not _is_reciprocal(f)]
        if not factors or len(factors) + len(divisors) < 2:
            return False
        if divisors:
            method, second = "addcdiv_", sp.Mul(*divisors)
        else:
            method = "addcmul_"
            second = next((f for f in reversed(factors) if f.is_Atom), factors[-1])  # a name costs no pass
            factors.remove(second)
        value = sp.Mul(*scale)
        arguments = [self._operand(sp.Mul(*factors)), self._operand(second)]
        if value != 1:
            arguments.append(f"value={self.code(value).text}")
        # The sum, the last product of tensors and the scaling, each an allocation out of place.
        self._update(buffer, f"{method}({', '.join(arguments)})", spared=2 + (value != 1))
        return True

    def _product(self, expr: sp.Mul, target: str | None) -> str:
        # One multiplication by the product of the numbers: sympy keeps 2, sqrt(2) and 1/sqrt(pi) apart.
        coefficient = sp.Mul(*(f for f in expr.args if f.is_number))
        factors_tuple = [f for f in expr.args if not f.is_number]
        factors = [f for f in factors_tuple if not _is_reciprocal(f)]
        divisors = [1 / f for f in factors_tuple if _is_reciprocal(f)]
        k = self._seed(factors)
        if k is None or power_of_a_quotient(expr) is not None:  # the printers' (u / v)**k, not u**k / v / v
            return self._fresh(expr, target)
        buffer = self._owned(factors.pop(k), target)
        for factor in factors:
            self._update(buffer, f"mul_({self._operand(factor)})")
        for divisor in divisors:
            # By a name's square twice, as the printers divide (b * b over- or underflows where the quotient does not).
            square = square_of_a_name(divisor)
            for _ in range(2 if square else 1):
                self._update(buffer, f"div_({self._operand(divisor.base if square else divisor)})")
        if coefficient == -1:
            self._update(buffer, "neg_()")
        elif coefficient != 1:
            self._update(buffer, f"mul_({self.code(coefficient).text})")
        return buffer

    def _power(self, expr: sp.Pow, target: str | None) -> str:
        base, exponent = expr.as_base_exp()
        if not self._buildable(base) or not exponent.is_number or self._is_tensor(exponent):
            return self._fresh(expr, target)
        if exponent.is_Rational and exponent.q > 2:
            return self._fresh(expr, target)  # the printer's nth_root, which pow_ would not be
        special = {2: "square_()", -1: "reciprocal_()", sp.S.Half: "sqrt_()", -sp.S.Half: "rsqrt_()"}
        buffer = self._owned(base, target)
        self._update(buffer, special.get(exponent, f"pow_({self.code(exponent).text})"))
        return buffer


def _is_negated(term: sp.Expr) -> bool:
    return isinstance(term, sp.Mul) and term.as_coeff_mul()[0] == -1


def _chained_terms(chain: added) -> list[sp.Expr]:
    """The terms an `added` chain (`summed_in_order`) adds, left to right."""
    left, right = chain.args
    return [*(_chained_terms(left) if isinstance(left, added) else [left]), right]


def _without_float_units(expr: sp.Expr) -> sp.Expr:
    """`expr` with each term's Float coefficient 1.0 or -1.0 (a rule's 0.5 * 2) an integer one: 1.0 * t is the
    name t, which no buffer of this writer's holds, not a product that allocates one."""

    def unit(term: sp.Expr) -> sp.Expr:
        found = float_unit(term)
        return term if found is None else found[0] * found[1]

    if isinstance(expr, sp.Add):
        return sp.Add(*(unit(t) for t in expr.args))
    return unit(expr) if isinstance(expr, sp.Mul) else expr


def _is_reciprocal(factor: sp.Expr) -> bool:
    return isinstance(factor, sp.Pow) and factor.exp.is_Integer and factor.exp < 0


__all__ = ["InPlaceWriter"]
