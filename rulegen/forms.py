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

from collections.abc import Callable, Iterable, Mapping, Sequence

import sympy as sp
from sympy.codegen.cfunctions import log1p
from sympy.codegen.rewriting import ReplaceOptim, expm1_opt, log1p_opt, optimize

from rulegen.functions import TORCH_TENSOR_ONLY, in_float, one_plus_erf, sigmoid, sigmoid_product, silu, softplus
from rulegen.spec import Rule


def float_anchors(rule: Rule, symbols: Mapping[str, sp.Symbol]) -> tuple[sp.Symbol, ...]:
    """The rule's float arrays, whose promoted dtype every value takes."""
    return tuple(symbols[i.name] for i in rule.inputs if not i.static and i.dtype == "float")


def integral_arrays(rule: Rule, symbols: Mapping[str, sp.Symbol]) -> tuple[sp.Symbol, ...]:
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


def torch_forms(scalars: Iterable[str], integral: Iterable[str]) -> Callable[[sp.Expr], sp.Expr]:
    """A rewrite of products with a sigmoid into torch's one-kernel forms.

    `a * sigmoid(beta * u)` is softplus's backward, and `u * sigmoid(u)` is
    silu: one pass over memory each where sigmoid and the multiplication are
    two.  `scalars` name the static inputs (Python numbers, which the native
    kernels do not take as tensors), `integral` the integer and boolean
    arrays (silu refuses them; softplus's backward promotes them).
    """
    scalars, integral = frozenset(scalars), frozenset(integral)

    def operand(expr: sp.Expr) -> bool:
        """A float tensor a native kernel takes: not a Python number, not an integer mask (`torch.where(c, 1, 0)`)."""
        return any(s.name not in scalars for s in expr.free_symbols) and not expr.has(sp.Piecewise)

    def rewrite(product: sp.Mul) -> sp.Expr:
        factors = list(product.args)
        k = next((k for k, f in enumerate(factors) if isinstance(f, sigmoid) and operand(f)), None)
        if k is None:
            return product
        tensors = [s for s in factors[k].free_symbols if s.name not in scalars]
        beta, u = factors[k].args[0].as_independent(*tensors, as_Add=False)
        if u.could_extract_minus_sign():  # the sign rides on beta, not on a negated copy of u
            beta, u = -beta, -u
        if beta == 1 and u in factors and not any(s.name in integral for s in u.free_symbols):
            rest = [f for j, f in enumerate(factors) if j != k]
            rest.remove(u)
            return sp.Mul(*rest, silu(u))
        candidates = [j for j, f in enumerate(factors) if j != k and operand(f)]
        if not candidates:
            return product
        a = min(candidates, key=lambda j: (not factors[j].is_Atom, j))  # a bare name needs no pass of its own
        rest = [f for j, f in enumerate(factors) if j not in (a, k)]
        return sp.Mul(*rest, sigmoid_product(factors[a], u, beta))

    return lambda expr: expr.replace(lambda e: e.is_Mul, rewrite)


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
    if not shared:
        return lambda expr: expr

    def pieces(u: sp.Expr, at_least_zero: sp.Expr, below: sp.Expr) -> sp.Expr:
        return sp.Piecewise((at_least_zero, sp.Ge(u, 0)), (below, True))

    def rewrite(f: sp.Function) -> sp.Expr:
        u = canonical(f.args[0])
        if u not in shared:
            return f
        negated = u != f.args[0]
        e = sp.exp(-sp.Abs(u))
        if isinstance(f, softplus):
            return (pieces(u, 0, -u) if negated else pieces(u, u, 0)) + log1p(e)
        return (pieces(u, e, 1) if negated else pieces(u, 1, e)) / (1 + e)

    return lambda expr: expr.replace(lambda e: isinstance(e, softplus | sigmoid), rewrite)


def _erf_term(term: sp.Expr, constant: sp.Expr) -> sp.Expr | None:
    """u where `term` is `constant * erf(u)`; -u where it is `-constant * erf(u)`."""
    coefficient, rest = term.as_coeff_Mul()
    if not isinstance(rest, sp.erf):
        return None
    if coefficient == constant:
        return rest.args[0]
    if coefficient == -constant:
        return -rest.args[0]
    return None


def _one_plus_erf(total: sp.Add) -> sp.Expr:
    constant, terms = total.as_coeff_Add()
    for term in sp.Add.make_args(terms):
        u = _erf_term(term, constant) if constant != 0 else None
        if u is not None:
            return terms - term + constant * one_plus_erf(u)
    return total


# Torch's own: `erfc` is one kernel where `erf` then `+ 1` is two (2^22
# float32: 1.6 ms against 2.9 ms), and exact where erf(u) nears -1. XLA's
# erfc costs twice its erf, so JAX keeps `1 + erf(u)`.
TORCH_FUSED_FORMS = (
    *CANONICAL_FORMS,
    ReplaceOptim(  # c + c*erf(u) -> c*erfc(-u), c - c*erf(u) -> c*erfc(u)
        lambda e: e.is_Add and _one_plus_erf(e) is not e,
        _one_plus_erf,
    ),
)
