"""The rewrite families: each makes candidate forms of any expression, none knows a particular one."""

from __future__ import annotations

import functools
import itertools
import math
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence

import sympy as sp
from sympy.codegen.cfunctions import expm1, log1p

from rulegen.computation.quotients import power_of_a_quotient
from rulegen.derive.expr import log_difference, reciprocal_difference
from rulegen.derive.forms import canonical
from rulegen.derive.functions import (
    Piecewise,
    divided,
    erfcx,
    hypot,
    isfinite,
    log1pmx,
    log_ndtr,
    ndtr,
    power_product,
    sigmoid,
    softplus,
    where_finite,
)
from rulegen.derive.stabilise.asymptotic import (
    gamma_difference,
    grouped_argument_series,
    held,
    logs_against_gamma,
    one_argument_series,
    pole_weight,
    released,
    several_argument_series,
    several_argument_series_in_bases,
    zero_sum_groups,
)
from rulegen.derive.stabilise.budget import BUDGET
from rulegen.derive.stabilise.points import _attempt


def _tidy(expr: sp.Expr) -> sp.Expr:
    """A difference of arguments brought to its simplest: (x + e) - x is e."""
    simpler = sp.cancel(sp.expand(expr))
    return min((simpler, sp.factor(simpler)), key=sp.count_ops)


def _root_difference(a: sp.Expr, b: sp.Expr, exponent: sp.Rational) -> sp.Expr | None:
    """a**e - b**e without cancellation, for e = 1/n or -1/n: (a - b) over the sum that rationalises it."""
    if exponent.p == -1:
        # a**(-1/n) - b**(-1/n) = (b**(1/n) - a**(1/n)) / (a*b)**(1/n)
        inner = _root_difference(b, a, -exponent)
        return None if inner is None else inner * a**exponent * b**exponent
    if exponent.p != 1 or exponent.q > 4:
        return None
    n = exponent.q
    total = sp.Add(*(a ** sp.Rational(k, n) * b ** sp.Rational(n - 1 - k, n) for k in range(n)))
    return _tidy(a - b) / total


#: f(a) - f(b) for one-argument functions, as identities that leave no difference of two close values.
_DIFFERENCES: Mapping[type, Callable[[sp.Expr, sp.Expr], sp.Expr]] = {
    sp.sin: lambda a, b: 2 * sp.cos(_tidy((a + b) / 2)) * sp.sin(_tidy((a - b) / 2)),
    sp.cos: lambda a, b: -2 * sp.sin(_tidy((a + b) / 2)) * sp.sin(_tidy((a - b) / 2)),
    sp.tan: lambda a, b: sp.sin(_tidy(a - b)) / (sp.cos(a) * sp.cos(b)),
    sp.atan: lambda a, b: sp.atan(_tidy(a - b) / _tidy(1 + a * b)),
    # By how close a and b are: log1p of the difference over b, the log of their ratio, or the logs' difference.
    sp.log: lambda a, b: log_difference(a, b, _tidy(a - b), kept=held),
    log1p: lambda a, b: log_difference(1 + a, 1 + b, _tidy(a - b), kept=held),
    sp.exp: lambda a, b: sp.exp(b) * expm1(_tidy(a - b)),
    softplus: lambda a, b: _softplus_difference(a, b),
}


def _softplus_difference(a: sp.Expr, b: sp.Expr) -> sp.Expr:
    """softplus(a) - softplus(b) without the cancellation of two close values: a where b = -a (softplus(u) is
    u + softplus(-u): a log-odds, log(sigmoid(u)) - log(1 - sigmoid(u)), is u), else log1p(sigmoid(b) expm1(a - b)),
    as (1 + exp(a)) / (1 + exp(b)) is 1 + sigmoid(b) (exp(a - b) - 1)."""
    if _tidy(a + b) == 0:
        return a
    return log1p(sigmoid(b) * expm1(_tidy(a - b)))


def _power_difference(a: sp.Expr, b: sp.Expr, exponent: sp.Expr) -> sp.Expr:
    """a**p - b**p for an exponent p that is no integer: rationalised where p is 1/n or -1/n, else
    b**p * expm1(p * log1p((a - b)/b)); nothing cancels in either."""
    if exponent.is_Rational:
        rationalised = _root_difference(a, b, exponent)
        if rationalised is not None:
            return rationalised
    return b**exponent * expm1(exponent * log1p(_tidy((a - b) / b)))


def _difference(f: sp.Expr, g: sp.Expr) -> sp.Expr | None:
    """f - g rewritten without the cancellation of two like functions, or None where no identity applies."""
    if f.is_Pow and g.is_Pow:
        if f.exp != g.exp or f.exp.is_Integer:
            return None
        return _power_difference(f.base, g.base, f.exp)
    joined = gamma_difference(f, g, _tidy)
    if joined is not None:
        return joined
    identity = _DIFFERENCES.get(f.func)
    if identity is None or f.func != g.func or len(f.args) != 1:
        return None
    return identity(f.args[0], g.args[0])


def _minus_constant(f: sp.Expr, c: sp.Expr) -> sp.Expr | None:
    """f - c for a function f and c = 1 or -1 where the difference cancels at some argument."""
    if isinstance(f, sp.cos) and c in (1, -1):
        # cos(u) - 1 cancels near u = 0, cos(u) + 1 near pi.
        half = f.args[0] / 2
        return -2 * sp.sin(half) ** 2 if c == 1 else 2 * sp.cos(half) ** 2
    if isinstance(f, sp.tanh) and c in (1, -1):
        # tanh(u) -+ 1 rounds to 0 past |u| = 19 (float64) on the side where tanh(u) nears -+1; tanh(u) is
        # 2 sigmoid(2u) - 1.
        return -c * 2 * sigmoid(-c * 2 * f.args[0])
    if isinstance(f, sp.exp) and c == 1:
        return expm1(f.args[0])
    if isinstance(f, sigmoid) and c == 1:
        # 1 - sigmoid(u) rounds to 0 past u = 37 (float64), where sigmoid(-u) keeps its digits.
        return -sigmoid(-f.args[0])
    if isinstance(f, sigmoid) and c == sp.Rational(1, 2):
        # sigmoid(u) - 1/2 cancels near u = 0 (1 - 2 sigmoid(-u) is a logistic's odd part): it is tanh(u/2)/2.
        return sp.tanh(f.args[0] / 2) / 2
    if f.is_Pow and f.exp == 2 and isinstance(f.base, sp.tanh) and c == 1:
        # 1 - tanh(u)**2 loses log2(1 / (1 - tanh(u)**2)) bits (13 at u = 5) and is 0 past 19; tanh(u) is
        # 2 sigmoid(2u) - 1.  Not 1 / cosh(u)**2: its derivative is 0 * inf = nan where cosh overflows.
        u = f.base.args[0]
        return -4 * sigmoid(2 * u) * sigmoid(-2 * u)
    if f.is_Pow and not f.exp.is_Integer and c == 1:
        return _power_difference(f.base, sp.S.One, f.exp)
    return None


def _split_term(term: sp.Expr) -> list[tuple[sp.Expr, sp.Expr]]:
    """Each (coefficient, function) factorisation of a term, one per factor that is a function or a root."""
    factors = sp.Mul.make_args(term)
    found = []
    for k, f in enumerate(factors):
        if (
            isinstance(f, sp.Function)
            or (f.is_Pow and not f.exp.is_Integer and f.base.free_symbols)
            or (f.is_Pow and f.exp == 2 and isinstance(f.base, sp.tanh))
        ):
            found.append((sp.Mul(*(factors[:k] + factors[k + 1 :])), f))
    return found


def _constant_ratio(term: sp.Expr, coefficient: sp.Expr) -> sp.Expr | None:
    """c in (1, -1, 1/2) where term = -c * coefficient, else None."""
    if term.is_number and coefficient.is_number:
        c = sp.nsimplify(-term / coefficient)
        return c if c in (1, -1, sp.Rational(1, 2)) else None
    if term.free_symbols != coefficient.free_symbols:
        return None
    ratio = _ratio_at_a_point(term, coefficient)
    for c in (1, -1, sp.Rational(1, 2)):
        if (ratio is None or abs(ratio + c) <= 1e-9) and sp.expand(term + c * coefficient) == 0:
            return c
    return None


#: Where `_ratio_at_a_point` evaluates: irrational-looking positive values, one per symbol by its name's hash.
_PROBE = tuple(sp.Float(0.61803398874989 + 0.36787944117144 * k, 30) for k in range(16))


def _ratio_at_a_point(term: sp.Expr, coefficient: sp.Expr) -> complex | None:
    """term/coefficient at one point (30 digits), None where either has no nonzero number there: a ratio that is
    not -c there is not -c anywhere, and `expand` over a series' terms is what the identities' time went to (a Beta
    KL's searches, 650 s of CPU in `_constant_ratio`)."""
    top, bottom = _value_at_a_point(term), _value_at_a_point(coefficient)
    if top is None or bottom is None or bottom == 0:
        return None
    return top / bottom


@functools.lru_cache(maxsize=8192)
def _value_at_a_point(expr: sp.Expr) -> complex | None:
    """`expr` at the probe point, each symbol at the probe its name picks, so that a term's value is computed once
    for every pair it is in; None where it has no finite number there.  Two symbols at one probe only let more
    pairs through to `expand`, which decides."""
    point = {s: _PROBE[zlib.crc32(str(s).encode()) % len(_PROBE)] for s in expr.free_symbols}
    try:
        value = complex(expr.xreplace(point).evalf(30))
    except (TypeError, ValueError, ArithmeticError):
        return None
    return value if math.isfinite(value.real) and math.isfinite(value.imag) else None


def _opposite(a: sp.Expr, b: sp.Expr) -> bool:
    """a = -b, tested at a point before it is expanded."""
    ratio = _ratio_at_a_point(a, b)
    if ratio is not None and abs(ratio + 1) > 1e-9:
        return False
    return bool(sp.expand(a + b) == 0)


def _rewrite_sum(total: sp.Expr) -> sp.Expr:
    """The first pair of terms of a sum that is a difference of like functions (or of one and its constant), joined."""
    terms = list(total.args)
    for i, t in enumerate(terms):
        for coefficient, f in _split_term(t):
            for j, u in enumerate(terms):
                if j == i:
                    continue
                joined = None
                for other_coefficient, g in _split_term(u):
                    # Every identity of `_difference` joins two calls of one function.
                    if g != f and g.func == f.func and _opposite(coefficient, other_coefficient):
                        joined = _difference(f, g)
                        if joined is not None:
                            break
                if joined is None and u != 0:
                    # coefficient * f + u = coefficient * (f - c): the constants an identity knows, c = 1, -1, 1/2,
                    # also where u is a term of the sum in other symbols: a Gumbel's partial in its scale,
                    # (loc - x) exp(u)/s**2 + (x - loc)/s**2, is (loc - x) expm1(u)/s**2.
                    c = _constant_ratio(u, coefficient)
                    if c is not None:
                        joined = _minus_constant(f, c)
                if joined is not None:
                    rest = [v for k, v in enumerate(terms) if k not in (i, j)]
                    return sp.Add(coefficient * joined, *rest)
    return total


def _log_of(argument: sp.Expr) -> sp.Expr | None:
    """log(argument) without the rounding of `argument` to 0 or 1 first, or None where no identity applies.

    log(sigmoid(u)) is -softplus(-u) (log(sigmoid(17)) is log(1) = 0 in float32, its partner log(1 - sigmoid(u))
    log(0) = -inf); log(erfc(u)) and log(ndtr(u)) are log_ndtr, which keeps its digits where erfc underflows.
    """
    coefficient, rest = argument.as_coeff_Mul()
    if coefficient.is_positive and coefficient != 1:
        # log(erfc(u) / 2): the constant comes out, and the identity takes the rest.
        found = _log_of(rest)
        return None if found is None else sp.log(coefficient) + found
    if isinstance(argument, sigmoid):
        return -softplus(-argument.args[0])
    if argument.is_Mul or argument.is_Pow:
        return _log_of_product(argument)
    if isinstance(argument, sp.cosh):
        # cosh(u) = exp(|u|) (1 + exp(-2|u|)) / 2, which overflows from |u| = 710 where its log is about |u|.
        size = sp.Abs(argument.args[0])
        return size + softplus(-2 * size) - sp.log(2)
    if isinstance(argument, sp.erfc):
        return log_ndtr(-sp.sqrt(2) * argument.args[0]) + sp.log(2)
    if isinstance(argument, ndtr):
        return log_ndtr(argument.args[0])
    return _log_of_one_plus(argument)


def _log_of_one_plus(argument: sp.Expr) -> sp.Expr | None:
    """log(1 + erf(u)) as log_ndtr, log(1 + exp(u)) as softplus; None for any other argument."""
    if argument.is_Add and len(argument.args) == 2 and sp.S.One in argument.args:
        other = argument.args[1] if argument.args[0] == 1 else argument.args[0]
        if isinstance(other, sp.erf):
            return log_ndtr(sp.sqrt(2) * other.args[0]) + sp.log(2)
        if isinstance(other, sp.exp):
            return softplus(other.args[0])
    return None


def _log_of_product(product: sp.Expr) -> sp.Expr | None:
    """The log of a product of positive factors to integer powers as the sum of their logs, where one of them has
    an identity (`_log_of`): log(sigmoid(z)/sigmoid(-z)), a log-odds, is softplus(z) - softplus(-z), that is z,
    where the quotient overflows from z = 710.  None where no factor has one."""
    parts = [f.as_base_exp() for f in sp.Mul.make_args(product)]
    if not all(b.is_positive and e.is_Integer for b, e in parts):
        return None
    logs = [(b, e, _log_of(b)) for b, e in parts]
    if all(found is None for _, _, found in logs):
        return None
    return sp.Add(*(e * (sp.log(b) if found is None else found) for b, e, found in logs))


def _gaussian_over_tail(product: sp.Expr) -> sp.Expr:
    """exp(-b**2) / erfc(b) as 1 / erfcx(b), and exp(-u**2 / 2) / ndtr(u) as 2 / erfcx(-u / sqrt 2): a Gaussian
    over its own tail is a ratio of two numbers that underflow together (to 0 / 0 from b = 27), which erfcx
    holds apart (a normal log-CDF's partials, an inverse Mills ratio)."""
    factors = list(sp.Mul.make_args(product))
    for k, tail in enumerate(factors):
        if not (tail.is_Pow and tail.exp == -1 and isinstance(tail.base, (sp.erfc, ndtr))):
            continue
        b = tail.base.args[0] if isinstance(tail.base, sp.erfc) else -tail.base.args[0] / sp.sqrt(2)
        scale = 1 if isinstance(tail.base, sp.erfc) else 2
        for j, gaussian in enumerate(factors):
            if isinstance(gaussian, sp.exp) and sp.expand(gaussian.args[0] + b**2) == 0:
                rest = [f for i, f in enumerate(factors) if i not in (j, k)]
                return sp.Mul(*rest, scale / erfcx(b))
    return product


def _hyperbolic_ratio(product: sp.Expr) -> sp.Expr:
    """sinh(u) / cosh(u) as tanh(u): both overflow from |u| = 710 (inf / inf), where tanh(u) is +-1."""
    factors = list(sp.Mul.make_args(product))
    for k, top in enumerate(factors):
        if not isinstance(top, sp.sinh):
            continue
        for j, bottom in enumerate(factors):
            if bottom.is_Pow and bottom.exp.is_negative and bottom.base == sp.cosh(top.args[0]):
                rest = [f for i, f in enumerate(factors) if i not in (j, k)]
                return sp.Mul(*rest, sp.tanh(top.args[0]), sp.cosh(top.args[0]) ** (bottom.exp + 1))
    return product


def _magnitude(product: sp.Expr) -> sp.Expr:
    """u * sign(u) as |u|: a derivative of |u| times u, which sympy leaves apart, and a sum then keeps
    |u| - u sign(u) (softsign's derivative) where it is 0."""
    factors = list(sp.Mul.make_args(product))
    for k, f in enumerate(factors):
        if isinstance(f, sp.sign) and f.args[0] in factors:
            rest = [g for i, g in enumerate(factors) if i != k]
            rest.remove(f.args[0])
            return sp.Mul(*rest, sp.Abs(f.args[0]))
    return product


def _log_identity(e: sp.Expr) -> sp.Expr:
    if isinstance(e, sp.log):
        found = _log_of(e.args[0])
    elif isinstance(e, log1p):
        found = _log_of(1 + e.args[0])
        if found is None and e.args[0].is_Mul and e.args[0].args[0] == -1:
            # log1p(-s) is log(1 - s): the sum's identities make 1 - sigmoid(u) sigmoid(-u).
            joined = _rewrite_sum(1 + e.args[0])
            found = _log_of(joined) if joined != 1 + e.args[0] else None
    else:
        return e
    return e if found is None else found


def _identities(expr: sp.Expr) -> sp.Expr:
    """Every sum's cancelling pairs joined by the identities above, and the logs of functions that round to 0 or
    1 taken exactly, bottom up, twice (a join can make another)."""
    for _ in range(2):
        expr = expr.replace(lambda e: e.is_Mul, _magnitude)
        expr = expr.replace(lambda e: e.is_Add, functools.partial(zero_sum_groups, tidy=_tidy))
        expr = expr.replace(lambda e: e.is_Add, _rewrite_sum)
        expr = expr.replace(lambda e: isinstance(e, (sp.log, log1p)), _log_identity)
        expr = expr.replace(lambda e: e.is_Mul, _gaussian_over_tail)
        expr = expr.replace(lambda e: e.is_Mul, _hyperbolic_ratio)
    return released(expr)


def _scaled(expr: sp.Expr, v: sp.Symbol, *, factored: bool = True) -> sp.Expr:
    """Each polynomial in `v` (of degree 1 or more, not a monomial) as v**degree * (the polynomial / v**degree).

    `factored`: of `expr` factored first (a sum of quotients over one
    denominator); else of the polynomials as they stand in it.
    """

    def scale(e: sp.Expr) -> sp.Expr:
        try:
            poly = sp.Poly(e, v)
        except sp.PolificationFailed:
            return e
        degree = poly.degree()
        if degree < 1 or len(poly.terms()) < 2:
            return e
        return v**degree * sp.expand(e / v**degree)

    return (sp.factor(expr) if factored else expr).replace(lambda e: e.is_Add and e.has(v), scale)


#: Functions whose series sympy expands in closed form quickly; a series of the registered special functions
#: (ndtri, log_ndtr, ...) goes through their derivatives term by term and costs a minute.
_ELEMENTARY = (sp.exp, sp.log, log1p, expm1, sp.sin, sp.cos, sp.tan, sp.atan, sp.sinh, sp.cosh, sp.tanh, sp.asin)


def _elementary(expr: sp.Expr) -> bool:
    return all(isinstance(f, _ELEMENTARY) for f in expr.atoms(sp.Function))


def _series(expr: sp.Expr, v: sp.Symbol, point: sp.Expr) -> sp.Expr | None:
    expansion = sp.series(expr, v, point, BUDGET.series_order)
    result = expansion.removeO()
    if result.has(sp.Order, sp.Subs, sp.Derivative) or result == 0:
        return None
    return sp.expand(result)


def _plain(expr: sp.Expr) -> sp.Expr:
    """`expr` with log1p and expm1 written out, so that a difference of logs (or exponentials) shows as one."""
    return expr.replace(lambda e: isinstance(e, log1p), lambda e: sp.log(1 + e.args[0])).replace(
        lambda e: isinstance(e, expm1), lambda e: sp.exp(e.args[0]) - 1
    )


def _angles_added(expr: sp.Expr) -> sp.Expr:
    """Each sine, cosine and tangent of a sum in several variables as the angle-addition formula's products.

    cos(x + e) computes x + e rounded, which for |x| far above |e| loses e
    and every bit of the result: cos(x)cos(e) - sin(x)sin(e) reduces each
    argument exactly.
    """

    def several(e: sp.Expr) -> bool:
        return (
            isinstance(e, (sp.sin, sp.cos, sp.tan))
            and e.args[0].is_Add
            and len({frozenset(t.free_symbols) for t in e.args[0].args if t.free_symbols}) > 1
        )

    return expr.replace(several, lambda e: sp.expand_trig(e))


def _conjugate(total: sp.Expr) -> sp.Expr:
    """A sum with a square root, c*sqrt(A) + R, as (c**2 A - R**2) / (c*sqrt(A) - R): the difference cancels in closed
    form (-b + sqrt(b**2 - 4ac) is -4ac / (b + sqrt(b**2 - 4ac)))."""
    for term in total.args:
        roots = [f for f in sp.Mul.make_args(term) if _has_root(f)]
        if len(roots) != 1:
            continue
        c = term / roots[0]
        rest = total - term
        numerator = _tidy(c**2 * roots[0].base - rest**2)
        return numerator / (term - rest)
    return total


def _has_root(term: sp.Expr) -> bool:
    return any(f.is_Pow and f.exp == sp.S.Half and f.base.free_symbols for f in sp.Mul.make_args(term))


def _conjugated(expr: sp.Expr) -> sp.Expr:
    return expr.replace(lambda e: e.is_Add and any(_has_root(t) for t in e.args), _conjugate)


def _exp_scaled(expr: sp.Expr) -> Iterator[sp.Expr]:
    """A quotient with exponentials, its numerator and denominator divided by each exp(u) in it, or by its square
    root, which a root in the denominator takes inside: exp(x)/(exp(x) - 1) is 1/(1 - exp(-x)), and
    exp(x)/sqrt(exp(x) + 1) is exp(x/2)/sqrt(1 + exp(-x)), neither overflowing to inf/inf."""
    numerator, denominator = sp.fraction(sp.together(_plain(expr)))
    if denominator == 1:
        return
    for e in sorted(expr.atoms(sp.exp), key=sp.default_sort_key)[:2]:
        for power in (sp.S.One, sp.S.Half):
            scale = sp.exp(-power * e.args[0])
            top = sp.powsimp(sp.expand(numerator * scale))
            yield canonical(top / _times_into_root(denominator, scale))


def _partial_fractions(expr: sp.Expr) -> Iterator[sp.Expr]:
    """A rational function of exponentials as partial fractions in each exp(u), each fraction divided through by
    the exponential above its line: eps (exp((a+b) eps) - 1)/((exp(a eps) - 1)(exp(b eps) - 1)) is
    eps/(exp(a eps) - 1) + eps exp(b eps)/(exp(b eps) - 1), which is -eps/expm1(-b eps) + eps/expm1(a eps): no
    product of exponentials overflows, and each quotient is in range wherever the whole is."""
    plain = _plain(expr).replace(lambda e: isinstance(e, sp.exp), lambda e: sp.exp(sp.expand(e.args[0])))
    plain = sp.expand_power_exp(plain)
    atoms = sorted(plain.atoms(sp.exp), key=sp.default_sort_key)
    if not atoms or len(atoms) > 3:
        return
    x = sp.Dummy("x")
    for atom in atoms:
        rational = plain.xreplace({atom: x})
        if not rational.is_rational_function(x) or not sp.fraction(sp.together(rational))[1].has(x):
            continue
        fractions = sp.apart(rational, x).xreplace({x: atom})
        yield canonical(sp.Add(*(_divided_through(t) for t in sp.Add.make_args(fractions))))


def _divided_through(term: sp.Expr) -> sp.Expr:
    """`term`, a quotient with an exponential above and below its line, divided through by the one above."""
    numerator, denominator = sp.fraction(term)
    above = sorted(numerator.atoms(sp.exp) & denominator.atoms(sp.exp), key=sp.default_sort_key)
    if not above:
        return term
    scale = sp.exp(-above[0].args[0])
    return sp.powsimp(sp.expand(numerator * scale)) / sp.powsimp(sp.expand(denominator * scale))


def _times_into_root(product: sp.Expr, scale: sp.Expr) -> sp.Expr:
    """`product * scale` for a positive `scale`, taken into its first square root as scale**2 where it has one."""
    factors = list(sp.Mul.make_args(product))
    for k, f in enumerate(factors):
        if f.is_Pow and f.exp == sp.S.Half:
            factors[k] = sp.sqrt(sp.powsimp(sp.expand(f.base * scale**2)))
            return sp.Mul(*factors)
    return sp.powsimp(sp.expand(product * scale))


def _bases(expr: sp.Expr, ops: int) -> Iterator[tuple[str, sp.Expr]]:
    """(family, form) for each algebraic form of `expr`, which the identities then start from as well."""
    plain = _attempt(functools.partial(_plain, expr))
    algebraic: dict[str, Callable[[], sp.Expr | None]] = {
        # The fused forms (softplus, sigmoid, log1p, expm1) of a partial the rule states, which the planner's own
        # pass would write: measured here, so that the search's choice is made knowing them.
        "canonical": lambda: canonical(expr),
        "cancel": lambda: sp.cancel(expr),
        "together": lambda: sp.together(expr),
        "factor": lambda: sp.factor(expr),
        "expand": lambda: sp.expand(expr),
        # log1p and expm1 written out: (exp(2x) - 1)/(exp(x) - 1) cancels to exp(x) + 1, the expm1 forms do not.
        "cancel written out": lambda: _inside(sp.cancel, plain) if plain is not None and plain != expr else None,
        "angle addition": lambda: _angles_added(expr),
    }
    if ops > BUDGET.factor_ops:
        algebraic.pop("factor")
        algebraic.pop("expand")
    if plain is not None and plain != expr:
        yield "written out", plain
    for family, make in algebraic.items():
        found = _attempt(make)
        if found is not None:
            yield family, found
            if family == "cancel written out":
                yield family, canonical(found)


def _inside(rewrite: Callable[[sp.Expr], sp.Expr], expr: sp.Expr) -> sp.Expr:
    """`rewrite` of `expr` and of every function's argument and root's base in it."""
    expr = expr.replace(
        lambda e: (isinstance(e, sp.Function) and len(e.args) == 1) or (e.is_Pow and not e.exp.is_Integer),
        lambda e: e.func(rewrite(e.args[0]), *e.args[1:]),
    )
    return rewrite(expr)


def _half_angles(expr: sp.Expr) -> sp.Expr:
    """Each sin(u) beside a sine or cosine of u/2 as 2 sin(u/2) cos(u/2), so that the half angles' powers cancel.

    The identities write 1 - cos(x) as 2 sin(x/2)**2, which leaves (1 - cos(x))/sin(x) as 2 sin(x/2)**2/sin(x):
    0/0 where x/2 underflows (XLA flushes it) or x is read as 0, where the quotient, tan(x/2), is x/2; over
    2 sin(x/2) cos(x/2) it is sin(x/2)/cos(x/2), and its derivative 1 - cos(x)/(2 cos(x/2)**2), 1/2 there.
    """
    halves = {f.args[0] for f in expr.atoms(sp.sin, sp.cos)}

    def halved(e: sp.Expr) -> sp.Expr:
        half = _tidy(e.args[0] / 2)
        return 2 * sp.sin(half) * sp.cos(half) if half in halves else e

    return expr.replace(lambda e: isinstance(e, sp.sin), halved)


def _identity_forms(base: sp.Expr) -> Iterator[sp.Expr]:
    joined = _attempt(functools.partial(_identities, base))
    if joined is None:
        return
    yield joined
    yield canonical(joined)
    halved = _attempt(functools.partial(_half_angles, joined))
    if halved is not None and halved != joined:
        yield halved
    added = _attempt(functools.partial(_angles_added, joined))
    if added is not None:
        yield added
    if not joined.has(sp.Function) and sp.count_ops(joined) <= BUDGET.factor_ops:
        tidied = _attempt(functools.partial(_factored, joined))
        if tidied is not None:
            yield tidied


def _common_factors(expr: sp.Expr) -> Iterator[sp.Expr]:
    """`expr`, a sum, with each pair of its terms that shares a factor written as that factor times their sum,
    where the identities then have a difference to join: -u/s + 2u sigmoid(u)/s is u (2 sigmoid(u) - 1)/s, which
    is u tanh(u/2)/s, where the two terms alone are inf - inf once u overflows."""
    terms = sp.Add.make_args(expr)
    if len(terms) < 3 or len(terms) > BUDGET.paired_terms:
        return  # two terms are the sum itself, which the algebraic families factor
    for a, b in itertools.combinations(terms, 2):
        joined = sp.factor_terms(a + b)
        if not joined.is_Mul or all(f.is_number for f in joined.args if not f.is_Add):
            continue
        identified = _identities(joined)
        if identified != joined:
            yield identified + sp.Add(*(t for t in terms if t is not a and t is not b))


def _joined_forms(expr: sp.Expr, bases: Sequence[sp.Expr]) -> Iterator[tuple[str, sp.Expr]]:
    """The identities' forms of each base, then of the expression's pairs of terms with a common factor."""
    for base in bases:
        for joined in _identity_forms(base):
            yield "identities", joined
    for joined in _attempt(lambda: sp.Tuple(*_common_factors(expr))) or ():
        yield "common factors", joined


def _candidates(expr: sp.Expr, variables: Sequence[sp.Symbol]) -> Iterator[tuple[str, sp.Expr]]:
    """(family, candidate) for every rewrite of `expr` the families make, in order of cost.

    Factoring and series are skipped above their bounds on operations: their
    cost grows fastest with the expression.
    """
    ops = sp.count_ops(expr)
    bases = [expr]
    for family, base in _bases(expr, ops):
        bases.append(base)
        yield family, base
    yield from _joined_forms(expr, bases)
    conjugated = _attempt(functools.partial(_conjugated, expr))
    if conjugated is not None and conjugated != expr:
        yield "conjugate", conjugated
        for v in variables:
            # The sum under the root may overflow where the difference no longer cancels: b**2 - 4ac at |b| > 1e154.
            scaled = _attempt(functools.partial(_scaled, conjugated, v, factored=False))
            if scaled is not None:
                yield "conjugate, scaled", scaled
    yield from _exponential_forms(expr, ops)
    yield from _norm_forms(bases[:2])
    yield from _changed("logs taken apart", _logs_taken_apart, expr)
    yield from _changed("softplus by sign", _softplus_by_sign, expr)
    yield from _changed("reciprocals paired", _reciprocals_paired, expr)
    yield from _gamma_series(expr, ops)
    yield from _log1p_forms(expr, ops)
    yield from _changed(POLES, _poles_taken_out, expr)
    if ops <= BUDGET.factor_ops:
        for v in variables:
            scaled = _attempt(functools.partial(_scaled, expr, v))
            if scaled is not None:
                yield "scaling", scaled
    if ops <= BUDGET.series_ops and len(expr.free_symbols) <= BUDGET.series_symbols and _elementary(expr):
        for v in variables:
            for point, family in ((sp.S.Zero, "series at 0"), (sp.oo, "series at infinity")):
                if point is sp.oo and _grows_exponentially(expr, v):
                    continue
                found = _attempt(functools.partial(_series, expr, v, point))
                if found is not None:
                    yield family, found


def _changed(family: str, rewrite: Callable[[sp.Expr], sp.Expr], expr: sp.Expr) -> Iterator[tuple[str, sp.Expr]]:
    found = _attempt(functools.partial(rewrite, expr))
    if found is not None and found != expr:
        yield family, found


def _logs_taken_apart(expr: sp.Expr) -> sp.Expr:
    """Each log(w) and log1p(w) of a product w that overflows while its log does not, taken apart: log(c f**e g)
    as log|c| + e log|f| + log|g|, and log1p(w) as itself where w is finite, the logs of its factors where it is
    inf (then w > 0, and log1p(1/w) is 0).  A Student t's log1p((x/s)**2/df) is inf past |x|/s = 1.3e154 (float64;
    1.8e19 in float32), where the log-density is a finite -(df + 1) log|x/s| ...; a half-Cauchy's log1p((x/s)**2)
    was 0/0 where x and s are both tiny, inf/inf where both are large, as sympy writes it (x**2/s**2)."""

    def factors(w: sp.Expr) -> list[tuple[sp.Expr, sp.Expr]] | None:
        coefficient, rest = w.as_coeff_Mul()
        parts = [f.as_base_exp() for f in sp.Mul.make_args(rest)]
        if not (len(parts) > 1 or (parts and abs(parts[0][1]) > 1)) or coefficient <= 0:
            return None
        if any(not e.is_Integer or b.is_number for b, e in parts):
            return None
        return [(coefficient, sp.S.One), *parts]

    def logs(parts: list[tuple[sp.Expr, sp.Expr]]) -> sp.Expr:
        return sp.Add(*(e * sp.log(sp.Abs(b)) for b, e in parts))

    def apart(e: sp.Expr) -> sp.Expr:
        parts = factors(e.args[0])
        if parts is None:
            return _log_of_sum_apart(e, factors, logs) if isinstance(e, sp.log) else e
        # A power of a quotient computed whole, (x/s)**2 and not x**2/s**2 (sympy's form): inf/inf and 0/0 where
        # x and s are both large or both small.
        w = _power_of_quotient(parts[1:]) * parts[0][0]
        if isinstance(e, sp.log):
            # log(w) of a w < 0 is nan; the logs of |factors| are not: only where the factors' signs are known.
            if not all(b.is_positive or k.is_even for b, k in parts[1:]):
                return e
            # The logs apart only where w under- or overflows: log(p) - log(q) cancels where p ~ q, and a KL
            # divergence of two normals is its log((p/q)**2) beside (p/q)**2 - 1 there.
            return sp.Piecewise((sp.log(w), (w > 0) & (divided(w, 2) < w)), (logs(parts), True))
        # The logs only where w is inf: nan is no sign that it is large.
        return sp.Piecewise((logs(parts), (w > 0) & (divided(w, 2) >= w)), (log1p(w), True))

    return expr.replace(lambda e: isinstance(e, (sp.log, log1p)), apart)


def _log_of_sum_apart(
    e: sp.log,
    factors: Callable[[sp.Expr], list[tuple[sp.Expr, sp.Expr]] | None],
    logs: Callable[[list[tuple[sp.Expr, sp.Expr]]], sp.Expr],
) -> sp.Expr:
    """log(p + q), p a product and q a sum of the other terms, both known not negative, where p + q overflows
    while its log does not: the logs of p's factors plus log1p(q / p), q divided by one factor at a time, where
    p >= q; log(q) + log1p(p / q) where q is the larger.  A Student t's partial in df has log(df + x**2), inf past
    |x| = 1.3e154 (float64), where it is a finite 2 log|x| + log1p(df/x/x)."""
    total = e.args[0]
    if not total.is_Add:
        return e
    products = [(t, parts) for t in sp.Add.make_args(total) if (parts := factors(t)) is not None]
    if len(products) != 1:
        return e
    ((p, parts),) = products
    q = total - p
    if not (p.is_nonnegative and q.is_nonnegative):
        return e
    ratio = q / parts[0][0]
    for base, exponent in parts[1:]:
        for _ in range(abs(int(exponent))):
            ratio = divided(ratio, base) if exponent > 0 else ratio * base
    overflows = divided(total, 2) >= total
    return sp.Piecewise(
        (logs(parts) + log1p(ratio), overflows & (p >= q)),
        (sp.log(q) + log1p(divided(p, q)), overflows),
        (e, True),
    )


def _softplus_by_sign(expr: sp.Expr) -> sp.Expr:
    """A sum with softplus(u) and softplus(-u), or one of them and u itself, written in one softplus on each side of
    0, as softplus(u) is u + softplus(-u), its terms collected: a Bernoulli log-mass, -y softplus(-z) -
    (1 - y) softplus(z), is (y - 1) z - softplus(-z) for z > 0 and y z - softplus(z) below (the form of torch's BCE
    with logits), where the two softplus terms times y cancel to y z for |y| >> 1; a logistic log-density,
    -u - 2 softplus(-u) - log(s), is u - 2 softplus(u) - log(s) below 0, where the two terms are inf - inf once
    2|u| overflows."""
    arguments = sorted({f.args[0] for f in expr.atoms(softplus)}, key=sp.default_sort_key)
    if not arguments:
        return expr
    # u is the argument or its negation, whichever sorts first, so that softplus(u) and softplus(-u) name one u.
    u = next((a for a in arguments if -a in arguments), arguments[0])
    u = min(u, -u, key=sp.default_sort_key)

    # u stands as one symbol while the terms are collected, so that (1 - y) u stays a product of u (and 0 at y = 1)
    # where u itself is a sum; only the terms with a softplus of u are multiplied out.  xreplace finds u as written
    # (-(x - loc)/s), subs as sympy rebuilds it ((loc - x)/s).
    whole = sp.Dummy("u")
    named = expr.xreplace({u: whole, -u: -whole}).subs(u, whole).subs(-u, -whole)
    alone = named.xreplace({softplus(whole): sp.S.Zero, softplus(-whole): sp.S.Zero})
    if not (named.has(softplus(whole)) and named.has(softplus(-whole))) and not alone.has(whole):
        return expr

    def collected(e: sp.Expr) -> sp.Expr:
        spread = sp.Add(*(sp.expand_mul(t) if t.has(whole, softplus) else t for t in sp.Add.make_args(e)))
        return sp.collect(spread, [softplus(whole), softplus(-whole), whole])

    above = collected(named.xreplace({softplus(whole): whole + softplus(-whole)}))
    below = collected(named.xreplace({softplus(-whole): -whole + softplus(whole)}))
    if sp.expand(below - above.xreplace({whole: -whole})) == 0:
        # An even function of u (the logistic log-density): below 0 the form is the one above 0 at -u, the same
        # operations on the same numbers, so it is that form at |u|, one expression where a `where` of two computed
        # both (under XLA half again autodiff's operations; -|u| - 2 log1p(exp(-|u|)) is as many).
        return above.xreplace({whole: sp.Abs(u)})
    return sp.Piecewise((above.xreplace({whole: u}), u > 0), (below.xreplace({whole: u}), True))


def _power_of_quotient(parts: list[tuple[sp.Expr, sp.Expr]]) -> sp.Expr:
    """prod b**e with the bases of each exponent's magnitude k joined into one quotient, computed whole, to the
    power k: u**2 s**-2 df**-1 as (u/s)**2 / df, which is not inf/inf where u and s are both large."""
    groups: dict[int, tuple[list[sp.Expr], list[sp.Expr]]] = {}
    for b, e in parts:
        groups.setdefault(int(abs(e)), ([], []))[1 if e.is_negative else 0].append(b)
    factors = []
    for k, (top, bottom) in sorted(groups.items(), reverse=True):
        whole = top and bottom
        factors.append((divided(sp.Mul(*top), sp.Mul(*bottom)) if whole else sp.Mul(*top) / sp.Mul(*bottom)) ** k)
    return sp.Mul(*factors)


def _reciprocals_paired(expr: sp.Expr) -> sp.Expr:
    """Each sum's terms c/p and -c/q (c a number, p and q not) joined as c (1/p - 1/q), taken without cancellation:
    a KL divergence of two exponentials' partial 1/p - 1/q, every bit lost at q ~ p as written."""

    def pair(total: sp.Expr) -> sp.Expr:
        terms = list(sp.Add.make_args(total))
        reciprocals = []
        for k, term in enumerate(terms):
            c, rest = term.as_coeff_Mul()
            if rest.is_Pow and rest.exp == -1 and not rest.base.is_number:
                reciprocals.append((k, c, rest.base))
        used: set[int] = set()
        for (i, c, p), (j, e, q) in itertools.combinations(reciprocals, 2):
            if c == -e and not used & {i, j}:
                terms[i], terms[j] = c * reciprocal_difference(p, q, _tidy(q - p)), sp.S.Zero
                used |= {i, j}
        return sp.Add(*terms)

    return expr.replace(lambda e: e.is_Add, pair)


def _grows_exponentially(expr: sp.Expr, v: sp.Symbol) -> bool:
    """Whether `expr` has an exponential of `v` (exp, sinh, cosh, tanh): at infinity that has no expansion in powers
    of 1/v, and sympy's search for one (Gruntz's algorithm, log(1 - 1/(1 + exp(-z)))) runs for minutes."""
    return any(f.args[0].has(v) for f in expr.atoms(sp.exp, sp.sinh, sp.cosh, sp.tanh))


def _gamma_series(expr: sp.Expr, ops: int) -> Iterator[tuple[str, sp.Expr]]:
    if ops > BUDGET.factor_ops:
        return
    for family, make in (
        ("gamma series", one_argument_series),
        ("gamma series, each argument", several_argument_series),
        ("gamma series, logs joined", logs_against_gamma),
        ("gamma series, each argument's base", several_argument_series_in_bases),
        ("gamma series, each group of arguments", grouped_argument_series),
    ):
        series = _attempt(functools.partial(make, expr))
        if series is not None:
            yield family, series
            # The terms the series leave as they were (a Gamma KL's q_c log(p_rate/q_rate), p_c q_rate/p_rate beside
            # the series of its digamma and loggamma) overflow where the series do not: their logs taken apart and
            # products paired in the series' branches (the finishing steps do neither to a form of `where`s), in
            # either order, since neither keeps p_c q_rate/p_rate in range at every point where it is.
            for reverse in (False, True):
                products = functools.partial(_paired, reverse=reverse)
                finished = _attempt(functools.partial(_outside_the_wheres, series, products))
                if finished is not None and finished != series:
                    yield f"{family}, finished", finished
            # Below the series' threshold the calls as written, each pole taken out (trigamma(p) at p = 1e-165).
            poles = _attempt(functools.partial(_each_sum_poles_taken_out, series))
            if poles is not None and poles != series:
                yield f"{family}, {POLES}", poles


#: The family of `_log1p_beside_its_argument`.
LOG1PMX = "log1p less its argument"


def _log1p_beside_its_argument(expr: sp.Expr, *, conjugate: bool) -> sp.Expr:
    """`expr` with the first c*log1p(v) of each sum written as c*(log1p(v) - z) + c*z, log1p(v) - z computed
    without its cancellation, and c*z joined to the sum's rational terms in every input of v: -log1p(t)/2 +
    t/(2(1 + t)), a Student t's partial in df at t = x**2/df, is -t**2/4 at small t, from terms of size t.

    z is v (log1p(v) - v is `log1pmx(v)`), or with `conjugate` v/(1 + v), which the terms t/(1 + t) join exactly:
    log1p(v) - v/(1 + v) is -log1pmx(-v/(1 + v)) where |v| < 1 (its branch fed 0 beyond), and log1p(v) -
    1/(1 + 1/v) beyond, where 1 - v/(1 + v) rounds away what the log needs and v may overflow.  A term in only
    some of v's inputs (-1/(2 df)) is left to cancel what it cancels (a difference of digammas)."""

    def rewritten(total: sp.Expr) -> sp.Expr:
        terms = list(sp.Add.make_args(total))
        for k, term in enumerate(terms):
            calls = [f for f in sp.Mul.make_args(term) if isinstance(f, log1p)]
            if len(calls) != 1:
                continue
            (call,) = calls
            v = call.args[0]
            inputs = v.free_symbols
            rest = terms[:k] + terms[k + 1 :]
            rational = [t for t in rest if inputs <= t.free_symbols and t.is_rational_function(*t.free_symbols)]
            if not inputs or not rational:
                continue
            coefficient = term / call
            # v and 1/v as products of quotients (x*(x/df), (df/x)/x): neither overflows where v is in range.
            paired = _each_product_paired(v, reverse=False)
            if conjugate:
                z, computed = sp.cancel(v / (1 + v)), 1 / (1 + _each_product_paired(sp.cancel(1 / v), reverse=False))
                near = sp.Abs(paired) < 1
                fed = Piecewise((paired, near), (0, True))
                less = Piecewise((-log1pmx(-fed / (1 + fed)), near), (call - computed, True))
            else:
                z, computed, less = v, paired, log1pmx(paired)
            joined = _joined_with(z, computed, coefficient, rational)
            others = [t for t in rest if not any(t is r for r in rational)]
            return sp.Add(coefficient * less, joined, *others)
        return total

    return expr.replace(lambda e: e.is_Add and not e.has(log1pmx), rewritten)


def _joined_with(z: sp.Expr, computed: sp.Expr, coefficient: sp.Expr, rational: Sequence[sp.Expr]) -> sp.Expr:
    """coefficient*z plus the `rational` terms, as z times one factor (z as `computed`) where each term is z times
    a simpler one: x**2/(2 df (df + x**2)) overflows where x**2 does, z/(2 df), z = 1/(1 + df/x**2), does not.
    Else the terms over one denominator."""
    factors = [sp.cancel(r / z) for r in rational]
    if all(sp.count_ops(f) < sp.count_ops(r) for f, r in zip(factors, rational, strict=True)):
        return computed * sp.factor(sp.cancel(coefficient + sp.Add(*factors)))
    return sp.factor(sp.cancel(sp.together(coefficient * z + sp.Add(*rational))))


def _log1p_forms(expr: sp.Expr, ops: int) -> Iterator[tuple[str, sp.Expr]]:
    """The forms of `_log1p_beside_its_argument`, each with the gamma series' forms of it: the sum it joins may
    also hold differences of digammas at large arguments."""
    for conjugate in (True, False):
        form = _attempt(functools.partial(_log1p_beside_its_argument, expr, conjugate=conjugate))
        if form is None or form == expr:
            continue
        yield LOG1PMX, form
        for family, series in _gamma_series(form, ops):
            yield f"{LOG1PMX}, {family}", series


def _outside_the_wheres(expr: sp.Expr, products: Callable[[sp.Expr], sp.Expr]) -> sp.Expr:
    """`expr`, a sum with a form of `where`s, with each log of a product that holds no `where` taken apart
    (`_logs_taken_apart`) and each product that holds none rewritten by `products` (`_paired`), but for
    those the last branch computes (the form as it was, below the series' threshold): the series' branches write
    sums of the variables expanded, whose products overflow where the derived one's did not, and the products as
    derived are left as they are (p (q_rate - p_rate)/p_rate beside a series that cancels nothing of it is in
    range where its pairings are not)."""

    def finished(e: sp.Expr, derived: set[sp.Basic]) -> sp.Expr:
        # A log of a stand-in fed to a branch is that branch's own (its quotients' logs taken apart are conditions
        # on constants elsewhere, which numpy's select cannot take).
        plain = e.replace(
            lambda f: isinstance(f, (sp.log, log1p)) and not f.has(sp.Piecewise), lambda f: _logs_taken_apart(f)
        )
        return plain.replace(lambda f: f.is_Mul and f not in derived and not f.has(sp.Piecewise), products)

    def walk(e: sp.Expr) -> sp.Expr:
        if isinstance(e, sp.Piecewise):
            derived = set(sp.preorder_traversal(e.args[-1][0]))
            return sp.Piecewise(*((finished(branch, derived), condition) for branch, condition in e.args))
        return sp.Add(*(walk(t) for t in e.args)) if e.is_Add else e

    return walk(expr)


#: The family of `_poles_taken_out`, a step of other families' names as well.
POLES = "poles taken out"


def _each_sum_poles_taken_out(expr: sp.Expr) -> sp.Expr:
    return _small_argument_poles(expr).replace(lambda e: e.is_Add, _polygamma_poles)


def _poles_taken_out(expr: sp.Expr) -> sp.Expr:
    """`expr` with the poles of its gamma family taken out: digamma(u) and loggamma(u) where XLA flushes u to 0
    (`_small_argument_poles`), trigamma and on everywhere (`_polygamma_poles`)."""
    return _polygamma_poles(_small_argument_poles(expr))


def _polygamma_poles(expr: sp.Expr) -> sp.Expr:
    """Each term c f(u) of `expr`, f trigamma, ... (polygamma(n, .), n >= 1), as c f(u + 1) plus its pole part at
    0, c (-1)**(n+1) n! / u**(n+1), computed as c divided by u n + 1 times: a KL divergence of two Gammas'
    partial (p - q) trigamma(p) is inf at p = 1e-165 (trigamma(p) = 1/p**2 overflows) where it is 1/p = 1e165,
    and ((p - q)/p)/p is in range wherever the product is.  Exact at every u (the recurrence f(u) = f(u + 1) +
    pole)."""
    calls = [f for f in expr.atoms(sp.polygamma) if int(f.args[0]) >= 1 and f.args[1].free_symbols]
    if not calls:
        return expr
    terms = []
    for term in sp.Add.make_args(sp.expand(expr, deep=False)):
        factors = [f for f in sp.Mul.make_args(term) if f in calls]
        if len(factors) != 1:
            terms.append(term)
            continue
        (f,) = factors
        n, u = int(f.args[0]), f.args[1]
        coefficient = sp.factor(term / f)
        pole = coefficient
        for _ in range(n + 1):
            pole = divided(pole, u)
        terms += [coefficient * sp.polygamma(n, u + 1), pole_weight(n) * pole]
    return sp.Add(*terms)


def _small_argument_poles(expr: sp.Expr) -> sp.Expr:
    """Each loggamma(u) and digamma(u) of `expr` whose argument is a v, a a number in (0, 1), as loggamma(u + 1) -
    log(v) - log(a) and digamma(u + 1) - (1/a)/v where u is 0 and v is not: where XLA flushes a subnormal u to 0 (or
    u underflows), the recurrences f(u) = f(u + 1) + pole with the pole computed of v.  A Student t's loggamma(df/2)
    is inf at df = 2.2e-308, whose half XLA flushes, where the log-density is a finite -710; digamma(df/2) there is
    nan where the log-density's partial in df is 1/df.  Elsewhere each call is as it is (and so is the rest of
    `expr`): the form computes what `expr` does wherever u is not 0.  Each branch's own v is fed a point of its
    region where it is not taken."""

    def flushed(f: sp.Expr) -> bool:
        if not (isinstance(f, sp.loggamma) or (isinstance(f, sp.polygamma) and f.args[0] == 0)):
            return False
        a, v = f.args[-1].as_coeff_Mul()
        return 0 < a < 1 and bool(v.free_symbols) and not v.has(sp.Piecewise)

    def taken(f: sp.Expr) -> sp.Expr:
        a, v = f.args[-1].as_coeff_Mul()
        # u computed whole, as the call's argument is (sympy would decide a v <= 0 from v's assumptions).
        region = sp.And(v > 0, divided(v, 1 / a) <= 0)
        fed = sp.Piecewise((v, region), (sp.S.One, True))
        elsewhere = f.func(*f.args[:-1], a * sp.Piecewise((sp.S.One, region), (v, True)))
        if isinstance(f, sp.loggamma):
            branch = sp.loggamma(a * fed + 1) - sp.log(fed) - sp.log(a)
        else:
            branch = sp.polygamma(0, a * fed + 1) - divided(1 / a, fed)
        return sp.Piecewise((branch, region), (elsewhere, True))

    return expr.replace(flushed, taken)


def _squares(total: sp.Expr) -> tuple[sp.Expr, sp.Expr] | None:
    """(a, b) where `total` is a**2 + b**2, each a square, a product of even powers (x**2/d**2 is (x/d)**2) or a
    number's (1 is 1**2), else None."""
    if not total.is_Add or len(total.args) != 2:
        return None
    roots = [_square_root(t) for t in total.args]
    if any(r is None for r in roots):
        return None
    return roots[0], roots[1]


def _square_root(term: sp.Expr) -> sp.Expr | None:
    """r where `term` is r**2 written as a square, a product of even integer powers, or a positive rational's; None
    else."""
    if term.is_Rational and term.is_positive:
        root = sp.sqrt(term)
        return root if root.is_Rational else None
    factors = [f.as_base_exp() for f in sp.Mul.make_args(term)]
    if not all(e.is_Integer and e % 2 == 0 for _, e in factors) or term.is_number:
        return None
    return sp.Mul(*(b ** (e // 2) for b, e in factors))


def _norm_form(expr: sp.Expr) -> sp.Expr:
    """Each a**2 + b**2 through its hypot h: sqrt of it is h, p/(a**2 + b**2) is (p/h)/h.

    The sum of squares over- and underflows where its root does not, and a ratio of two inputs' magnitudes is
    no single input's: this form needs no regime (atan2's partials, -y/(x**2 + y**2), at |y| << |x|).
    """

    def norm(e: sp.Expr) -> sp.Expr:
        factors = list(sp.Mul.make_args(e))
        for k, f in enumerate(factors):
            pair = _squares(f.base) if f.is_Pow else None
            if pair is None:
                continue
            h = hypot(*pair)
            # A constant multiplies last: (-2s/h)/h overflows at s > max/2, -2((s/h)/h) does not.
            constant, rest = sp.Mul(*(factors[:k] + factors[k + 1 :])).as_coeff_Mul()
            if f.exp == -1:
                return constant * divided(divided(rest, h), h)
        return e

    def rooted(e: sp.Expr) -> sp.Expr:
        pair = _squares(e.base)
        return e if pair is None else hypot(*pair) ** (2 * e.exp)

    with_roots = expr.replace(lambda e: e.is_Pow and e.exp in (sp.S.Half, -sp.S.Half), rooted)
    # Products first, so that a quotient's numerator is divided, not multiplied by a reciprocal; then reciprocals.
    products = with_roots.replace(lambda e: e.is_Mul, norm)
    return products.replace(lambda e: e.is_Pow and e.exp == -1, norm)


def _powers_split(expr: sp.Expr) -> sp.Expr:
    """Each product with a power b**p, p < -1 not an integer, as (the rest * b**(p + m)) / b**m, m = floor(-p):
    -x**(-3/2)/2 is (-x**(-1/2)/2)/x, which stays in range where x**(3/2) alone leaves it (float32 x = 2e-26)."""

    def split(e: sp.Expr) -> sp.Expr:
        factors = list(sp.Mul.make_args(e))
        for k, f in enumerate(factors):
            if f.is_Pow and f.exp.is_Rational and not f.exp.is_Integer and f.exp < -1:
                m = sp.floor(-f.exp)
                rest = sp.Mul(*(factors[:k] + factors[k + 1 :]))
                # A constant goes below the line: divided(c u, v) would print as c * (u / v).
                constant, rest = rest.as_coeff_Mul()
                return divided(rest * f.base ** (f.exp + m), f.base**m / constant)
        return e

    products = expr.replace(lambda e: e.is_Mul, split)
    return products.replace(lambda e: e.is_Pow and e.exp.is_Rational and not e.exp.is_Integer and e.exp < -1, split)


def _norm_forms(bases: Sequence[sp.Expr]) -> Iterator[tuple[str, sp.Expr]]:
    for base in bases:
        for family, rewrite in (("norms", _norm_form), ("powers split", _powers_split)):
            found = _attempt(functools.partial(rewrite, base))
            if found is not None and found != base:
                yield family, found


def _exponential_forms(expr: sp.Expr, ops: int) -> Iterator[tuple[str, sp.Expr]]:
    for scaled in _attempt(lambda: sp.Tuple(*_exp_scaled(expr))) or ():
        yield "exponential scaling", scaled
    if ops <= BUDGET.factor_ops:
        for fractions in _attempt(lambda: sp.Tuple(*_partial_fractions(expr))) or ():
            yield "partial fractions", fractions


def _factored(expr: sp.Expr) -> sp.Expr:
    return sp.factor(sp.cancel(expr))


# ---------------------------------------------------------------- reassociated products


def _finishing(family: str, expr: sp.Expr) -> Iterator[sp.Expr]:
    """The forms of `family`'s rewrites that mend one overflow of a form the other families made and leave the rest
    of it as it is: its products reassociated, its logs of products taken apart (a Student t's loggamma difference
    as the gamma series write it, and its log1p((x/s)**2/df) inf past |x|/s = 1.3e154), its gamma family's poles
    taken out (a digamma(df/2) beside the logs taken apart, nan where XLA flushes df/2 to 0), its products scaled
    (the search's repair of a choice still inf where the exact value is a float, `search._scaled_repair`, alone)."""
    if family == "reassociated":
        yield from _reassociations(expr)
    elif family == "products scaled":
        # The factors the terms of a sum share taken out first: each term scaled with an infinite input in it is
        # inf - inf where the sum times it is inf (sin_exp_mul's partial in x at y = inf).
        shared = _attempt(functools.partial(_products_scaled, sp.factor_terms(expr)))
        plain = _attempt(functools.partial(_products_scaled, expr))
        # And each product over the divisors it sits under, where the sum they divide does not cancel: a Gamma
        # KL's partial in p_rate, (q_c - p_c q_rate/p_rate)/p_rate, has its product scaled and still inf where
        # p_c q_rate/p_rate overflows (2.4e46 in float32) and p_c q_rate/p_rate**2 does not (1.7e37).
        spread = None
        if sp.count_ops(expr) <= BUDGET.factor_ops:
            spread = _attempt(lambda: _products_scaled(sp.expand(expr, log=False)))
        # Or over them at the top alone, each term's own sums whole: a Gumbel's partial in its scale,
        # ((loc - x) expm1(u) - s)/s**2, is (loc - x) expm1(u)/s**2 - 1/s, whose product is in range where
        # (loc - x) expm1(u) is not, and loc expm1(u)/s**2 - x expm1(u)/s**2 is inf - inf.
        top = _attempt(lambda: _products_scaled(sp.expand(expr, deep=False, log=False)))
        found = dict.fromkeys((shared, plain, spread, top))
        yield from (f for f in found if f is not None and f.has(power_product))
    elif family == DIVIDED_FIRST:
        yield from (found for _, found in _changed(family, _divided_first, expr))
    elif family == POLES:
        yield from (found for _, found in _changed(family, _each_sum_poles_taken_out, expr))
    elif family == SUM_SCALED:
        yield from (found for _, found in _changed(family, _sum_scaled, expr))
    elif family == LEAD_TERM:
        yield from _over_lead_terms(expr)
    elif family == QUOTIENT_LEAD_TERM:
        yield from _quotients_over_lead_terms(expr)
    else:
        yield from (found for _, found in _changed(family, _logs_taken_apart, expr))


#: The family of `_divided_first`, a repair of a chosen form alone (`search._mended_at_the_edge`).
DIVIDED_FIRST = "divided first"


def _divided_first(expr: sp.Expr) -> sp.Expr:
    """Each quotient of a sum by a divisor computed term by term where the sum overflows, as it is elsewhere:
    (x - loc)/s as x/s - loc/s where x - loc is inf (a Gumbel's log-density at x = 1e308, loc = -1e308, s = 1e10,
    whose z is 2e298), and a power of it, (x - loc)**2/s**3 as ((x - loc)/s)**2/s, the same way.  Only there:
    where x ~ loc, x/s - loc/s keeps the roundings of both quotients, which (x - loc)/s, its difference exact, does
    not.  Never inside a function's argument: exp(-(x - loc)/s) is 0 or inf where x - loc overflows but for
    scales beyond 1e305, and a `where` inside it is one in every derivative of it too."""

    def termwise(total: sp.Add, divisor: sp.Expr, times: int = 1) -> sp.Expr:
        # Where the quotient whole is inf or nan and its terms divided are finite: a term inf itself (exp(-z) beside
        # z = -inf) makes them inf or nan too, and the quotient whole is then the infinity it is; where the sum is
        # finite and the quotient overflows (x - loc = -1, s = 1e-320), x/s - loc/s is inf - inf.  The terms' own
        # sums are divided term by term throughout in the condition: a `where` in a `where`'s condition is one per
        # case of it.  Divided `times` times: the rest of a divisor's power goes into a term's own power.
        whole = divided(total, divisor) * divisor ** (1 - times)
        plain = sp.Add(*(term_divided(t, divisor, times, selected=False) for t in total.args))
        parts = sp.Add(*(term_divided(t, divisor, times) for t in total.args))
        return sp.Piecewise((parts, ~isfinite(whole) & isfinite(plain)), (whole, True))

    def term_divided(term: sp.Expr, divisor: sp.Expr, times: int = 1, *, selected: bool = True) -> sp.Expr:
        # A term with a sum among its factors, the sum divided: (loc - x) exp(z)/s as ((loc - x)/s) exp(z), whose
        # (loc - x)/s is finite where loc - x is -inf and exp(z) 0.
        factors = sp.Mul.make_args(term)
        total = next((f for f in factors if f.is_Add), None)
        scaled = next((f for f in factors if isinstance(f, power_product)), None)
        if total is None and scaled is not None:
            # A product scaled takes the divisor among its bases: p_c q_rate/p_rate over p_rate is 2.4e46 and inf in
            # float32 before the division, p_c q_rate/p_rate**2 is 1.7e37.
            rest = sp.Mul(*(f for f in factors if f is not scaled))
            return rest * power_product(*scaled.args, divisor, -times)
        if total is None:
            return _over_a_power(term, divisor, times)
        rest = sp.Mul(*(f for f in factors if f is not total))
        if selected:
            return rest * termwise(total, divisor, times)
        return rest * sp.Add(*(term_divided(t, divisor, times, selected=False) for t in total.args))

    def distributed(product: sp.Expr) -> sp.Expr:
        factors = sp.Mul.make_args(product)
        pairs = [f.as_base_exp() for f in factors]
        chosen = _sum_and_divisor(pairs, plain=False)
        if chosen is None:
            return product
        (total, power), (base, exponent) = (pairs[k] for k in chosen)
        rest = sp.Mul(*(f for k, f in enumerate(factors) if k not in chosen))
        if power == 1:
            # The sum once: the whole divisor goes into it, its powers dividing its terms' powers.
            return rest * termwise(total, base, -int(exponent))
        # The divisor once per power of the sum, as far as it goes; the rest of it stays outside.
        taken = min(int(power), -int(exponent))
        return rest * total ** (power - taken) * base ** (exponent + taken) * termwise(total, base) ** taken

    def scaled_divided(product: power_product) -> sp.Expr:
        # A product scaled whose bases hold a difference of inputs and a divisor: the difference divided, as
        # `distributed` does.  A Gumbel's partial in its scale, power_product(s, -2, loc - x, 1, expm1(u/2), 1, ...),
        # is inf at x = 1e308, loc = -1e308 where loc - x overflows and the partial is 2e288.
        pairs = list(zip(product.args[::2], product.args[1::2], strict=True))
        chosen = _sum_and_divisor(pairs, plain=True)
        if chosen is None:
            return product
        found, divisor = chosen
        (total, power), (base, exponent) = pairs[found], pairs[divisor]
        taken = min(int(power), -int(exponent))
        pairs[found] = (termwise(total, base), taken)
        pairs[divisor] = (base, exponent + taken)
        pairs.append((total, power - taken))
        return power_product(*(a for b, e in pairs if e != 0 for a in (b, e)))

    def walk(e: sp.Expr) -> sp.Expr:
        if isinstance(e, power_product):
            return scaled_divided(e)
        if e.is_Atom or (isinstance(e, sp.Function) and not isinstance(e, (divided, sp.Piecewise))):
            return e
        rebuilt = e.func(*(walk(a) for a in e.args)) if not isinstance(e, sp.Piecewise) else e
        if isinstance(rebuilt, divided) and rebuilt.args[0].is_Add:
            return termwise(*rebuilt.args)
        return distributed(rebuilt) if rebuilt.is_Mul else rebuilt

    return walk(expr)


#: The family of `_sum_scaled`, a repair of a chosen form alone (`search._mended_at_the_edge`).
SUM_SCALED = "sum scaled"
#: What a sum's terms are divided by where the sum is not finite, a power of two (exact): a term past the largest
#: float by as much as a log or a digamma can be (a few hundred) is back in range, and a term that matters to a sum
#: in range, not less than the sum's rounding, stays above the subnormals.
_SUM_SCALE = sp.Integer(2) ** 32


def _sum_scaled(expr: sp.Expr) -> sp.Expr:
    """Each outermost sum (of the form, or of a branch of its `where`) computed with its terms scaled by 2**-32 where
    the sum is not finite, and the total scaled back: where a term overflows and the others bring the sum back into
    range, as the weighted digammas of KL(Beta || Beta) written as torch writes it do ((p1 - q1) digamma(p1) and
    (q1 + q0 - p1 - p0) digamma(p1 + p0) are each past float32's largest float at q1 = 5.9e36, p0 = 1.7e26, p1 = 11,
    and their sum is not), or an affine map's b + w x.  The division goes to each term's weight, through the sums of
    a term (`_scaled_down`).  Only there: where the sum is finite it is computed as it was, and where the exact sum
    overflows, the scaled one does too when it is scaled back (the right infinity, where inf - inf was nan).  The
    test is a `where_finite`, whose sum may hold `where`s (each group of a Beta KL's series is one), each of their
    branches scaled."""

    def scaled(total: sp.Add) -> sp.Expr:
        return where_finite(total, total, divided(_scaled_down(total), divided(sp.S.One, _SUM_SCALE)))

    return _outermost_sums_replaced(expr, scaled)


#: The family of `_over_lead_terms`, a repair of a chosen form alone (`search._mended_where_infinite`).
LEAD_TERM = "sum over a lead term"


def _over_lead_terms(expr: sp.Expr) -> Iterator[sp.Expr]:
    """`expr` with each outermost sum (of the form, or of a branch of its `where`), t_1 + ... + t_n, computed as
    t_k (1 + sum of t_i/t_k) where the sum is not finite, for each k in turn (the sums of `BUDGET.lead_terms` terms
    or fewer): each ratio with what the two terms share divided out (`_ratio`), the product scaled.  Terms that
    overflow together are then divided before they are added: expm1(x)/x's derivative, exp(x)/x - expm1(x)/x**2,
    is inf - inf from x = 723, where the exact value is inf; over its first term it is exp(x)/x (1 + expm1(-x)/x),
    inf there.  Where the sum is finite it is computed as it was, and a longer sum (a series) as it is."""
    width = max((len(total.args) for total in outermost_sums(expr) if len(total.args) <= BUDGET.lead_terms), default=0)
    for k in range(width):
        found = _attempt(functools.partial(_outermost_sums_replaced, expr, functools.partial(_over_lead, k=k)))
        if found is not None and found != expr:
            yield found


def _over_lead(total: sp.Add, k: int) -> sp.Expr:
    terms = [_unscaled(term) for term in total.args]
    if k >= len(terms) or len(terms) > BUDGET.lead_terms:
        return total
    return where_finite(total, total, _products_scaled(sp.Mul(terms[k], _over(terms, terms[k]))))


#: The family of `_quotients_over_lead_terms`, a repair of a chosen form alone (`search._mended_at_the_edge`).
QUOTIENT_LEAD_TERM = "quotient over a lead term"


def _quotients_over_lead_terms(expr: sp.Expr) -> Iterator[sp.Expr]:
    """`expr` (or each branch of its `where`) that is a quotient n/d, d a sum of `BUDGET.lead_terms` terms or fewer,
    computed as (n/t)/(d/t) where it is not finite, t each term of d in turn: each term's ratio to t with what the
    two share divided out (`_ratio`), each sum's products scaled.  A cosine distance, (|a| |b| - a b + 1e-12)/(|a|
    |b| + 1e-12), is inf/inf where a b overflows and the value is 0 or 2; over |a| |b| both sums are near 1."""
    for k in range(BUDGET.lead_terms):
        found = _attempt(functools.partial(_branches_mapped, expr, functools.partial(_quotient_over_lead, k=k)))
        if found is not None and found != expr:
            yield found


def _branches_mapped(expr: sp.Expr, mapped: Callable[[sp.Expr], sp.Expr]) -> sp.Expr:
    """`mapped` of `expr`, or of each branch of its `where`s, their conditions as they are."""
    if isinstance(expr, sp.Piecewise):
        return sp.Piecewise(*((_branches_mapped(e, mapped), c) for e, c in expr.args), evaluate=False)
    return mapped(expr)


def _quotient_over_lead(expr: sp.Expr, k: int) -> sp.Expr:
    numerator, denominator = sp.fraction(expr)
    terms = sp.Add.make_args(_unscaled(denominator))
    if not isinstance(denominator, sp.Add) or k >= len(terms) or len(terms) > BUDGET.lead_terms:
        return expr
    parts = (_over(sp.Add.make_args(_unscaled(part)), terms[k]) for part in (numerator, denominator))
    return where_finite(expr, expr, divided(*(_products_scaled(part) for part in parts)))


def _over(terms: Sequence[sp.Expr], lead: sp.Expr) -> sp.Expr:
    """The sum of `terms` divided by `lead` term by term, each ratio with what the two share divided out
    (`_ratio`), the lead's own 1: sympy takes a `where`'s reciprocal branch by branch, so that lead/lead is
    where(c, 8, 1/x) where(c, 1/8, x), not 1."""
    return sp.Add(*(sp.S.One if term == lead else _ratio(term, lead) for term in terms))


def _unscaled(expr: sp.Expr) -> sp.Expr:
    """`expr` with each `power_product` written as the product it computes and each quotient the reassociation
    ordered (`divided`) as a plain one, so that a ratio of terms can cancel what they share: (1/x)**2/(x + 1)
    beside (1/x)(1/(x + 1))/(x + 1), each infinite at the smallest subnormal x, are x/(x + 1) apart."""
    expr = expr.replace(lambda e: isinstance(e, divided), lambda e: e.args[0] / e.args[1])
    return expr.replace(
        lambda e: isinstance(e, power_product),
        lambda e: sp.Mul(*(base**exponent for base, exponent in zip(e.args[0::2], e.args[1::2], strict=True))),
    )


def _ratio(term: sp.Expr, lead: sp.Expr) -> sp.Expr:
    """term/lead with what the two share divided out before anything is computed: each expm1 written as exp - 1,
    the exponentials joined and the whole expanded, then the canonical forms again
    (expm1(x/2) (exp(x/2) + 1)/(x exp(x)) is expm1(-x)/x, finite where both exponentials overflow)."""
    quotient = term / lead
    written = quotient.replace(lambda e: isinstance(e, expm1), lambda e: sp.exp(e.args[0]) - 1)
    if sp.count_ops(written) > BUDGET.factor_ops:
        return quotient
    return canonical(sp.factor_terms(sp.expand(sp.powsimp(sp.expand(written)))))


def outermost_sums(expr: sp.Expr) -> list[sp.Add]:
    """The sums `_sum_scaled` computes scaled: `expr` where it is one, else its `where`'s branches' own, each holding
    no `where`."""
    found: list[sp.Add] = []

    def kept(total: sp.Add) -> sp.Expr:
        found.append(total)
        return total

    _outermost_sums_replaced(expr, kept)
    return found


def _outermost_sums_replaced(expr: sp.Expr, replaced: Callable[[sp.Add], sp.Expr]) -> sp.Expr:
    return _branches_mapped(expr, lambda e: replaced(e) if isinstance(e, sp.Add) else e)


def _scaled_down(e: sp.Expr) -> sp.Expr:
    """`e` over `_SUM_SCALE`, the division its first operation: through a sum, each term scaled; in a product, the
    first factor that is a sum scaled, else its weight (a factor that is no function's value, else the first)
    divided, a node of its own, so that neither the planner's common subexpressions nor the printers' order multiply
    the term's other factors first."""
    if e.is_number:
        return e / _SUM_SCALE
    if e.is_Add:
        return sp.Add(*(_scaled_down(t) for t in e.args))
    if isinstance(e, sp.Piecewise):
        return sp.Piecewise(*((_scaled_down(v), c) for v, c in e.args), evaluate=False)
    if not e.is_Mul:
        return divided(e, _SUM_SCALE)
    coefficient, rest = e.as_coeff_Mul()
    factors = list(sp.Mul.make_args(rest))
    inner = next((k for k, f in enumerate(factors) if f.is_Add), None)
    weight = next((k for k, f in enumerate(factors) if not isinstance(f, sp.Function)), 0) if inner is None else inner
    factors[weight] = _scaled_down(factors[weight])
    return coefficient * sp.Mul(*factors)


def _over_a_power(term: sp.Expr, divisor: sp.Expr, times: int) -> sp.Expr:
    """`term` (no sum among its factors) over `divisor**times`, computed whole: a power in it over the divisor's as
    the printers compute that (`power_of_a_quotient`), (m - n)**2/s**3 as ((m - n)/s)**2/s, in range where
    (m - n)**2 is not (a normal KL's partial in its scale: -2e38 at m - n = 2.3e20, s = 6.3 in float32)."""
    if times > 1 and power_of_a_quotient(term * divisor**-times) is not None:
        return term * divisor**-times
    return divided(term, divisor) * divisor ** (1 - times)


def _sum_and_divisor(pairs: Sequence[tuple[sp.Expr, sp.Expr]], *, plain: bool) -> tuple[int, int] | None:
    """Of (base, exponent) pairs, the indices of the first sum to a positive integer power (`plain`: a sum of no
    function) and of the first divisor, neither a number nor a sum, to a negative one; None where there is not both:
    where `_divided_first` divides a sum first."""
    found = next(
        (
            k
            for k, (b, e) in enumerate(pairs)
            if b.is_Add and not (plain and b.has(sp.Function)) and e.is_Integer and e > 0
        ),
        None,
    )
    divisor = next(
        (k for k, (b, e) in enumerate(pairs) if not b.is_number and not b.is_Add and e.is_Integer and e < 0), None
    )
    return None if found is None or divisor is None else (found, divisor)


def _reassociations(expr: sp.Expr) -> Iterator[sp.Expr]:
    """`expr` with each quotient of products computed as a product of quotients, each factor below the line
    divided into one above it: tan(x)**2 (x - sin x) / (x - tan x)**2 as (tan(x) / (x - tan x))**2 (x - sin x),
    whose square never overflows where the quotient is in range.  Two pairings: the factors above in sympy's
    order and reversed (those below reversed where there are fewer above)."""
    if expr.has(sp.Piecewise):
        return
    for reverse in (False, True):
        found = _attempt(functools.partial(_each_product_paired, expr, reverse=reverse))
        if found is not None and found != expr:
            yield found


def _each_product_paired(expr: sp.Expr, *, reverse: bool) -> sp.Expr:
    return expr.replace(lambda e: e.is_Mul, functools.partial(_paired, reverse=reverse))


def _paired(product: sp.Expr, *, reverse: bool) -> sp.Expr:
    above: list[sp.Expr] = []
    below: list[sp.Expr] = []
    rest: list[sp.Expr] = []
    for factor in sp.Mul.make_args(product):
        base, exponent = factor.as_base_exp()
        if factor.is_number or not exponent.is_Integer or abs(exponent) > BUDGET.paired_power:
            rest.append(factor)
        elif exponent > 0:
            above += [base] * int(exponent)
        else:
            below += [base] * int(-exponent)
    if not below or len(below) + len(above) < 2:
        return product
    if reverse:
        above.reverse()
    # A power below beyond the factors above is divided into 1: 1/x**3 as (1/x)**3, in range where x**3 is not.
    below.sort(key=lambda b: -below.count(b))
    if reverse and len(above) < len(below):
        # Fewer factors above than below: the other pairing takes the factors below in reverse, a/(s d) as
        # (a/d)/s where a/s overflows and a/d does not (a scaled quotient over a subnormal scale).
        below.reverse()
    above += [sp.S.One] * sum(1 for b in below[len(above) :] if below.count(b) > 1)
    pairs = [divided(a, b) for a, b in zip(above, below, strict=False)]
    n = len(pairs)
    return sp.Mul(*rest, *pairs, *above[n:]) / sp.Mul(*below[n:])


# ---------------------------------------------------------------- products scaled


def _factors(product: sp.Expr) -> list[sp.Expr]:
    """`product`'s factors, each quotient's (`divided`, the order the reassociation chose) taken apart: a scaled
    product orders its own divisions."""
    factors = []
    for factor in sp.Mul.make_args(product):
        if isinstance(factor, divided):
            numerator, denominator = factor.args
            factors += [*_factors(numerator), *(f**-1 for f in _factors(denominator))]
        else:
            factors.append(factor)
    return factors


def _root_of_squares(total: sp.Expr) -> sp.Expr | None:
    """hypot(u, v) where `total` is u**2 + v**2, else None: a product scales the root, in range where the sum of
    squares is not (a Gaussian KL's partial in s2, 1/s2 - (s1**2 + (m1 - m2)**2)/s2**3, is -2e38 at m1 - m2 =
    -2.3e20, s2 = 6.3 in float32, where the sum of squares is inf)."""
    if not isinstance(total, sp.Add) or len(total.args) != 2:
        return None
    roots = []
    for term in total.args:
        base, exponent = term.as_base_exp()
        if exponent != 2 or base.is_number:
            return None
        roots.append(base)
    return hypot(*roots)


def _clamped_power(factor: sp.Expr) -> tuple[sp.Expr, sp.Integer] | None:
    """(base clamped, k) where `factor` is a regime's clamp of a power, `where(c, a, b**k)`, `a` a number whose k-th
    root is a float exactly: the clamp moved onto the base, `where(c, a**(1/k), b)`, so that the product scales `b`
    itself, in range where `b**k` is not.  A regime's 1/x for |x| > 1/16 is subnormal from x = 4.5e307, which XLA
    reads as 0: expm1(x)/x's derivative over its lead term, exp(x)/x times a near-1 factor, was 0 * inf there."""
    if not isinstance(factor, sp.Piecewise) or len(factor.args) != 2 or factor.args[1].cond != sp.true:
        return None
    (value, condition), (power, _) = factor.args
    base, k = power.as_base_exp()
    if not value.is_Number or not k.is_Integer or k == 0 or abs(k) > BUDGET.paired_power or base.is_number:
        return None
    root = float(value) ** (1.0 / int(k)) if float(value) > 0 else math.nan
    if not math.isfinite(root) or root == 0.0 or root ** int(k) != float(value):
        return None
    return sp.Piecewise((sp.Float(root), condition), (base, True)), k


def _products_scaled(expr: sp.Expr) -> sp.Expr:
    """`expr` with each product of three or more factors (powers counted by their exponents) of at least two
    bases computed as a `power_product`: no order of its multiplications and divisions keeps every partial product
    in range at every point (t / s / s / x overflows at t / s where t / (s**2 x) is 1.9e46, t / (s**2 x)
    underflows at s**2 where (t / s) / (s x) is in range), its factors brought near 1 first do.  In each branch of
    a `where`, its conditions as they are: a regime split's branch for |x| > 1/16 of expm1(x)/x's derivative,
    exp(x)/x - expm1(x)/x**2, is nan from exp(x)'s overflow at x = 709.8 to the derivative's own at 716.4."""
    if expr.is_Atom:
        return expr
    if isinstance(expr, sp.Piecewise):
        return sp.Piecewise(*((_products_scaled(e), c) for e, c in expr.args))
    rebuilt = expr.func(*(_products_scaled(a) for a in expr.args))
    return _product_scaled(rebuilt) if rebuilt.is_Mul else rebuilt


def _product_scaled(product: sp.Expr) -> sp.Expr:
    numbers, pairs = [], []
    for factor in _factors(product):
        base, exponent = factor.as_base_exp()
        if factor.is_number:
            numbers.append(factor)
        elif isinstance(factor, sp.exp):
            # Its square root squared: exp(u) overflows where its product with a small factor does not (a Gumbel's
            # partial in its scale, (loc - x) exp((loc - x)/s)/s**2, is 2e4 where exp(86.9) is inf in float32), and
            # exp(u/2) is in range wherever such a product is.
            pairs.append((sp.exp(factor.args[0] / 2), sp.Integer(2)))
        elif isinstance(factor, expm1):
            # expm1(u/2) (exp(u/2) + 1), exactly: each factor accurate (the second is at least 1), in range where the
            # product with a small factor is (a Gumbel's partial in x, expm1((loc - x)/s)/s, at (loc - x)/s = 90),
            # and -1 times 1 as u nears -inf.
            half = factor.args[0] / 2
            pairs += [(expm1(half), sp.S.One), (sp.exp(half) + 1, sp.S.One)]
        elif (clamped := _clamped_power(factor)) is not None:
            pairs.append(clamped)
        elif exponent.is_Integer and abs(exponent) <= BUDGET.paired_power and (root := _root_of_squares(base)):
            pairs.append((root, 2 * exponent))
        elif exponent.is_Integer and abs(exponent) <= BUDGET.paired_power:
            pairs.append((base, exponent))
        else:
            pairs.append((factor, sp.S.One))
    if len(pairs) < 2 or sum(abs(int(k)) for _, k in pairs) < 3:
        return product
    return sp.Mul(*numbers) * power_product(*(a for pair in pairs for a in pair))
