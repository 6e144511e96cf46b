"""Differences of loggamma and polygamma (digamma, trigamma, ...) at large arguments, by their asymptotic series.

digamma(a) - digamma(a + b) loses every bit where b is small beside a
(the digammas agree to all their digits), and loggamma(x + 1/2) -
loggamma(x) loses log2(x log x) bits: Beta, Student-t and Gamma entropies,
KL divergences between them, a Student-t's partial in its degrees of
freedom.  Past `THRESHOLD` each function is its Stirling series, and the
difference of two series is a sum of differences of like terms, each taken
without cancellation: log(a) - log(b) is log1p((a - b)/b), a**-k - b**-k
is -(a - b) * sum_j a**-(j+1) b**-(k-j), and a - b is simplified
symbolically first ((a + b) - a is b, exactly).  Below it the difference
is computed as written, on its own before anything is added to it: a
Binomial log-mass's partial in k, logits - digamma(k + 1) + digamma(n - k +
1), adds logits to one digamma before the other cancels it.

A log beside a loggamma or digamma whose series leads with it is joined to
that series (`logs_against_gamma`): a Poisson log-mass k log(rate) - rate -
loggamma(k + 1) is k log(rate/k) + (k - rate) - log(2 pi k)/2 - ..., finite
where both of its terms overflow.  Calls at several arguments are series in
each argument's base, the argument without its constant
(`several_argument_series_in_bases`), so that the bases' sums are seen:
loggamma(k + r) - loggamma(k + 1) - loggamma(r).

The identities are general (any arguments of these functions); the search
measures them like every other family's candidate and the gate proves them.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable

import sympy as sp
from sympy.codegen.cfunctions import log1p

from rulegen.derive.expr import log_difference, reciprocal_difference
from rulegen.derive.functions import divided, xlogy
from rulegen.derive.stabilise.points import exact_floats

#: Where the series take over: both arguments above 2**5.  With `TERMS` Bernoulli terms the first one left out
#: is below 2**-56 of the leading term there (B_10 / 32**10 = 6.7e-17 for digamma and trigamma).
THRESHOLD = sp.Integer(2**5)
#: Bernoulli terms of each series.
TERMS = 4


class held(sp.Function):  # noqa: N801 - a marker, gone before anything is measured
    """A difference the identities have already joined, kept from being joined again inside its own fallback;
    `released` takes the marker off."""


def released(expr: sp.Expr) -> sp.Expr:
    return expr.replace(lambda e: isinstance(e, held), lambda e: e.args[0])


def _power_difference(a: sp.Expr, b: sp.Expr, d: sp.Expr, k: int) -> sp.Expr:
    """a**-k - b**-k, d = a - b: -d * sum_j a**-(j+1) b**-(k-j), no difference of two close values."""
    return -d * sp.Add(*(a ** -(j + 1) * b ** -(k - j) for j in range(k)))


def _series_difference(function: sp.Expr, a: sp.Expr, b: sp.Expr, d: sp.Expr) -> sp.Expr | None:
    """f(a) - f(b) for f = loggamma or polygamma(n, .), from the series at infinity, a, b, d placeholders."""
    bernoulli = [sp.bernoulli(2 * k) for k in range(1, TERMS + 1)]
    logs = log1p(d / b)
    if isinstance(function, sp.loggamma):
        # (x - 1/2) log x - x + log(2 pi)/2 + sum_k B_2k / (2k (2k - 1) x**(2k - 1))
        total = (a - sp.S.Half) * logs + d * (sp.log(b) - 1)
        for k, b2k in enumerate(bernoulli, start=1):
            total += b2k / (2 * k * (2 * k - 1)) * _power_difference(a, b, d, 2 * k - 1)
        return total
    order = int(function.args[0])
    if order == 0:
        # log x - 1/(2x) - sum_k B_2k / (2k x**2k)
        total = logs - _power_difference(a, b, d, 1) / 2
        for k, b2k in enumerate(bernoulli, start=1):
            total -= b2k / (2 * k) * _power_difference(a, b, d, 2 * k)
        return total
    # (-1)**(n+1) ((n-1)!/x**n + n!/(2 x**(n+1)) + sum_k B_2k (2k+n-1)!/((2k)! x**(2k+n)))
    n = order
    total = math.factorial(n - 1) * _power_difference(a, b, d, n)
    total += sp.Rational(math.factorial(n), 2) * _power_difference(a, b, d, n + 1)
    for k, b2k in enumerate(bernoulli, start=1):
        coefficient = b2k * sp.Rational(math.factorial(2 * k + n - 1), math.factorial(2 * k))
        total += coefficient * _power_difference(a, b, d, 2 * k + n)
    return (-1) ** (n + 1) * total


def is_gamma_function(f: sp.Expr) -> bool:
    """loggamma(u) or polygamma(n, u) with a non-negative integer order n: the functions this module knows."""
    if isinstance(f, sp.loggamma):
        return True
    return isinstance(f, sp.polygamma) and f.args[0].is_Integer and f.args[0] >= 0


def gamma_difference(f: sp.Expr, g: sp.Expr, tidy: Callable[[sp.Expr], sp.Expr]) -> sp.Expr | None:
    """f - g for like functions of the gamma family (same order): the series past `THRESHOLD`, else f - g computed
    on its own (a `Piecewise` keeps it whole in any sum around it), or None where f and g are not alike."""
    if not (is_gamma_function(f) and is_gamma_function(g)) or f.func != g.func or f.args[:-1] != g.args[:-1]:
        return None
    a, b = f.args[-1], g.args[-1]
    if a == b or not (a.free_symbols or b.free_symbols):
        return None
    d = tidy(a - b)
    big_a, big_b, small_d = sp.Dummy("a"), sp.Dummy("b"), sp.Dummy("d")
    series = _series_difference(f, big_a, big_b, small_d)
    if series is None:
        return None
    large = sp.And(a > THRESHOLD, b > THRESHOLD)
    # Each placeholder fed a point of the series' own region where it is not taken (the double `where`): there
    # log1p(d/b) and 1/a would be nan and inf, and a derivative of the whole multiplies them by 0.
    safe = 2 * THRESHOLD
    fed = {
        big_a: sp.Piecewise((a, large), (safe, True)),
        big_b: sp.Piecewise((b, large), (safe, True)),
        small_d: sp.Piecewise((d, large), (sp.S.Zero, True)),
    }
    with sp.evaluate(False):
        branch = series.xreplace(fed)
    return sp.Piecewise((branch, large), (held(f - g), True))


def zero_sum_groups(total: sp.Expr, tidy: Callable[[sp.Expr], sp.Expr]) -> sp.Expr:
    """A sum with like gamma-family terms whose coefficients add to 0, sum_i c_i f(u_i), as the differences
    sum_{i != r} c_i (f(u_i) - f(u_r)): a Beta entropy's -(a - 1) digamma(a) - (b - 1) digamma(b) + (a + b - 2)
    digamma(a + b) is (1 - a)(digamma(a) - digamma(a + b)) + (1 - b)(digamma(b) - digamma(a + b)).  The reference
    u_r is the argument with the most operations (a + b): its differences with the others simplify."""
    groups: dict[tuple[sp.Expr, ...], list[tuple[int, sp.Expr, sp.Expr]]] = {}
    for index, term in enumerate(total.args):
        factors = sp.Mul.make_args(term)
        for k, f in enumerate(factors):
            if is_gamma_function(f):
                coefficient = sp.Mul(*(factors[:k] + factors[k + 1 :]))
                groups.setdefault((f.func, *f.args[:-1]), []).append((index, coefficient, f))
                break
    for members in groups.values():
        if len(members) < 3 or sp.expand(sp.Add(*(c for _, c, _ in members))) != 0:
            continue
        reference = max(members, key=lambda m: (sp.count_ops(m[2].args[-1]), sp.default_sort_key(m[2])))
        joined = []
        for _, coefficient, f in members:
            if f is reference[2]:
                continue
            difference = gamma_difference(f, reference[2], tidy)
            if difference is None:
                break
            joined.append(coefficient * difference)
        else:
            used = {index for index, _, _ in members}
            rest = [t for index, t in enumerate(total.args) if index not in used]
            return sp.Add(*joined, *rest)
    return total


#: Bernoulli terms of a series in one argument: where its leading terms cancel (1 + (1 - c) trigamma(c) is
#: 1/(2c) + ...), the first term left out must be below 2**-56 of what remains, one order lower, at `THRESHOLD`.
ONE_ARGUMENT_TERMS = 6


def _series(function: sp.Expr, u: sp.Expr) -> sp.Expr:
    """f(u) for f = loggamma or polygamma(n, .): its Stirling series in u, `ONE_ARGUMENT_TERMS` Bernoulli terms."""
    bernoulli = [sp.bernoulli(2 * k) for k in range(1, ONE_ARGUMENT_TERMS + 1)]
    if isinstance(function, sp.loggamma):
        tail = sp.Add(*(b2k / (2 * k * (2 * k - 1)) * u ** (1 - 2 * k) for k, b2k in enumerate(bernoulli, start=1)))
        return (u - sp.S.Half) * sp.log(u) - u + sp.log(2 * sp.pi) / 2 + tail
    n = int(function.args[0])
    if n == 0:
        return sp.log(u) - 1 / (2 * u) - sp.Add(*(b2k / (2 * k) * u ** (-2 * k) for k, b2k in enumerate(bernoulli, 1)))
    total = math.factorial(n - 1) * u**-n + sp.Rational(math.factorial(n), 2) * u ** -(n + 1)
    for k, b2k in enumerate(bernoulli, start=1):
        total += b2k * sp.Rational(math.factorial(2 * k + n - 1), math.factorial(2 * k)) * u ** -(2 * k + n)
    return (-1) ** (n + 1) * total


def one_argument_series(expr: sp.Expr) -> sp.Expr | None:
    """`expr`, whose gamma-family calls all take one argument u, with each call its Stirling series past
    `THRESHOLD` and the whole expanded, so that terms of like order cancel exactly before anything is rounded: a
    Gamma entropy's loggamma(c) + (1 - c) digamma(c) + c is log(c)/2 + log(2 pi)/2 + 1/2 - 1/(3c) - ..., where
    as written c log c cancels against itself; its partial 1 + (1 - c) trigamma(c) is 1/(2c) + 1/(3c**2) + ...
    Below the threshold, `expr` as it is.  None where the calls take several arguments or none."""
    calls = [f for f in expr.atoms(sp.Function) if is_gamma_function(f)]
    arguments = {f.args[-1] for f in calls}
    if len(arguments) > 1:
        return shifted_argument_series(expr)
    if len(arguments) != 1:
        return None
    (u,) = arguments
    if not u.free_symbols:
        return None
    big = sp.Dummy("u", positive=True)
    inside = expr.xreplace({f: f.func(*f.args[:-1], big) for f in calls})
    if u.is_Symbol:
        inside = inside.xreplace({u: big})
    series = inside.xreplace({f: _series(f, big) for f in inside.atoms(sp.Function) if is_gamma_function(f)})
    # Its tail in Horner form, each weight in other variables once (`_in_horner_form`).
    expanded = _in_horner_form(sp.collect(sp.expand(series, log=False), sp.log(big)), [big])
    large = u > THRESHOLD
    fed = sp.Piecewise((u, large), (2 * THRESHOLD, True))
    with sp.evaluate(False):
        branch = expanded.xreplace({big: fed})
    return sp.Piecewise((branch, large), (expr, True))


#: Powers of 1/u kept where the calls' arguments differ by constants: the Stirling series (`ONE_ARGUMENT_TERMS`
#: Bernoulli terms) are right to 1/u**14 relative to their leading term, which is what a leading cancellation of
#: two orders leaves within 2**-56 at `THRESHOLD`.
SHIFTED_ORDERS = 14


def shifted_argument_series(expr: sp.Expr) -> sp.Expr | None:
    """`expr`, whose gamma-family calls take arguments u + c of one variable (constants c: a Student-t's df/2 and
    (df + 1)/2), with its terms in that variable alone as one series in 1/u past `THRESHOLD`, expanded so that like
    orders cancel exactly: a Student-t entropy's partial in df, 1/(2 df) + (df + 1)(trigamma((df + 1)/2) -
    trigamma(df/2))/4, is -1/(4u**2) - 1/(16u**3) + ..., u = df/2, where as written 1/(2 df) cancels against the
    difference (every bit lost from df = 1e16).  Terms in other variables are added as they are.  Below the
    threshold, `expr` as it is.  None where the arguments are not one variable's shifts."""
    exact = exact_floats(expr)
    calls = [f for f in exact.atoms(sp.Function) if is_gamma_function(f)]
    arguments = sorted({f.args[-1] for f in calls}, key=lambda a: (sp.count_ops(a), sp.default_sort_key(a)))
    u = arguments[0]
    shifts = [a - u for a in arguments]
    if len(u.free_symbols) != 1 or not all(s.is_Rational for s in shifts):
        return None
    (x,) = u.free_symbols
    if sp.Poly(u, x).degree() != 1:
        return None
    t = sp.Dummy("t", positive=True)
    (at_t,) = sp.solve(sp.Eq(u, 1 / t), x)
    terms = sp.Add.make_args(exact)
    alone = sp.Add(*(term for term in terms if term.free_symbols <= {x}))
    others = sp.Add(*(term for term in terms if not term.free_symbols <= {x}))
    if not alone.has(*calls):
        return None
    series_at_t = alone.xreplace({f: _series(f, 1 / t + (f.args[-1] - u)) for f in calls}).xreplace({x: at_t})
    expanded = sp.expand(sp.series(series_at_t, t, 0, SHIFTED_ORDERS).removeO(), log=False)
    if expanded.has(sp.Order) or not expanded.free_symbols <= {t}:
        return None
    large = u + min(shifts) > THRESHOLD
    fed = sp.Piecewise((u, large), (2 * THRESHOLD + max(0, -min(shifts)), True))
    big = sp.Dummy("u", positive=True)
    in_u = sp.collect(sp.expand(expanded.xreplace({t: 1 / big}), log=False), sp.log(big))
    with sp.evaluate(False):
        branch = in_u.xreplace({big: fed})
    return sp.Piecewise((branch, large), (alone, True)) + others


def _rewritten_in(coefficient: sp.Expr, u: sp.Expr, big: sp.Dummy) -> sp.Expr:
    """`coefficient` with one of `u`'s variables solved for in u = big, where that leaves fewer other variables
    (then fewer operations): (a + b - 2) beside a call at a + b is big - 2, whose leading term cancels the call's."""
    best = coefficient
    for s in sorted(u.free_symbols, key=sp.default_sort_key):
        (solved,) = sp.solve(sp.Eq(u, big), s)
        candidate = sp.expand(coefficient.xreplace({s: solved}))
        if (len(candidate.free_symbols - {big}), sp.count_ops(candidate)) < (
            len(best.free_symbols - {big}),
            sp.count_ops(best),
        ):
            best = candidate
    return best


def _in_horner_form(total: sp.Expr, variables: list[sp.Dummy]) -> sp.Expr:
    """`total` with its terms c u**-k in each of `variables` as one polynomial in 1/u, nested (Horner): the series'
    tail is added smallest first, and each power of 1/u is a product, never a power that underflows early."""
    w = sp.Dummy("w")
    nested = []
    for u in variables:
        tail = sp.Add(*(t for t in sp.Add.make_args(total) if t.free_symbols == {u} and t.as_coeff_exponent(u)[1] < 0))
        if tail != 0:
            total -= tail
            nested.append(sp.horner(sp.expand(tail.xreplace({u: 1 / w})), w).xreplace({w: 1 / u}))
        # Terms c g u**-k with g a weight in variables that are no series' (q_c beside a digamma at p_c) as g times
        # one polynomial in 1/u: -691 q_c/(32760 u**12) as written multiplies 691 q_c first, inf from q_c = 5e35 in
        # float32 where the value is finite.
        weighted: dict[sp.Expr, list[sp.Expr]] = {}
        for t in sp.Add.make_args(total):
            weight, power = t.as_independent(u, as_Add=False)
            weight = weight.as_coeff_Mul()[1]
            if (
                weight.free_symbols
                and not weight.free_symbols & set(variables)
                and power.free_symbols == {u}
                and power.as_coeff_exponent(u)[1] < 0
                and (power / u ** power.as_coeff_exponent(u)[1]).is_number
            ):
                weighted.setdefault(weight, []).append(t)
        for weight, terms in weighted.items():
            polynomial = sp.Poly(sp.expand((sp.Add(*terms) / weight).xreplace({u: 1 / w})), w)
            if len(terms) < 2 and polynomial.degree() < 2:
                continue
            total -= sp.Add(*terms)
            nested.append(_weighted_horner(weight, polynomial, u))
    return total + sp.Add(*nested)


def _weighted_horner(weight: sp.Expr, polynomial: sp.Poly, u: sp.Expr) -> sp.Expr:
    """`weight` times `polynomial` in 1/u as Horner's rule by divisions, the weight multiplying the polynomial's
    value before the last divisions by u: q0/(p1 + p0)**2 beside a pole is (q0/P)/P, finite in float32 where P**2
    underflows (P = 1e-25), and each power of 1/u is a quotient, never a power that under- or overflows early."""
    coefficients = {k: c for (k,), c in polynomial.terms()}
    low, high = min(coefficients), max(coefficients)
    inner: sp.Expr = coefficients[high]
    for k in range(high - 1, low - 1, -1):
        inner = coefficients.get(k, sp.S.Zero) + divided(inner, u)
    chain = weight * inner
    for _ in range(low):
        chain = divided(chain, u)
    return chain


def pole_weight(n: int) -> int:
    """polygamma(n, u) - polygamma(n, u + 1) is this over u**(n + 1), exactly."""
    return (-1) ** (n + 1) * math.factorial(n)


def _pole(function: sp.Expr, u: sp.Expr) -> sp.Expr:
    """f(u) - f(u + 1) for f = loggamma or polygamma(n, .): -log(u), or `pole_weight(n)`/u**(n+1), exactly."""
    if isinstance(function, sp.loggamma):
        return -sp.log(u)
    n = int(function.args[0])
    return pole_weight(n) * u ** -(n + 1)


#: Below `THRESHOLD`, f(a) - f(b) at arguments this close, |a - b| <= (a + b)/2**5 with a + b >= 2, is its
#: Taylor series about their mean (`close_difference`): each odd term is under 2**-10 of the one before it (h/m <=
#: 2**-5, and f's derivatives at m >= 1 grow by about k/m with their order k), so `CLOSE_TERMS` of them leave out
#: under 2**-57 of the first.  As written there, every digit the two calls share cancels: digamma(p1 + p0 + 1) -
#: digamma(p1 + 1) is 0 at p0 = 1e-166, a KL divergence of two Betas' partial in q1 p0 trigamma(p1 + 1).
CLOSE_RATIO = sp.Integer(2**5)
CLOSE_TERMS = 6


def close_difference(function: sp.Expr, a: sp.Expr, b: sp.Expr) -> sp.Expr:
    """f(a) - f(b) for f = loggamma or polygamma(n, .) (`function`'s own): where a and b are close (`CLOSE_RATIO`)
    the odd terms of its Taylor series about m = (a + b)/2, 2 h (f1(m) + h**2/3! (f3(m) + ...)) with fk the k-th
    derivative and h = (a - b)/2 taken symbolically ((p1 + p0 + 1) - (p1 + 1) is p0), else as written."""
    h, m = (a - b) / 2, (a + b) / 2
    t = sp.Dummy("t")
    at_t = function.func(*function.args[:-1], t)

    def derivative(k: int) -> sp.Expr:
        return at_t.diff(t, k).xreplace({t: m})

    square = h**2
    nested = derivative(2 * CLOSE_TERMS - 1)
    for j in range(CLOSE_TERMS - 2, -1, -1):
        nested = derivative(2 * j + 1) + square / ((2 * j + 2) * (2 * j + 3)) * nested
    near = sp.And(a + b >= 2, CLOSE_RATIO * sp.Abs(a - b) <= a + b)
    as_written = function.func(*function.args[:-1], a) - function.func(*function.args[:-1], b)
    return sp.Piecewise((2 * h * nested, near), (as_written, True))


def close_differences(terms: list[sp.Expr]) -> list[sp.Expr]:
    """`terms`, with c f(a) and -c f(b) of one gamma-family function (each coefficient split into its monomials)
    paired into c (f(a) - f(b)) by `close_difference`; the other terms as they are."""
    others: list[sp.Expr] = []
    calls: list[tuple[sp.Expr, sp.Expr]] = []
    for term in terms:
        found = [f for f in sp.Mul.make_args(term) if is_gamma_function(f)]
        if len(found) == 1:
            calls += [(c, found[0]) for c in sp.Add.make_args(sp.expand(term / found[0]))]
        else:
            others.append(term)
    paired: list[sp.Expr] = []
    used: set[int] = set()
    for i, (c, f) in enumerate(calls):
        if i in used:
            continue
        used.add(i)
        match = next((k for k, (d, g) in enumerate(calls) if k not in used and _opposite(c, f, d, g)), None)
        if match is None:
            paired.append(c * f)
            continue
        used.add(match)
        paired.append(c * close_difference(f, f.args[-1], calls[match][1].args[-1]))
    return [*others, *paired]


def _opposite(c: sp.Expr, f: sp.Expr, d: sp.Expr, g: sp.Expr) -> bool:
    """Whether d g is -c times f's function at another argument."""
    if g.func != f.func or g.args[:-1] != f.args[:-1] or g.args[-1] == f.args[-1]:
        return False
    return sp.expand(c + d) == 0


def _pair(
    order: int, p: sp.Dummy, q: sp.Dummy, d: sp.Expr, where: tuple[sp.Expr, sp.Expr], weight: sp.Expr = sp.S.One
) -> sp.Expr:
    """`weight` times the difference of like terms at p and q, d = p - q (their arguments `where`), without
    subtracting two close values:
    log(p) - log(q); 1/p - 1/q = -(d/max)/min, by the larger first (|d| <= max: in range wherever the difference
    is), the weight multiplying d/max before the smaller divides; 1/p**k - 1/q**k = (1/p - 1/q) sum_j p**-j
    q**-(k-1-j)."""
    if order == 0:
        return weight * log_difference(p, q, d, where)
    if order == -1:
        # p log p - q log q = p (log p - log q) + (p - q) log q: loggamma(a + b) - loggamma(b) leads with it, every
        # digit of (a + b) log(a + b) cancelled by b log b where a << b.
        return weight * (p * log_difference(p, q, d, where) + d * sp.log(q))
    simple = reciprocal_difference(q, p, -d, (where[1], where[0]), weight=weight)
    return simple if order == 1 else simple * sp.Add(*(p**-j * q ** -(order - 1 - j) for j in range(order)))


def _like_term(order: int, u: sp.Dummy) -> sp.Expr:
    """The term of `order` that `_joined` pairs: u log(u) (-1), log(u) (0) or u**-order."""
    return u * sp.log(u) if order == -1 else sp.log(u) if order == 0 else u**-order


def _sums_of_parts(weights: dict[tuple[int, sp.Dummy], sp.Expr], argument: dict[sp.Dummy, sp.Expr]) -> list[sp.Expr]:
    """c u log u - c sum_i v_i log v_i, for u = sum_i v_i (two or three), as c sum_i v_i log(u/v_i), each term of one
    sign, with those weights taken out of `weights`: a Beta log-density's (a + b) log(a + b) - a log a - b log b,
    paired as two, cancels wherever a and b differ; a log-Beta function's a log a + b log b - (a + b) log(a + b)
    (c = -1) is inf - inf where a is 1e308."""
    found = []
    for order, u in list(weights):
        c = weights[order, u]
        if order != -1 or c == 0:
            continue
        others = [v for (o, v), w in weights.items() if o == -1 and w == -c]
        groups = (g for size in (2, 3) for g in itertools.combinations(others, size))
        parts = next((g for g in groups if sp.expand(argument[u] - sp.Add(*(argument[v] for v in g))) == 0), None)
        if parts is None:
            continue
        terms = (
            v * log_difference(u, v, sp.expand(argument[u] - argument[v]), (argument[u], argument[v])) for v in parts
        )
        found.append(c * sp.Add(*terms))
        for v in (u, *parts):
            weights[order, v] = sp.S.Zero
    return found


def _weight_size(weight: sp.Expr) -> tuple[int, int]:
    """How complex a weight in other variables is: its variables, then its operations."""
    return len(weight.free_symbols), int(sp.count_ops(weight))


def _weights_joined(
    symbolic: dict[tuple[int, sp.Dummy], sp.Expr], argument: dict[sp.Dummy, sp.Expr]
) -> list[tuple[int | None, sp.Expr]]:
    """The like terms of `symbolic` weights (in other variables), c and e, paired where c + e is simpler than e:
    c (f(p) - f(q)) + (c + e) f(q), the weights left in `symbolic` (a KL divergence of two Betas: -q1/p1 + (q1 +
    q0)/(p1 + p0) is -q1 (1/p1 - 1/(p1 + p0)) + q0/(p1 + p0)).  Until no pair is left: a join leaves the sum where
    another can take it (-q0 log p0 + (q1 + q0) log P leaves q1 log P, which -q1 log p1 joins)."""
    found: list[tuple[int | None, sp.Expr]] = []
    joining = True
    while joining:
        joining = False
        for (order, p), (other, q) in itertools.permutations(list(symbolic), 2):
            if other != order or symbolic[order, p] == 0 or symbolic[order, q] == 0:
                continue
            c, e = symbolic[order, p], symbolic[order, q]
            joined = sp.expand(c + e)
            # The simpler weight multiplies the difference, the sum goes to the other's term: (q1 + q0)(1/p - 1/q) +
            # q0/q cancels where q0 dwarfs q1.  The sum must be simpler than the weight it replaces: q0 beside
            # -(q1 + q0) leaves -q1, and q1 beside -q1 nothing.
            if not _weight_size(c) <= _weight_size(e) or (joined != 0 and not _weight_size(joined) < _weight_size(e)):
                continue
            d = sp.expand(argument[p] - argument[q])
            found.append((order, _pair(order, p, q, d, (argument[p], argument[q]), weight=c)))
            symbolic[order, p], symbolic[order, q] = sp.S.Zero, joined
            joining = True
    return found


def _joined_terms(
    total: sp.Expr, big: dict[sp.Expr, sp.Dummy], orders: tuple[int, ...]
) -> tuple[list[tuple[int | None, sp.Expr]], int]:
    """`total` with its like terms c u log(u) (order -1), c log(u) (order 0) or c/u**k (order k) of opposite signs
    paired as differences, the pair whose arguments differ most simply first, each term with its order (None: not
    a like term), and how many pairs were joined:
    digamma(r + k) - digamma(r) leads with log(r + k) - log(r), which is log1p(k/r), not 0, where k is small beside
    r, and its pole parts at 0 are 1/r - 1/(r + k), (k/(r + k))/r, not inf - inf.  Two double poles of unlike
    weights c, -e are (sqrt(c)/p - sqrt(e)/q)(sqrt(c)/p + sqrt(e)/q): each factor in range where either square is
    not."""
    weights: dict[tuple[int, sp.Dummy], sp.Expr] = {}
    symbolic: dict[tuple[int, sp.Dummy], sp.Expr] = {}
    rest: list[tuple[int | None, sp.Expr]] = []
    for term in sp.Add.make_args(sp.expand(total, log=False) if -1 in orders else total):
        coefficient, factor = term.as_independent(*big.values(), as_Add=False)
        if isinstance(factor, sp.log) and factor.args[0] in big.values():
            key = (0, factor.args[0])
        elif factor.is_Mul and len(factor.args) == 2 and any(factor == u * sp.log(u) for u in big.values()):
            key = (-1, next(u for u in big.values() if factor == u * sp.log(u)))
        elif factor.is_Pow and factor.base in big.values() and factor.exp.is_Integer and factor.exp < 0:
            key = (int(-factor.exp), factor.base)
        else:
            key = None
        if key is None or key[0] not in orders:
            rest.append((None, term))
        else:
            chosen = weights if coefficient.is_Rational else symbolic
            chosen[key] = chosen.get(key, sp.S.Zero) + coefficient
    argument = {b: u for u, b in big.items()}
    weighted = _weights_joined(symbolic, argument)
    rest += weighted
    count = len(weighted)
    for term in _sums_of_parts(weights, argument):
        rest.append((-1, term))
        count += 1
    pairs = sorted(
        (
            (sp.expand(argument[p] - argument[q]), order, p, q)
            for (order, p) in weights
            for (other, q) in weights
            if other == order and p != q
        ),
        key=lambda pair: (pair[1], sp.count_ops(pair[0]), sp.default_sort_key(pair[0])),
    )
    for d, order, p, q in pairs:
        c, e = weights[order, p], -weights[order, q]
        if not c > 0 < e:
            continue
        count += 1
        alone = sum(1 for (o, _), w in weights.items() if o == order and w != 0) == 2
        if order == 2 and c != e and alone:
            first, second = sp.sqrt(c) / p, sp.sqrt(e) / q
            rest.append((order, (first - second) * (first + second)))
            weights[order, p] = weights[order, q] = sp.S.Zero
            continue
        joined = min(c, e)
        rest.append((order, _pair(order, p, q, d, (argument[p], argument[q]), weight=joined)))
        weights[order, p] -= joined
        weights[order, q] += joined
    # A weight that is a sum multiplies term by term: (q1 + q0)/(p1 + p0) overflows in q1 + q0 where q1/(p1 + p0) +
    # q0/(p1 + p0) does not (float32 q0 = 3.4e38).
    unpaired = [
        (order, t * _like_term(order, u))
        for (order, u), w in (*symbolic.items(), *weights.items())
        for t in sp.Add.make_args(sp.expand(w))
    ]
    return [*rest, *unpaired], count


def _joined(total: sp.Expr, big: dict[sp.Expr, sp.Dummy], orders: tuple[int, ...]) -> tuple[sp.Expr, int]:
    """`_joined_terms` summed."""
    terms, count = _joined_terms(total, big, orders)
    return sp.Add(*(term for _, term in terms)), count


#: Where the terms of the highest order of 1/u and those of lower orders are both at least this large, the highest
#: alone is their sum: its terms are the others' times 1/u, where u is below 2**-1000 of them (in float32 the bound
#: is inf, and the test reads "both are inf").
BOTH_HUGE = sp.Integer(2) ** 1000


def _highest_order_first(terms: list[tuple[int | None, sp.Expr]]) -> sp.Expr:
    """The sum of pole `terms` (order k: c/u**k) where the highest order and the lower ones may overflow to opposite
    infinities: a Beta entropy's partial at a = 5e-324 is (1/a - sqrt(2)/(a + b))(1/a + sqrt(2)/(a + b)) - (b/(a +
    b))/a, inf - inf, where it is inf."""
    top = max((order for order, _ in terms if order is not None), default=None)
    highest = sp.Add(*(term for order, term in terms if order == top))
    lower = sp.Add(*(term for order, term in terms if order != top))
    if top is None or top < 2 or lower == 0:
        return highest + lower
    both_huge = sp.And(sp.Abs(highest) >= BOTH_HUGE, sp.Abs(lower) >= BOTH_HUGE)
    return sp.Piecewise((highest, both_huge), (highest + lower, True))


#: The orders of 1/u in a series of `ONE_ARGUMENT_TERMS` Bernoulli terms (polygamma(n) to order 2 terms + n + 1).
_SERIES_ORDERS = 2 * ONE_ARGUMENT_TERMS + 4


def several_argument_series(expr: sp.Expr) -> sp.Expr | None:
    """`expr`, a sum of terms c f(u) with f of the gamma family and u linear in the variables (a, b, a + b), with each
    call its Stirling series where its argument is past `THRESHOLD`, and each coefficient c written in its call's
    argument where it can be, so that like orders cancel exactly before anything is rounded: a Beta entropy's partial
    -(a - 1) trigamma(a) + (a + b - 2) trigamma(a + b) is 1/(2a) - 3/(2(a + b)) + ..., where as written two terms
    near 1 cancel (every bit lost from a = 2**53).  Terms polynomial in the arguments go back to the variables, so
    -a - b + (a + b) is 0 before anything is computed.  Where some arguments are past the threshold and others not
    (a = 1e300, b = 1e-200), the calls past it are series and the others are as written: the series of a and a + b
    cancel each other's leading terms, and b's calls are finite on their own.  Below the threshold in every
    argument, `expr` as it is, or its calls' pole parts joined.  None where a call is not a factor of a term, or the
    arguments are one or not linear."""
    found = _calls_split(expr)
    if found is None:
        return None
    arguments, by_call, others, others_written = found
    big = {u: sp.Dummy("u", positive=True) for u in arguments}
    called: list[tuple[sp.Expr, sp.Expr, sp.Expr]] = []
    poles, shifted = [], []
    for term, f in by_call:
        u, coefficient = f.args[-1], term / f
        written = _rewritten_in(coefficient, u, big[u])
        called.append((term, f, written))
        poles.append(sp.expand(written * _pole(f, big[u]), log=False))
        shifted.append(coefficient * f.func(*f.args[:-1], u + 1))
    raw = {b: u for u, b in big.items()}
    # Near 0 each call is its pole part and the call one further on (f(u) = pole + f(u + 1), exactly), and the
    # pole parts are joined: their sum is what overflows or cancels there.
    pole_terms, joins = _joined_terms(sp.collect(sp.Add(*poles), [sp.log(b) for b in big.values()]), big, (0, 1, 2))
    # A weight in other variables over a double pole divides twice (`_weighted_horner`): q0/(p1 + p0)**2.
    pole_terms = [(order, _in_horner_form(term, list(big.values()))) for order, term in pole_terms]
    near_poles = _highest_order_first(pole_terms)
    # One argument past the threshold is a series too: its leading terms cancel the other terms' (a KL divergence of
    # two Gammas' (p - q) digamma(p) - loggamma(p) leads with p, which -p of its rate term cancels: inf - inf at
    # p = 1e306 as written, where the divergence is 7200), and the calls at the others are as written.  The terms
    # beside the calls are as written where nothing cancels against a series (below the threshold, or a series
    # that cancels none of them): a Gamma KL's p (q_rate - p_rate)/p_rate, expanded, overflows in p q_rate
    # (p = 1e-12 in float32).
    branches = [
        (_series_branch(called, others, {u: big[u] for u in past}, large, others_written=others_written), large)
        for past in _arguments_past(arguments)
        for large in [sp.And(*(u > THRESHOLD if u in past else u <= THRESHOLD for u in arguments))]
    ]
    small = expr
    others = others_written
    if joins:
        # The calls' sum is taken whole (a `where` of its own, on the last branch's own region) before the other
        # terms are added: a Beta log-density's partial in b, log1p(-x) - digamma(b + 1) + digamma(a + b + 1) at
        # a = 7.6e-100, b = 21.92, kept log1p(-x) = -2.8e-24 only as (digamma(a + b + 1) - digamma(b + 1)) +
        # log1p(-x).  That region holds points where some argument is past the threshold, where no branch of
        # their own is made: the poles are joined there too (1/p0 - 1/(p1 + p0) beside q1 + q0 = 1e237).
        region = sp.Not(sp.Or(*(condition for _, condition in branches)))
        called_sum = sp.Piecewise((sp.Add(near_poles.xreplace(raw), *shifted), region), (expr - sp.Add(*others), True))
        small = called_sum + sp.Add(*others)
    return sp.Piecewise(*branches, (small, True))


def _calls_split(
    expr: sp.Expr,
) -> tuple[list[sp.Expr], list[tuple[sp.Expr, sp.Expr]], list[sp.Expr], list[sp.Expr]] | None:
    """The linear arguments of `expr`'s calls of the gamma family, (term, its call) for each term that is a
    coefficient times one, the terms that hold none, and those as written (`_as_written`); None where a call is not
    a factor of a term or an argument is not linear."""
    exact = exact_floats(expr)
    calls = [f for f in exact.atoms(sp.Function) if is_gamma_function(f)]
    arguments = _linear_arguments({f.args[-1] for f in calls})
    split = _terms_by_call(exact, calls)
    if arguments is None or split is None:
        return None
    by_call, others = split
    return arguments, by_call, others, _as_written(exact, calls, others)


def _as_written(exact: sp.Expr, calls: list[sp.Expr], others: list[sp.Expr]) -> list[sp.Expr]:
    """The terms of the sum `exact` that hold none of `calls`, as written, where they add to `others` (the same terms
    expanded); else `others`."""
    written = [t for t in sp.Add.make_args(exact) if not t.has(*calls)]
    return written if sp.expand(sp.Add(*written) - sp.Add(*others), log=False) == 0 else others


def _linear_arguments(arguments: set[sp.Expr]) -> list[sp.Expr] | None:
    """`arguments`, simplest first, where there are two or more and each is linear in its variables; else None."""
    ordered = sorted(arguments, key=lambda a: (sp.count_ops(a), sp.default_sort_key(a)))
    if len(ordered) < 2:
        return None
    for u in ordered:
        if not u.free_symbols or any(sp.Poly(u, s).degree() != 1 for s in u.free_symbols):
            return None
    return ordered


def _terms_by_call(exact: sp.Expr, calls: list[sp.Expr]) -> tuple[list[tuple[sp.Expr, sp.Expr]], list[sp.Expr]] | None:
    """(term, its call) for each term of the sum `exact` that is a coefficient times one of `calls`, and the terms
    that hold none; None where a term holds them otherwise (two calls, or one inside another function)."""
    by_call, others = [], []
    for term in sp.Add.make_args(sp.expand(exact, log=False, deep=False)):
        factors = [f for f in sp.Mul.make_args(term) if is_gamma_function(f)]
        if len(factors) == 1:
            by_call.append((term, factors[0]))
        elif term.has(*calls):
            return None
        else:
            others.append(term)
    return by_call, others


#: The most sets of arguments past the threshold, each a branch of its own, beside the one where all are: 3 reach
#: a Beta's (a, b, a + b) past it but one of a and b, or a + b alone.
MIXED_BRANCHES = 3


def _arguments_past(arguments: list[sp.Expr], fewest: int = 1) -> list[set[sp.Expr]]:
    """The sets of `arguments` that can be past the threshold while the others are not, all of them first: an
    argument at least another (a + b beside a, for positive a and b) is past it wherever the other is.  Sets of
    fewer than `fewest` arguments are none of them (a caller with no series for them).  All sets but the first are
    left out where there are more than `MIXED_BRANCHES`."""
    everything = set(arguments)
    at_least = {(u, v) for u in arguments for v in arguments if u != v and sp.expand(v - u).is_nonnegative}
    mixed = [
        set(past)
        for size in range(len(arguments) - 1, fewest - 1, -1)
        for past in itertools.combinations(arguments, size)
        if not any(u in past and v not in past for u, v in at_least)
    ]
    return [everything, *(mixed if len(mixed) <= MIXED_BRANCHES else [])]


def _series_branch(
    called: list[tuple[sp.Expr, sp.Expr, sp.Expr]],
    others: list[sp.Expr],
    big: dict[sp.Expr, sp.Dummy],
    large: sp.Expr,
    in_bases: bool = False,
    others_written: list[sp.Expr] | None = None,
) -> sp.Expr:
    """The sum of `called` terms (term, call, its coefficient in its argument) and `others` with each call at an
    argument of `big` its Stirling series, like orders of two arguments joined (-1/(2a) + 1/(2(a + b)) at b << a),
    fed its argument where `large` holds; the other calls as written.  `in_bases`: `big` holds the arguments without
    their constants (k for loggamma(k + 1)), and each call is its series in that base (`_series_in_base`).
    `others_written`: `others` as the expression writes them (None: as they are), the polynomial part's where nothing of
    it cancels (`_cancelled_or_as_written`)."""

    def series(f: sp.Expr) -> sp.Expr | None:
        shift, base = f.args[-1].as_coeff_Add() if in_bases else (sp.S.Zero, f.args[-1])
        if base not in big:
            return None
        return _series_in_base(f, big[base], shift) if in_bases else _series(f, big[base])

    terms = []
    # A call that is no series here keeps its terms' coefficients as one, as written, added after the series are
    # joined (which expand what they join): (1 - a) trigamma(a) is inf at a = 5e-324, where a trigamma(a) alone is
    # inf too, and their difference nan.
    as_written: dict[sp.Expr, sp.Expr] = {}
    for term, f, written in called:
        found = series(f)
        if found is None:
            as_written[f] = as_written.get(f, sp.S.Zero) + term / f
        else:
            terms.append(sp.expand(written * found, log=False))
    kept_whole = [coefficient * f for f, coefficient in as_written.items()]
    series = sp.collect(sp.Add(*terms, *others), [sp.log(b) for b in big.values()])
    series = _in_horner_form(_joined(series, big, orders=(-1, *range(_SERIES_ORDERS)))[0], list(big.values()))
    exact_part, guarded = _guarded(series, big, large, others, others_written)
    with sp.evaluate(False):
        return sp.Add(*exact_part, *guarded, *kept_whole)


def _guarded(
    series: sp.Expr, big: dict[sp.Expr, sp.Dummy], large: sp.Expr, others: list[sp.Expr], written: list[sp.Expr] | None
) -> tuple[list[sp.Expr], list[sp.Expr]]:
    """A series branch's terms in the variables: its polynomial part (none, or one term, `_cancelled_or_as_written`),
    and each other term fed its arguments where `large` holds (2 THRESHOLD elsewhere).  A log or a power of 1/u is nan
    or inf at the points of the other branch, where a polynomial is not: it goes back to the variables unguarded, and
    its like terms cancel (-a - b + (a + b) is 0)."""
    raw = {b: u for u, b in big.items()}
    fed = {b: sp.Piecewise((u, large), (2 * THRESHOLD, True)) for u, b in big.items()}
    series_terms = sp.Add.make_args(series)
    polynomial = [t for t in series_terms if not t.has(sp.log) and t.is_polynomial(*big.values())]
    exact_part = _cancelled_or_as_written(sp.Add(*polynomial).xreplace(raw), others, written)
    with sp.evaluate(False):
        guarded = [_fed(t, fed, raw) for t in series_terms if t not in polynomial]
    return ([exact_part] if exact_part != 0 else []), guarded


def _fed(term: sp.Expr, fed: dict[sp.Expr, sp.Expr], raw: dict[sp.Expr, sp.Expr]) -> sp.Expr:
    """`term` with its arguments `fed`, but in the conditions of its `where`s (`_highest_order_first`), where they
    are `raw`: a condition is never differentiated, and a `where` in a condition is folded by sympy into
    if-then-elses over every branch (seconds per term, or a RecursionError) whenever the condition is built."""
    if isinstance(term, sp.Piecewise):
        return sp.Piecewise(*((_fed(e, fed, raw), c.xreplace(raw)) for e, c in term.args), evaluate=False)
    if not term.args or not term.has(sp.Piecewise):
        return term.xreplace(fed)
    return term.func(*(_fed(a, fed, raw) for a in term.args))


def _cancelled_or_as_written(exact_part: sp.Expr, others: list[sp.Expr], written: list[sp.Expr] | None) -> sp.Expr:
    """`exact_part`, the polynomial part of a series branch in the variables, its like terms added, where some of
    `others` (the terms beside the calls, expanded) cancel in it; else the series' own part plus those terms as
    `written`: p (q_rate - p_rate)/p_rate beside a loggamma(q) past the threshold, expanded as p q_rate/p_rate - p,
    overflows in p q_rate where as written it does not, and the series' -q cancels nothing of it."""
    if written is None:
        return exact_part
    plain = [t for t in others if not t.has(sp.log)]
    own = sp.expand(exact_part - sp.Add(*plain))
    if len(sp.Add.make_args(exact_part)) < len(plain) + len(sp.Add.make_args(own)) - (own == 0):
        return exact_part
    kept = [t for t in written if not t.has(sp.log)]
    if sp.expand(sp.Add(*kept) - sp.Add(*plain)) != 0:
        return exact_part
    return own + sp.Add(*kept)


def _gamma_term(term: sp.Expr) -> tuple[sp.Expr, sp.Expr] | None:
    """(g, f) for a term g f(u) with f loggamma or digamma and g a number, else None."""
    coefficient, rest = term.as_coeff_Mul()
    if isinstance(rest, sp.loggamma) or (isinstance(rest, sp.polygamma) and rest.args[0] == 0):
        return (coefficient, rest) if rest.args[-1].free_symbols else None
    return None


def _log_term(term: sp.Expr) -> tuple[sp.Expr, sp.Expr] | None:
    """(c, b) for a term c log(b) or c xlogy(x, b) (c x log(b)), else None."""
    factors = sp.Mul.make_args(term)
    logs = [f for f in factors if isinstance(f, (sp.log, xlogy))]
    if len(logs) != 1:
        return None
    (f,) = logs
    coefficient = sp.Mul(*(g for g in factors if g is not f))
    if isinstance(f, xlogy):
        return coefficient * f.args[0], f.args[1]
    return coefficient, f.args[0]


def _leading(function: sp.Expr, w: sp.Expr, shift: sp.Expr) -> sp.Expr:
    """The terms of f(w + shift)'s series in w that are not powers of 1/w: (w + shift - 1/2) log w - w + log(2 pi)/2
    for loggamma, log w for digamma, none for trigamma and on."""
    if isinstance(function, sp.loggamma):
        return (w + shift - sp.S.Half) * sp.log(w) - w + sp.log(2 * sp.pi) / 2
    return sp.log(w) if function.args[0] == 0 else sp.S.Zero


def _series_in_base(function: sp.Expr, w: sp.Expr, shift: sp.Expr) -> sp.Expr:
    """f(w + shift) for f = loggamma or polygamma(n, .) as a series in w: its logs are of w, not of w + shift."""
    order = 0 if isinstance(function, sp.loggamma) else int(function.args[0])
    tail = _shifted_tail(function.func, order, shift).xreplace({_TAIL_VARIABLE: w})
    return _leading(function, w, shift) + tail


@functools.lru_cache(maxsize=32)
def _shifted_tail(function: type, order: int, shift: sp.Rational) -> sp.Expr:
    """What is left of f(w + shift)'s series past its leading terms in w, as powers of 1/`_TAIL_VARIABLE`:
    loggamma(w + t) - ((w + t - 1/2) log w - w + log(2 pi)/2), digamma(w + t) - log w (order 0), polygamma(n, w +
    t) (order n >= 1)."""
    w, x = _TAIL_VARIABLE, sp.Dummy("x", positive=True)
    call = sp.loggamma(w) if function is sp.loggamma else sp.polygamma(order, w)
    rest = _series(call, w + shift) - _leading(call, w, shift)
    if shift == 0:
        return sp.expand(rest)
    expanded = sp.series(rest.xreplace({w: 1 / x}), x, 0, SHIFTED_ORDERS).removeO()
    return sp.expand(expanded.xreplace({x: 1 / w}))


_TAIL_VARIABLE = sp.Dummy("w", positive=True)


#: Past this log of the ratio of the log's argument to the call's, the joined log is a difference of two logs: the
#: ratio itself would leave float32's normal range from e**87 (its under- and overflow are float64's past e**700).
FAR_LOG_RATIO_IN_EITHER_DTYPE = sp.Integer(2**6)


def logs_against_gamma(expr: sp.Expr) -> sp.Expr | None:
    """`expr`, a sum with a term c log(b) (or xlogy) beside g loggamma(w + t), c = -g (w + m) for constants t and m,
    or beside g digamma(w + t), c = -g, with the pair written past `THRESHOLD` as Stirling's series of the call in
    w joined to the log: g (loggamma(w + t) - (w + m) log b) is g (-(w + m) (log b - log w) + (t - 1/2 - m) log w
    - w + log(2 pi)/2 + rest(w)), and g (digamma(w + t) - log b) is g (-(log b - log w) + digamma(w + t) - log w),
    rest and the last in powers of 1/w.  A Poisson log-mass k log(rate) - rate - loggamma(k + 1) is inf - inf past
    k = 2.5e305 as written (both terms overflow) and loses every bit before that (each is 700 times the value),
    where the pair is k log(rate/k) - log(k)/2 + (k - rate) - log(2 pi)/2 - rest(k); its partial in k, log(rate) -
    digamma(k + 1), is log(rate/k) - 1/(2k) + ..., not two logs that agree to every digit.  w is the call's
    argument without its constant, so that b - w (rate - k) is not rounded through w + t (k + 1 is k at 1e305).
    The terms polynomial in the variables (w beside -rate) are added first, so that they cancel exactly.  Below
    the threshold, `expr` as it is.  None where no pair is found."""
    terms = list(sp.Add.make_args(expr))
    logs = {k: found for k, term in enumerate(terms) if (found := _log_term(term)) is not None}
    pairs: list[tuple[int, int, sp.Expr, sp.Expr, sp.Expr, sp.Expr]] = []
    used: set[int] = set()
    for index, term in enumerate(terms):
        gamma = _gamma_term(term)
        if gamma is None:
            continue
        g, f = gamma
        for other, (c, b) in logs.items():
            if other in used:
                continue
            w = f.args[-1].as_coeff_Add()[1]
            # loggamma: the log's coefficient is -g (w + m); digamma: it is -g.
            m = sp.expand(-c / g - w) if isinstance(f, sp.loggamma) else sp.expand(c + g)
            if m.is_Rational and (isinstance(f, sp.loggamma) or m == 0):
                pairs.append((index, other, g, f, b, m))
                used |= {index, other}
                break
    if not pairs:
        return None
    large = sp.And(*(f.args[-1].as_coeff_Add()[1] > THRESHOLD for _, _, _, f, _, _ in pairs))
    polynomial: list[sp.Expr] = []
    guarded: list[sp.Expr] = []
    for _, _, g, f, b, m in pairs:
        t, w = f.args[-1].as_coeff_Add()
        big_w, big_b, small_d = sp.Dummy("w", positive=True), sp.Dummy("b", positive=True), sp.Dummy("d")
        fed = {
            big_w: sp.Piecewise((w, large), (2 * THRESHOLD, True)),
            big_b: sp.Piecewise((b, large), (1, True)),
            small_d: sp.Piecewise((sp.expand(b - w), large), (1 - 2 * THRESHOLD, True)),
        }
        order = 0 if isinstance(f, sp.loggamma) else int(f.args[0])
        tail = g * _shifted_tail(f.func, order, t).xreplace({_TAIL_VARIABLE: big_w})
        tail = _in_horner_form(sp.expand(tail), [big_w])
        apart = log_difference(big_b, big_w, small_d, (b, w), far_log_ratio=FAR_LOG_RATIO_IN_EITHER_DTYPE)
        if isinstance(f, sp.loggamma):
            polynomial.append(-g * w)
            joined = -g * (w + m) * apart + g * (t - sp.S.Half - m) * sp.log(big_w) + g * sp.log(2 * sp.pi) / 2
        else:
            joined = -g * apart
        with sp.evaluate(False):
            guarded.append((joined + tail).xreplace(fed))
    others = [t for k, t in enumerate(terms) if k not in used]
    polynomial += [t for t in others if t.is_polynomial(*t.free_symbols)]
    rest = [t for t in others if not t.is_polynomial(*t.free_symbols)]
    exact_part = sp.expand(sp.Add(*polynomial))
    with sp.evaluate(False):
        branch = sp.Add(*([exact_part] if exact_part != 0 else []), *guarded, *rest)
    return sp.Piecewise((branch, large), (expr, True))


def several_argument_series_in_bases(expr: sp.Expr) -> sp.Expr | None:
    """`several_argument_series` with each call's argument taken apart into a base and a constant, u = w + t, and
    the call its series in w (`_series_in_base`): a negative binomial log-mass's loggamma(k + r) - loggamma(k + 1) -
    loggamma(r) leads with (k + r) log(k + r) - k log k - r log r, whose parts sum to the whole (k + r = k + r, where
    (k + 1) + r is not k + r) and are joined as k log((k + r)/k) + r log((k + r)/r); in the arguments themselves
    (k + 1) log(k + 1) is left alone, 700 times the value, and overflows past k = 2.5e305.  A branch per set of bases
    past `THRESHOLD` (`_arguments_past`), as there; where none or one is, `expr` as it is.  None where no argument
    has a constant, or where `several_argument_series` would be."""
    exact = exact_floats(expr)
    calls = [f for f in exact.atoms(sp.Function) if is_gamma_function(f)]
    if not any(f.args[-1].as_coeff_Add()[0] != 0 for f in calls):
        return None
    bases = _linear_arguments({f.args[-1].as_coeff_Add()[1] for f in calls})
    split = _terms_by_call(exact, calls)
    if bases is None or split is None:
        return None
    big = {w: sp.Dummy("w", positive=True) for w in bases}
    called: list[tuple[sp.Expr, sp.Expr, sp.Expr]] = []
    by_call, others = split
    for term, f in by_call:
        w = f.args[-1].as_coeff_Add()[1]
        called.append((term, f, _rewritten_in(term / f, w, big[w])))
    branches = [
        (
            _series_branch(called, others, {w: big[w] for w in past}, large, in_bases=True),
            large,
        )
        # One base past the threshold has no other to cancel its series' leading terms: those sets are `expr`'s,
        # and counted among the branches they would crowd out the pairs that do (a negative binomial's k and k + r
        # past it at r = 1e-164, where loggamma(k + r) - loggamma(k + 1) is inf - inf as written from k = 2.5e305).
        for past in _arguments_past(bases, fewest=2)
        for large in [sp.And(*(w > THRESHOLD if w in past else w <= THRESHOLD for w in bases))]
    ]
    return sp.Piecewise(*branches, (expr, True))


def _independent_groups(arguments: list[sp.Expr]) -> list[list[sp.Expr]]:
    """`arguments` in groups that share no variable, each argument with those it shares one with (through others):
    a KL divergence of two Betas' (p1, p0, p1 + p0) and (q1, q0, q1 + q0).  Each group in `arguments`' order."""
    groups: list[list[sp.Expr]] = []
    for u in arguments:
        touching = [g for g in groups if any(v.free_symbols & u.free_symbols for v in g)]
        for g in touching:
            groups.remove(g)
        groups.append([v for v in arguments if v is u or any(v in g for g in touching)])
    return groups


def _series_and_poles_branch(
    called: list[tuple[sp.Expr, sp.Expr, sp.Expr]],
    others: list[sp.Expr],
    big: dict[sp.Expr, sp.Dummy],
    past: set[sp.Expr],
    large: sp.Expr,
    others_written: list[sp.Expr],
) -> sp.Expr:
    """The sum of `called` terms (term, call, its coefficient in its argument) and `others` with each call at an
    argument in `past` its Stirling series and each other call its pole part and the call one further on (f(u) =
    pole + f(u + 1), exactly), all the like terms of the series and the poles joined, weights in other variables
    multiplying the differences (`_joined_terms`), fed their arguments where `large` holds: q1 (1/p1 - 1/(p1 + p0))
    beside q1 + q0 past the threshold, where q1/p1 and (q1 + q0)/(p1 + p0) alone overflow to opposite infinities in
    float32."""
    terms, shifted = [], []
    for term, f, written in called:
        u = f.args[-1]
        if u in past:
            terms.append(sp.expand(written * _series(f, big[u]), log=False))
        else:
            terms.append(sp.expand(written * _pole(f, big[u]), log=False))
            further = f.func(*f.args[:-1], u + 1)
            shifted += [c * further for c in sp.Add.make_args(sp.expand(term / f))]
    variables = list(big.values())
    raw = {b: u for u, b in big.items()}
    orders = (-1, *range(_SERIES_ORDERS))
    own = set().union(*(u.free_symbols for u in big))
    if not past:
        # Poles alone, as `several_argument_series` joins them below the threshold: the calls' sum whole, its
        # highest order apart where it overflows against the lower ones (`_highest_order_first`), the other terms as
        # written.
        poles, _ = _joined_terms(sp.collect(sp.Add(*terms), [sp.log(b) for b in variables]), big, orders)
        near = _highest_order_first([(order, _in_horner_form(term, variables)) for order, term in poles])
        near_terms = [*sp.Add.make_args(near.xreplace(raw)), *close_differences(shifted)]
        return _weighted_together(near_terms, own) + sp.Add(*others_written)
    series = sp.collect(sp.Add(*terms, *others), [sp.log(b) for b in big.values()])
    series = _in_horner_form(sp.Add(*(term for _, term in _joined_terms(series, big, orders)[0])), variables)
    exact_part, guarded = _guarded(series, big, large, others, others_written)
    paired = close_differences(shifted)
    with sp.evaluate(False):
        return sp.Add(*exact_part, _weighted_together([*guarded, *paired], own))


def _weighted_together(terms: list[sp.Expr], own: set[sp.Symbol]) -> sp.Expr:
    """The sum of `terms`, those whose factor free of the `own` variables is the same weight in others summed
    before it multiplies: q0 log(p1 + p0) - q0 digamma(p0 + 1), a KL divergence of two Betas' series beside a call
    one further on, is q0 (log(p1 + p0) - digamma(p0 + 1)), finite where the weight's product with either overflows
    (float32 q0 = 1.9e38 at p0 = 31).  A weight over a pole stays where it is, as one inside a quotient (a joined
    difference's) does: q_c/p_c is 9.5e179 at p_c = 5e-324, where 1/p_c is inf (a Gamma KL divergence's pole part)."""
    together: dict[sp.Expr, list[sp.Expr]] = {}
    alone = []
    for t in terms:
        weight, rest = t.as_independent(*own, as_Add=False) if t.is_Mul else (sp.S.One, t)
        number, weight = weight.as_coeff_Mul()
        if weight.free_symbols and rest != 1 and not _over_a_pole(rest, own):
            together.setdefault(weight, []).append(number * rest)
        else:
            alone.append(t)
    with sp.evaluate(False):
        return sp.Add(*alone, *(w * sp.Add(*inner) for w, inner in together.items()))


def _over_a_pole(expr: sp.Expr, own: set[sp.Symbol]) -> bool:
    """Whether `expr` divides by an expression in the `own` variables: a pole where they near 0."""
    if expr.has(divided):
        return True
    return any(p.exp.is_negative and p.base.free_symbols & own for p in expr.atoms(sp.Pow))


def grouped_argument_series(expr: sp.Expr) -> sp.Expr | None:
    """`several_argument_series` for calls whose arguments fall in groups that share no variable (a KL divergence
    of two Betas: p1, p0, p1 + p0 and q1, q0, q1 + q0), the terms of each group's calls a sum of their own, with a
    branch for each set of the group's arguments past `THRESHOLD` (`_arguments_past`, and none): six arguments are
    too many sets for one group's branches, and where some are past the threshold and others not, every call
    computed as written cancels (the divergence's -q1 digamma(p1) + (q1 + q0) digamma(p1 + p0) at q1 = 1e300 leads
    with q1 log((p1 + p0)/p1)).  In each branch the calls past the threshold are series, the others their pole
    parts and the calls one further on, the like terms of both joined (`_series_and_poles_branch`); one group's
    branches never compute another's.  Arguments that are one group make one such sum.  None where
    `several_argument_series` is None (a call not a factor of a term, an argument not linear)."""
    found = _calls_split(expr)
    if found is None:
        return None
    arguments, by_call, others, written = found
    groups = _independent_groups(arguments)
    big = {u: sp.Dummy("u", positive=True) for u in arguments}
    called = [(term, f, _rewritten_in(term / f, f.args[-1], big[f.args[-1]])) for term, f in by_call]
    # The terms beside the calls go with the group whose variables they share most (a Gamma KL's -p_c cancels the
    # series at p_c), where any.
    shared = [len(set().union(*(u.free_symbols for u in g)) & sp.Add(*others).free_symbols) for g in groups]
    home = shared.index(max(shared)) if others and max(shared) > 0 else None
    pieces = [] if home is not None else list(written)
    for k, group in enumerate(groups):
        members = [c for c in called if c[1].args[-1] in group]
        beside, beside_written = (others, written) if k == home else ([], [])
        within = {u: big[u] for u in group}
        branches = []
        for past in [*_arguments_past(group), set()]:
            large = sp.And(*(u > THRESHOLD if u in past else u <= THRESHOLD for u in group))
            branch = _series_and_poles_branch(members, beside, within, past, large, beside_written)
            branches.append((branch, large))
        as_written = sp.Add(*(term for term, _, _ in members), *beside_written)
        pieces.append(sp.Piecewise(*branches, (as_written, True)))
    return sp.Add(*pieces)
