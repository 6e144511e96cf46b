"""What the two symbolic planners share: linear combinations of partials, shapes, casts, reads."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import sympy as sp

from rulegen.derive.partials import Derivation
from rulegen.plan.model import Wrap
from rulegen.spec.names import COTANGENT, TANGENT
from rulegen.spec.rules import Rule


def linear_combination(
    d: Derivation,
    partials: Mapping[tuple[str, str], sp.Expr],
    result: str,
    variables: Iterable[str],
    suffix: str,
    transpose: bool = False,
    distributed: bool = False,
) -> sp.Expr:
    """`sum_v partial(result, v) * v<suffix>`, or its transpose, each partial computed whole before the product.

    The partial is what the stabilising search measured, and what autodiff
    multiplies a tangent by.  Flattened into one product with the tangent,
    its factors would be multiplied in another order: JAX transposes
    `t0 * x_dot * y * c` into `((ct * c) * y) * t0`, inf * 0 where the
    partial's own `(t0 * y) * c` is 0 (exp(-x**2) underflowing beside a large
    x and y), and `ct / h * y` loses every bit that `ct * (y / h)` keeps
    where `h` is large enough for `ct / h` to be subnormal.

    A negated product, function or name is subtracted, `a - r * y_dot` (the same number as `a + y_dot * (-r)`,
    one operation fewer: in eager torch a negation is a kernel of its own), or negated after the product.

    `distributed` (eager torch, under `fast`): a partial that is a sum of reciprocals and units, `1/x - 1`, is
    multiplied term by term, `x_dot/x - x_dot`, as autodiff of `log(x) - x` computes it: a division for each
    reciprocal and no product, one kernel fewer than computing it whole and multiplying.
    """
    total = sp.S.Zero
    for v in variables:
        key = (v, result) if transpose else (result, v)
        if key in partials:
            partial = partials[key]
            sign = sp.S.One
            # Not -1 / s, which prints as the division it is, not as 1 / s times the tangent.
            negated = isinstance(partial, sp.Mul) and partial.as_coeff_Mul()[0] == -1
            if negated and not isinstance(-partial, (sp.Pow, sp.Add)):
                sign, partial = sp.S.NegativeOne, -partial
            tangent = d.symbols[f"{v}{suffix}"]
            if distributed and _reciprocals_and_units(partial):
                total += sign * sp.Add(*(term * tangent for term in sp.Add.make_args(partial)))
                continue
            if isinstance(partial, sp.Mul):
                partial = sp.UnevaluatedExpr(partial)
            total += sign * partial * tangent
    return total


def _reciprocal_or_unit(term: sp.Expr) -> bool:
    """`term` is 1, -1, 1/w or -1/w: a tangent times it is the tangent itself, or one division."""
    if term in (sp.S.One, sp.S.NegativeOne):
        return True
    coefficient, rest = term.as_coeff_Mul()
    return coefficient in (1, -1) and isinstance(rest, sp.Pow) and rest.exp == -1 and not rest.base.is_number


def _reciprocals_and_units(partial: sp.Expr) -> bool:
    """`partial` is a sum of reciprocals and units with a reciprocal among them (`1/x - 1`)."""
    terms = sp.Add.make_args(partial)
    return len(terms) > 1 and all(map(_reciprocal_or_unit, terms)) and any(t.free_symbols for t in terms)


def _shape_inputs(d: Derivation, expr: sp.Expr) -> set[str] | None:
    """The array inputs an expression's shape comes from; None: an output's full shape."""
    names = {s.name for s in expr.free_symbols}
    outputs = {o.name for o in d.rule.outputs}
    if names & outputs or any(n.endswith(COTANGENT) for n in names):
        return None
    found: set[str] = set()
    residuals = dict(d.residuals)
    for name in names:
        base = name[: -len(TANGENT)] if name.endswith(TANGENT) else name
        if base in residuals:
            inner = _shape_inputs(d, residuals[base])
            if inner is None:
                return None
            found |= inner
        elif any(i.name == base and not i.static for i in d.rule.inputs):
            found.add(base)
    return found


def needs_broadcast(d: Derivation, expr: sp.Expr) -> bool:
    """Whether `expr` may lack an output's shape: that of all the array inputs together.

    An elementwise rule's outputs all have that shape, as a NumPy ufunc's
    do, even one that reads only some inputs (`a: x` beside `b: x * y`).
    """
    have = _shape_inputs(d, expr)
    return have is not None and not {i.name for i in d.rule.inputs if not i.static} <= have


def broadcast_outputs(d: Derivation, broadcast: Wrap) -> dict[str, Wrap]:
    """For each output whose expression lacks the full shape, the wrap `broadcast` that gives it."""
    return {n: broadcast for n, e in d.forward if needs_broadcast(d, e)}


def names_in(exprs: Iterable[sp.Expr]) -> set[str]:
    names: set[str] = set()
    for expr in exprs:
        names |= {s.name for s in expr.free_symbols}
    return names


def dtype_casts(rule: Rule, casts: Mapping[str, str]) -> dict[str, Wrap]:
    """The wrap that gives each output of an integer or boolean `dtype` that dtype, by the method `casts` names for
    it (`long()`); sympy computes in floats."""
    return {o.name: Wrap.method(casts[o.dtype]) for o in rule.outputs if o.dtype in casts}
