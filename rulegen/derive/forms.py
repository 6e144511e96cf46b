"""Rewrites of symbolic rules into canonical stable forms.

`canonical` brings an expression to the fused, stable forms both frameworks
have (softplus, sigmoid, log1p, expm1) before it is differentiated; silu's
derivative is written as one where torch's intermediates are chosen.  What
each backend then prints of an expression (its float dtypes, its one-kernel
products) is the planners' (rulegen.plan.forms).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import sympy as sp
from sympy.codegen.cfunctions import expm1, log1p
from sympy.codegen.rewriting import ReplaceOptim, optimize

from rulegen.derive.functions import (
    BY_NAME,
    Piecewise,
    betaln,
    erfcx,
    gamma_sign,
    logaddexp,
    one_plus_erf,
    power_log,
    power_slope,
    sigmoid,
    sigmoid_slope,
    silu_derivative,
    softplus,
    xlogy,
)


def with_slopes(expr: sp.Expr) -> sp.Expr:
    """`expr` with each product of sigmoid(u) and sigmoid(-u) written `sigmoid_slope(u)`: the same value, whose
    derivative is the registry's, where autodiff of the product cancels (`functions.sigmoid_slope`).

    A partial in this form is right at the next order too: tanh's, 4 sigmoid(2x) sigmoid(-2x), differentiates
    to -2 tanh(x) tanh'(x), not to a difference of two logistics that is 0 at x = 1e-30.
    """

    def logistic(factor: sp.Expr) -> tuple[sp.Expr, sp.Expr] | None:
        base, exponent = factor.as_base_exp()
        if isinstance(base, sigmoid) and exponent.is_Integer and exponent > 0:
            return base.args[0], exponent
        return None

    def pair(product: sp.Mul) -> sp.Expr:
        powers: dict[sp.Expr, sp.Expr] = {}
        rest = []
        for factor in product.args:
            found = logistic(factor)
            if found is None:
                rest.append(factor)
            else:
                powers[found[0]] = powers.get(found[0], sp.S.Zero) + found[1]
        slopes = []
        for u in list(powers):
            if u.could_extract_minus_sign() or -u not in powers:
                continue
            k = min(powers[u], powers[-u])
            slopes.append(sigmoid_slope(u) ** k)
            powers[u] -= k
            powers[-u] -= k
        if not slopes:
            return product
        return sp.Mul(*rest, *slopes, *(sigmoid(u) ** k for u, k in powers.items() if k))

    return expr.replace(lambda e: e.is_Mul and e.has(sigmoid), pair)


def _is_one_plus_exp(expr: sp.Expr) -> bool:
    return (
        expr.is_Add and len(expr.args) == 2 and sp.S.One in expr.args and any(isinstance(a, sp.exp) for a in expr.args)
    )


def _exp_argument(expr: sp.Expr) -> sp.Expr:
    return next(a for a in expr.args if isinstance(a, sp.exp)).args[0]


@dataclass(frozen=True)
class CanonicalForm:
    """One rewrite into a fused form, with the registered functions it writes, which say where it holds."""

    rewrite: ReplaceOptim
    #: The registered functions (by name) the rewritten expression calls that the original did not.
    writes: tuple[str, ...]

    @property
    def domain(self) -> Literal["real", "complex"]:
        """`complex` where every function it writes is holomorphic (log1p, expm1), else `real`.

        softplus and sigmoid are real functions to the frameworks: JAX's softplus
        of a complex z is the real formula's `where(z >= 0, ...)`, wrong, and
        torch's raises for complex dtypes.  A holomorphic rule keeps its exponentials.
        """
        return "complex" if all(BY_NAME[name].holomorphic for name in self.writes) else "real"


def _one_plus(total: sp.Expr) -> sp.Expr | None:
    """u where `total` is the sum 1 + u, else None."""
    if not total.is_Add:
        return None
    constant, rest = total.as_coeff_Add()
    return rest if constant == 1 and rest.free_symbols else None


def _log1p_of(e: sp.log) -> sp.Expr:
    u = _one_plus(e.args[0])
    return e if u is None else log1p(u)


def _exp_minus_constant(total: sp.Expr) -> tuple[tuple[tuple[sp.Expr, sp.Expr], ...], sp.Expr] | None:
    """((c, u) per term, the rest) where `total` is the sum of c*(exp(u) - 1) + the rest, c numbers: either one
    term's c is minus the sum's constant, or all the exponentials' c together are; else None."""
    constant, rest = total.as_coeff_Add()
    if constant == 0:
        return None
    terms = [(term, *term.as_coeff_Mul()) for term in sp.Add.make_args(rest)]
    exponentials = [(term, c, f) for term, c, f in terms if isinstance(f, sp.exp)]
    for term, c, f in exponentials:
        if c == -constant:
            return ((c, f.args[0]),), rest - term
    if exponentials and sum(c for _, c, _ in exponentials) == -constant:
        return tuple((c, f.args[0]) for _, c, f in exponentials), rest - sp.Add(*(t for t, _, _ in exponentials))
    return None


def _expm1_of(total: sp.Expr) -> sp.Expr:
    found = _exp_minus_constant(total)
    if found is None:
        return total
    terms, rest = found
    return sp.Add(*(c * expm1(u) for c, u in terms), rest)


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


def _log_sigmoid(e: sp.Expr) -> sp.Expr | None:
    """-softplus(-u) where `e` is log(sigmoid(u)), -softplus(u) where it is log1p(-sigmoid(u)), else None."""
    if isinstance(e, sp.log) and isinstance(e.args[0], sigmoid):
        return -softplus(-e.args[0].args[0])
    if isinstance(e, log1p) and isinstance(-e.args[0], sigmoid):
        return -softplus((-e.args[0]).args[0])
    return None


def _one_plus_erf(total: sp.Add) -> sp.Expr:
    constant, terms = total.as_coeff_Add()
    for term in sp.Add.make_args(terms):
        u = _erf_term(term, constant) if constant != 0 else None
        if u is not None:
            return terms - term + constant * one_plus_erf(u)
    return total


# Forms both torch and JAX compute in one fused, more accurate operation.
# Rules are brought to them before anything is differentiated, so a derived
# derivative is as stable as the frameworks' own: log(1 + exp(x)) would
# otherwise differentiate to exp(x) / (1 + exp(x)), inf / inf = nan at x = 100
# in float32.
CANONICAL_FORMS = (
    CanonicalForm(  # log(1 + exp(u)) -> softplus(u); log1p_opt would make log(1 + exp(-x)) -x + log1p(exp(x))
        ReplaceOptim(
            lambda e: isinstance(e, sp.log) and _is_one_plus_exp(e.args[0]),
            lambda e: softplus(_exp_argument(e.args[0])),
        ),
        writes=("softplus",),
    ),
    # log(1 + u) -> log1p(u) and c*exp(u) - c -> c*expm1(u), where the sum is written so and nowhere else: sympy's
    # log1p_opt and expm1_opt factor the whole expression first (log(1 - exp(-x)) became -x + log(expm1(x)), inf at
    # x = 800; a stabilised sum of quotients was brought back over one overflowing denominator).  Other forms of the
    # sum are the stabilising search's, chosen by measured error (rulegen.derive.stabilise).
    CanonicalForm(
        ReplaceOptim(lambda e: isinstance(e, sp.log), _log1p_of),
        writes=("log1p",),
    ),
    CanonicalForm(
        ReplaceOptim(lambda e: e.is_Add, _expm1_of),
        writes=("expm1",),
    ),
    CanonicalForm(  # log1p(exp(u)) -> softplus(u)
        ReplaceOptim(
            lambda e: isinstance(e, log1p) and isinstance(e.args[0], sp.exp),
            lambda e: softplus(e.args[0].args[0]),
        ),
        writes=("softplus",),
    ),
    # log(sigmoid(u)) -> -softplus(-u), log1p(-sigmoid(u)) -> -softplus(u): log(sigmoid(17)) is log(1) = 0 in
    # float32 (exact -4.1e-8), log1p(-sigmoid(-17)) the same, and log1p(-sigmoid(89)) is log(0) = -inf.
    CanonicalForm(ReplaceOptim(lambda e: _log_sigmoid(e) is not None, lambda e: _log_sigmoid(e)), writes=("softplus",)),
    CanonicalForm(  # 1 / (1 + exp(u)) -> sigmoid(-u)
        ReplaceOptim(
            lambda e: e.is_Pow and e.exp == -1 and _is_one_plus_exp(e.base),
            lambda e: sigmoid(-_exp_argument(e.base)),
        ),
        writes=("sigmoid",),
    ),
    CanonicalForm(  # 1 - sigmoid(-u) -> sigmoid(u), one operation fewer
        ReplaceOptim(
            lambda e: (
                e.is_Add and len(e.args) == 2 and sp.S.One in e.args and any(_is_minus_sigmoid(a) for a in e.args)
            ),
            lambda e: sigmoid(-next(a for a in e.args if _is_minus_sigmoid(a)).args[1].args[0]),
        ),
        writes=("sigmoid",),
    ),
    CanonicalForm(  # exp(u) * sigmoid(-u) -> sigmoid(u): the product overflows where the sigmoid underflows
        ReplaceOptim(
            lambda e: e.is_Mul and _exp_times_sigmoid(e) is not None,
            lambda e: _exp_times_sigmoid(e),
        ),
        writes=("sigmoid",),
    ),
    # Forms of rules that overflow at wide magnitudes (issue 25), each holding on the whole real line.
    CanonicalForm(  # log(b**u + c**v) -> logaddexp(u*log(b), v*log(c)): log(2**x + 2**y)/log(2) is logaddexp2
        ReplaceOptim(
            lambda e: _exponents_of_log_of_sum(e) is not None, lambda e: logaddexp(*_exponents_of_log_of_sum(e) or ())
        ),
        writes=("logaddexp",),
    ),
    CanonicalForm(  # gamma(u) / gamma(v) -> sgn * exp(loggamma(u) - loggamma(v)): poch(x, n) overflows past x = 171
        ReplaceOptim(lambda e: e.is_Mul and _gamma_ratio(e) is not None, lambda e: _gamma_ratio(e)),
        writes=("loggamma", "gamma_sign", "exp"),
    ),
    CanonicalForm(  # log(|gamma(u)|) -> loggamma(u), the registry's log|Gamma|: |Gamma| is 0 below x = -184 (float64)
        # and inf past 171.6, where its log is finite (-82110.33 at x = -10000.3)
        ReplaceOptim(lambda e: _log_abs_gamma(e) is not None, lambda e: sp.loggamma(_log_abs_gamma(e))),
        writes=("loggamma",),
    ),
    CanonicalForm(  # log(beta(a, b)) -> betaln(a, b) of positive a, b: beta(11, 1e308) is 0, its log -7792.5
        ReplaceOptim(lambda e: isinstance(e, sp.log) and _positive_beta(e.args[0]), lambda e: betaln(*e.args[0].args)),
        writes=("betaln",),
    ),
    # c + c*erf(u) -> c*erfc(-u), c - c*erf(u) -> c*erfc(u): 1 + erf(u) loses every bit where erf(u) nears -1 (gelu's
    # x * Phi(x), value and derivative, 8.4e6 eps off below x = -5 in float32; jax.nn.gelu computes erfc).  One torch
    # kernel where `erf` then `+ 1` is two; XLA's erfc costs about twice its erf, and inductor's CPU erfc is a scalar
    # loop: accuracy first.
    CanonicalForm(
        ReplaceOptim(lambda e: e.is_Add and _one_plus_erf(e) is not e, _one_plus_erf),
        writes=("one_plus_erf",),
    ),
    # p * b**(p - 1) -> power_slope(b, p): x**y's derivative in x, right where the power overflows (x = 2.5e-311,
    # y = -1e-100: -5.3e210) and differentiated by its stated partials
    CanonicalForm(
        ReplaceOptim(lambda e: e.is_Mul and _power_derivative(e) is not None, lambda e: _power_derivative(e)),
        writes=("power_slope",),
    ),
    # b**p * log(b) -> power_log(b, p), xlogy(b**p, b): 0 * -inf, nan, at b = 0, where the limit and the
    # frameworks' derivative are 0; differentiated by its stated partials
    CanonicalForm(
        ReplaceOptim(lambda e: e.is_Mul and _power_times_log(e) is not None, lambda e: _power_times_log(e)),
        writes=("power_log", "xlogy"),
    ),
    CanonicalForm(  # log(erfcx(u)) -> u**2 + log(erfc(u)) where u < 0: erfcx(u) ~ 2*exp(u**2) overflows there
        ReplaceOptim(
            lambda e: isinstance(e, sp.log) and isinstance(e.args[0], erfcx), lambda e: _log_erfcx(e.args[0].args[0])
        ),
        writes=("erfc", "Piecewise"),
    ),
)


def _exponents_of_log_of_sum(expr: sp.Expr) -> tuple[sp.Expr, sp.Expr] | None:
    """(u*log(b), v*log(c)) of log(b**u + c**v) (exp(u) too), the bases positive numbers; None for any other."""
    if not (isinstance(expr, sp.log) and expr.args[0].is_Add and len(expr.args[0].args) == 2):
        return None
    exponents = []
    for term in expr.args[0].args:
        if isinstance(term, sp.exp):
            exponents.append(term.args[0])
        elif term.is_Pow and term.base.is_number and term.base.is_positive and not term.exp.is_number:
            exponents.append(term.exp * sp.log(term.base))
        else:
            return None
    return exponents[0], exponents[1]


def _power_derivative(product: sp.Mul) -> sp.Expr | None:
    """p * b**(p - 1) (p a variable) times the rest, as `power_slope(b, p)` times the rest; None for any other
    product.  The runtime computes it right where the power overflows (x**(-1 - 1e-100) at a subnormal x) and
    below b = 0 (p - 1 rounds to p past 2**53), and differentiates it by its stated partials, whole: autodiff of
    the product is 0 * inf at p = 0 beside a subnormal b, and p (p - 1) times an overflowed b**(p - 2)
    (`functions.power_slope`)."""
    factors = list(product.args)
    for f in factors:
        if f.is_Pow and not f.base.is_number and not f.exp.is_number and (f.exp + 1) in factors:
            p, b = f.exp + 1, f.base
            rest = [g for g in factors if g is not f]
            rest.remove(p)
            return sp.Mul(*rest, power_slope(b, p))
    return None


def _power_times_log(product: sp.Mul) -> sp.Expr | None:
    """A product of b**p and log(b) as `power_log(b, p)` times the rest (x**y's derivative in y, xlogy(b**p, b)
    differentiated by its stated partials: autodiff of xlogy's log(b) times b**p log(b) is -inf * 0 at b = 0),
    xlogy(b**p, b) of a number p; None without both."""
    logs = {f.args[0]: f for f in product.args if isinstance(f, sp.log)}
    for f in product.args:
        if f.is_Pow and not f.base.is_number and f.base in logs:
            rest = list(product.args)
            rest.remove(f)
            rest.remove(logs[f.base])
            # A number's power is a function of b alone, whose xlogy autodiff differentiates as it is.
            found = xlogy(f, f.base) if f.exp.is_number else power_log(f.base, f.exp)
            return sp.Mul(*rest, found)
    return None


def _positive_beta(expr: sp.Expr) -> bool:
    """Whether `expr` is beta(a, b) of a and b known positive, where log(beta) is log|beta|, betaln."""
    return isinstance(expr, sp.beta) and all(a.is_positive for a in expr.args)


def _gamma_ratio(product: sp.Mul) -> sp.Expr | None:
    """A product's gammas over gammas as the sign times the exp of their log|Gamma|s; None without both kinds."""
    powers = [(f.base, f.exp) if f.is_Pow else (f, sp.S.One) for f in product.args]
    gammas = [(b.args[0], e) for b, e in powers if isinstance(b, sp.gamma) and e.is_Integer]
    if not (any(e > 0 for _, e in gammas) and any(e < 0 for _, e in gammas)):
        return None
    rest = [f for f, (b, e) in zip(product.args, powers, strict=True) if not (isinstance(b, sp.gamma) and e.is_Integer)]
    sign = sp.Mul(*(gamma_sign(u) ** abs(e) for u, e in gammas))
    return sp.Mul(*rest, sign, sp.exp(sp.Add(*(e * sp.loggamma(u) for u, e in gammas))))


def _log_abs_gamma(expr: sp.Expr) -> sp.Expr | None:
    """u of log(Abs(gamma(u))); None for any other expression."""
    if isinstance(expr, sp.log) and isinstance(expr.args[0], sp.Abs) and isinstance(expr.args[0].args[0], sp.gamma):
        return expr.args[0].args[0].args[0]
    return None


def _log_erfcx(u: sp.Expr) -> sp.Expr:
    """log(erfcx(u)) as u**2 + log(erfc(u)) for u < 0, each branch's argument finite where `where` drops it."""
    negative = Piecewise((u, u < 0), (sp.S.Zero, True))
    positive = Piecewise((u, u >= 0), (sp.S.Zero, True))
    return Piecewise((negative**2 + sp.log(sp.erfc(negative)), u < 0), (sp.log(erfcx(positive)), True))


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


def canonical(
    expr: sp.Expr, forms: Sequence[CanonicalForm] = CANONICAL_FORMS, *, complex_rule: bool = False
) -> sp.Expr:
    """`expr` with the sums and compositions that have a fused form (log1p, expm1, softplus, sigmoid) rewritten.

    `complex_rule`: a holomorphic rule's, whose arguments are complex: only the forms that hold there.
    """
    return optimize(expr, [f.rewrite for f in forms if f.domain == "complex" or not complex_rule])


def silu_derivatives(scalars: Iterable[str], integral: Iterable[str]) -> CanonicalForm:
    """A rewrite of silu's derivative, in whatever form sympy derived it, into `a * silu_derivative(u)`.

    sympy differentiates `u * sigmoid(u)` into `u' * (u * (1 - s) * s + s)`,
    s = sigmoid(u), often multiplied out (`4*x*(1 - s)*s + 2*s` for u = 2x).
    A sum or product that is quadratic in s is `a * silu_derivative(u) + c`
    where its coefficients are those of a * (s + u*s - u*s**2); sigmoid(-u)
    counts as 1 - s (the canonical forms write 1 - sigmoid(-u) so).  torch
    then computes `cotangent * a * silu_derivative(u)` as silu_backward, one
    kernel (`torch_forms`).  Written before the intermediates to save are
    chosen, so that `x * sigmoid(x)` inside it is no reason to keep `out`.
    `u` must be a float tensor expression: no static input (a Python
    number), no integer array, no selection.
    """
    scalars, integral = frozenset(scalars), frozenset(integral)

    def argument(u: sp.Expr) -> bool:
        names = {s.name for s in u.free_symbols}
        return bool(names) and not names & (scalars | integral) and not u.has(sp.Piecewise)

    def rewrite(expr: sp.Expr) -> sp.Expr:
        arguments = {f.args[0] for f in expr.atoms(sigmoid) if argument(f.args[0])}
        found = [
            _as_silu_derivative(expr, u) for u in sorted(arguments | {-u for u in arguments}, key=sp.default_sort_key)
        ]
        # silu'(u) = 1 - silu'(-u), so both signs match: the one without a constant stays a product, which a
        # cotangent multiplies in one kernel; then the fewer operations.
        return min(
            (c0 + a * silu_derivative(u) for c0, a, u in filter(None, found)),
            key=lambda e: (not e.is_Mul and not isinstance(e, silu_derivative), sp.count_ops(e)),
            default=expr,
        )

    return CanonicalForm(
        ReplaceOptim(lambda e: (e.is_Add or e.is_Mul) and e.has(sigmoid), rewrite), writes=("silu_derivative",)
    )


def _as_silu_derivative(expr: sp.Expr, u: sp.Expr) -> tuple[sp.Expr, sp.Expr, sp.Expr] | None:
    """(c, a, u) where `expr` is `c + a * silu_derivative(u)`, or None where it is no such sum."""
    s = sp.Dummy("s")
    coefficients = _quadratic(expr.xreplace({sigmoid(u): s, sigmoid(-u): 1 - s}), s)
    if coefficients is None:
        return None
    c0, c1, c2 = coefficients
    # a * silu_derivative(u) = a*s + a*u*s - a*u*s**2: c2 = -a*u and c1 = a*(1 + u).
    if c2 == 0 or sp.expand(c1 * u + c2 * (1 + u)) != 0:
        return None
    a = -c2 / u
    if u.is_Add:  # sympy multiplies a number into a sum: -2*(x + y) is -2*x - 2*y, which no division undoes
        a = sp.cancel(a)
    return c0, a, u


def _quadratic(expr: sp.Expr, s: sp.Dummy) -> tuple[sp.Expr, sp.Expr, sp.Expr] | None:
    """`expr` as the coefficients of c0 + c1*s + c2*s**2, free of s; None where it is no such polynomial.

    Products are multiplied out in s only: the coefficients keep their factors as written.
    """
    if not expr.has(s):
        return expr, sp.S.Zero, sp.S.Zero
    if expr == s:
        return sp.S.Zero, sp.S.One, sp.S.Zero
    if expr.is_Add:
        terms = [_quadratic(a, s) for a in expr.args]
        if any(t is None for t in terms):
            return None
        c0, c1, c2 = (sp.Add(*c) for c in zip(*terms, strict=True))
        return c0, c1, c2
    factors: list[sp.Expr] = []
    if expr.is_Mul:
        factors = list(expr.args)
    elif expr.is_Pow and expr.exp.is_Integer and expr.exp > 0:
        factors = [expr.base] * int(expr.exp)
    else:
        return None  # s inside a function, a quotient or a root
    product: tuple[sp.Expr, sp.Expr, sp.Expr] | None = (sp.S.One, sp.S.Zero, sp.S.Zero)
    for factor in factors:
        polynomial = _quadratic(factor, s)
        if polynomial is None or product is None:
            return None
        product = _times(product, polynomial)
    return product


def _times(p: Sequence[sp.Expr], q: Sequence[sp.Expr]) -> tuple[sp.Expr, sp.Expr, sp.Expr] | None:
    """The product of two quadratics in s, None where it has an s**3 or s**4 term."""
    terms: list[list[sp.Expr]] = [[] for _ in range(5)]
    for i, a in enumerate(p):
        for j, b in enumerate(q):
            if a != 0 and b != 0:
                terms[i + j].append(a * b)
    if terms[3] or terms[4]:
        return None
    return sp.Add(*terms[0]), sp.Add(*terms[1]), sp.Add(*terms[2])
