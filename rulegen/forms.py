"""Rewrites of symbolic rules: canonical stable forms, and float dtypes throughout.

`canonical` brings an expression to the fused, stable forms both frameworks
have (softplus, sigmoid, log1p, expm1) before it is differentiated.

The rest keeps every value of a symbolic rule in the float dtype of its inputs.

Array frameworks pick a result's dtype from its operands, and two kinds of
operand would pick the wrong one: integer and boolean arrays (`2**k` is
integer arithmetic, `exp(k)` is the default float dtype, float32) and, in
torch, numbers alone (`torch.where(c, 0.1, 0.2)` is a float32 tensor, and
`torch.tensor(0.1)` is float32 whatever it meets later).  Both are wrapped
in `in_float`, which the printers write as a cast to the dtype of the rule's
float arrays, so float64 in is float64 throughout, and float32 stays float32.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import sympy as sp
from sympy.codegen.cfunctions import log1p
from sympy.codegen.rewriting import ReplaceOptim, expm1_opt, log1p_opt, optimize

from rulegen.functions import TORCH_TENSOR_ONLY, in_float, sigmoid, softplus
from rulegen.spec import Rule


def float_anchors(rule: Rule, symbols: dict[str, sp.Symbol]) -> tuple[sp.Symbol, ...]:
    """The rule's float arrays, whose promoted dtype every value takes."""
    return tuple(symbols[i.name] for i in rule.inputs if not i.static and i.dtype == "float")


def integral_arrays(rule: Rule, symbols: dict[str, sp.Symbol]) -> tuple[sp.Symbol, ...]:
    return tuple(symbols[i.name] for i in rule.inputs if not i.static and i.dtype in ("int", "bool"))


def float_forms(
    anchors: Sequence[sp.Symbol],
    integral: Sequence[sp.Symbol],
    *,
    tensor_only: bool,
    scalars: frozenset[str] = frozenset(),
) -> Callable[[sp.Expr], sp.Expr]:
    """A rewrite of integer arrays, and of numbers that would become arrays, into `in_float`.

    A `Piecewise` whose pieces are all numbers (or static inputs, Python
    numbers too) is an array built from numbers: torch makes it float32 (or int64), and JAX a weakly typed
    array that, returned as an output, is float64 (or an integer) whatever
    the inputs' dtype.  `tensor_only` is for torch, whose atan2, hypot and
    logaddexp take no Python number.  `scalars` name the static inputs: a
    `Piecewise` on them alone is Python arithmetic, no array.
    """
    casts = {k: in_float(k, *anchors) for k in integral}

    def pieces_of_numbers(e: sp.Basic) -> bool:
        return (
            isinstance(e, sp.Piecewise)
            and all(all(s.name in scalars for s in v.free_symbols) for v, _ in e.args)
            and any(s.name not in scalars for s in e.free_symbols)
        )

    def cast_first_piece(e: sp.Piecewise) -> sp.Piecewise:
        (value, cond), *rest = e.args
        return sp.Piecewise((in_float(value, *anchors), cond), *rest, evaluate=False)

    def tensor_only_call(e: sp.Basic) -> bool:
        return isinstance(e, sp.Function) and type(e).__name__ in TORCH_TENSOR_ONLY and any(a.is_number for a in e.args)

    def cast_numbers(e: sp.Function) -> sp.Expr:
        return e.func(*(in_float(a, *anchors) if a.is_number else a for a in e.args), evaluate=False)

    def rewrite(expr: sp.Expr) -> sp.Expr:
        expr = expr.xreplace(casts) if casts else expr
        expr = expr.replace(pieces_of_numbers, cast_first_piece)
        if tensor_only:
            expr = expr.replace(tensor_only_call, cast_numbers)
        return expr

    return rewrite


def _is_one_plus_exp(expr: sp.Expr) -> bool:
    return (
        expr.is_Add and len(expr.args) == 2 and sp.S.One in expr.args and any(isinstance(a, sp.exp) for a in expr.args)
    )


def _exp_argument(expr: sp.Expr) -> sp.Expr:
    return next(a for a in expr.args if isinstance(a, sp.exp)).args[0]


# Forms both torch and JAX compute in one fused, more accurate operation.
# Rules are brought to them before anything is differentiated, so a derived
# derivative is as stable as the frameworks' own: log(1 + exp(x)) would
# otherwise differentiate to exp(x) / (1 + exp(x)), inf / inf = nan at x = 100
# in float32.
CANONICAL_FORMS = (
    ReplaceOptim(  # log(1 + exp(u)) -> softplus(u); log1p_opt would make log(1 + exp(-x)) -x + log1p(exp(x))
        lambda e: isinstance(e, sp.log) and _is_one_plus_exp(e.args[0]),
        lambda e: softplus(_exp_argument(e.args[0])),
    ),
    log1p_opt,  # log(1 + u) -> log1p(u)
    expm1_opt,  # exp(u) - 1 -> expm1(u)
    ReplaceOptim(  # log1p(exp(u)) -> softplus(u)
        lambda e: isinstance(e, log1p) and isinstance(e.args[0], sp.exp),
        lambda e: softplus(e.args[0].args[0]),
    ),
    ReplaceOptim(  # 1 / (1 + exp(u)) -> sigmoid(-u)
        lambda e: e.is_Pow and e.exp == -1 and _is_one_plus_exp(e.base),
        lambda e: sigmoid(-_exp_argument(e.base)),
    ),
    ReplaceOptim(  # 1 - sigmoid(-u) -> sigmoid(u), one operation fewer
        lambda e: e.is_Add and len(e.args) == 2 and sp.S.One in e.args and any(_is_minus_sigmoid(a) for a in e.args),
        lambda e: sigmoid(-next(a for a in e.args if _is_minus_sigmoid(a)).args[1].args[0]),
    ),
    ReplaceOptim(  # exp(u) * sigmoid(-u) -> sigmoid(u): the product overflows where the sigmoid underflows
        lambda e: e.is_Mul and _exp_times_sigmoid(e) is not None,
        lambda e: _exp_times_sigmoid(e),
    ),
)


def _is_minus_sigmoid(expr: sp.Expr) -> bool:
    return (
        expr.is_Mul
        and len(expr.args) == 2
        and expr.args[0] == -1
        and isinstance(expr.args[1], sigmoid)
        and expr.args[1].args[0].could_extract_minus_sign()
    )


def _exp_times_sigmoid(product: sp.Mul) -> sp.Expr | None:
    """exp(u) * sigmoid(-u) * rest -> sigmoid(u) * rest, or None where the product has no such pair."""
    factors = list(product.args)
    for e in (f for f in factors if isinstance(f, sp.exp)):
        for s in (f for f in factors if isinstance(f, sigmoid)):
            if sp.expand(e.args[0] + s.args[0]) == 0:
                rest = [f for f in factors if f is not e and f is not s]
                return sp.Mul(*rest, sigmoid(e.args[0]))
    return None


def canonical(expr: sp.Expr, forms: Sequence[ReplaceOptim] = CANONICAL_FORMS) -> sp.Expr:
    """`expr` with the sums and compositions that have a fused form (log1p, expm1, softplus, sigmoid) rewritten."""
    return optimize(expr, forms)
