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
            if isinstance(partial, sp.Mul):
                partial = sp.UnevaluatedExpr(partial)
            total += sign * partial * d.symbols[f"{v}{suffix}"]
    return total


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
