"""The subexpressions generated code computes once and shares: `sympy.cse`, a divisor shared rather than its
reciprocal, a product computed in its own order, a selection fed to a power named first.

The planners share a body's subexpressions by it (`rulegen.plan.emit`), and the derive stage measures an
expression as they compute it (`rulegen.derive.stabilise.gate.as_computed`) and chooses what torch saves by what
they share (`rulegen.derive.saved`): one definition, below both.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import sympy as sp
from sympy.printing.precedence import PRECEDENCE

from rulegen.computation.quotients import power_of_a_quotient


class added(sp.Function):  # noqa: N801 - sympy functions are lower case
    """added(a, b): a + b computed before anything else is added to it: the pair of like terms of a sum that cancel
    (`cancelling_pair`), and each step of a sum pinned in its order (`summed_in_order`); sympy flattens a sum into
    its terms and orders them by their names, and cse names one of the pair apart from the other."""

    nargs = 2
    # Looser than a sum's terms: a sum that holds it adds it whole, `c + (a + b)`.
    precedence = PRECEDENCE["Add"] - 1

    def _eval_derivative(self, s: sp.Symbol) -> sp.Expr:
        return sp.Add(*(a.diff(s) for a in self.args))

    def _eval_is_real(self) -> bool | None:
        return self.args[0].is_real and self.args[1].is_real

    def _sympystr(self, printer: Any) -> str:
        return f"({printer._print(sp.Add(*self.args))})"


def cancelling_pair(terms: Sequence[sp.Expr]) -> tuple[int, int] | None:
    """The positions of the first pair c*f(u), -c*f(v) of one function (or one `where`), or c*u, -c*v of two
    inputs, among `terms` of a sum of three or more: at k = 5, logits = 1e-6, logits - digamma(k + 1) +
    digamma(11 - k) keeps logits whole only as (digamma(11 - k) - digamma(k + 1)) + logits, and -loc - scale + x
    is -inf at loc = x = 1.5e308, scale = 1e308 unless x - loc comes first."""
    if len(terms) < 3:
        return None
    split = [t.as_coeff_Mul() for t in terms]
    for i, (c, f) in enumerate(split):
        if not (isinstance(f, (sp.Function, sp.Piecewise, sp.Symbol)) and c.is_number):
            continue
        for j in range(i + 1, len(terms)):
            d, g = split[j]
            if type(g) is type(f) and g != f and d.is_number and c + d == 0:
                return i, j
    return None


def summation_order(total: sp.Add) -> list[sp.Expr]:
    """The terms of `total` in the order generated code adds them, left to right: sympy's order of the terms
    (`as_ordered_terms`), a `cancelling_pair` first.  Decided on the sum as the derive stage measures it
    (`summed_in_order`), never on what the planner shares of it: named subexpressions sort by their names, and
    the same sum's terms came out in another order."""
    return cancelling_pair_first(total.as_ordered_terms())


def summed_in_order(expr: sp.Expr) -> sp.Expr:
    """`expr` with each sum of three or more terms `added` left to right in `summation_order`, so that sharing
    subexpressions and the backends' forms cannot add them in another order.

    The one definition of the order a sum is computed in, for the stabilising search's gate (`as_computed`) and
    the planners (`rulegen.plan.emit`) alike: a negative binomial's log-mass at k = r = 1e300 adds
    k*log1p(r/k) and r*log1p(k/r), each 6.9e299, to -(k + r)*log(2) before -log(k)/2 as measured (-346.65),
    where the planner's named terms sorted -log(k)/2 between them and it was absorbed (-1.27)."""

    def chain(total: sp.Expr) -> sp.Expr:
        # The printers write a leading `-a + b` as `b - a` (one kernel in eager torch, the same number).
        first, second, *rest = summation_order(total)
        first = added(first, second)
        for term in rest:
            first = added(first, term)
        return first

    if not isinstance(expr, sp.Basic):
        return expr
    return expr.replace(lambda e: e.is_Add and len(e.args) >= 3, chain)


def cancelling_pair_first(terms: Sequence[sp.Expr]) -> list[sp.Expr]:
    """`terms` of a sum, its `cancelling_pair` moved to the front, adjacent; else as they are."""
    terms = list(terms)
    pair = cancelling_pair(terms)
    if pair is None or pair == (0, 1):
        return terms
    i, j = pair
    return [terms[i], terms[j], *(t for k, t in enumerate(terms) if k not in pair)]


def pairs_added_first(expr: sp.Expr) -> sp.Expr:
    """`expr` with the `cancelling_pair` of each sum `added` as one term, so that sharing subexpressions leaves it
    a pair: cse names one digamma of a negative binomial's d/dr, -softplus(logits) - digamma(r) + digamma(k + r),
    and the sum read (-softplus(logits) + t) - digamma(r), 0 at k = 7.5e-110, r = 2.6e-25 (exact -0.0626)."""

    def pair_added(total: sp.Expr) -> sp.Expr:
        # Whether a sum holds a pair does not depend on the order of its terms: most hold none, and sorting
        # them (`as_ordered_terms`) is the costly step.
        if cancelling_pair(total.args) is None:
            return total
        terms = total.as_ordered_terms()
        pair = cancelling_pair(terms)
        if pair is None:
            return total
        i, j = pair
        return sp.Add(added(terms[i], terms[j]), *(t for k, t in enumerate(terms) if k not in pair))

    if not isinstance(expr, sp.Basic):
        return expr
    return expr.replace(lambda e: e.is_Add and len(e.args) >= 3, pair_added)


def _fed_selections(exprs: Sequence[sp.Expr]) -> list[sp.Piecewise]:
    """Each `Piecewise` that selects between a variable and a number and is raised to a power: an input fed a
    stand-in where a branch is not taken (the double-`where` of rulegen.derive.stabilise.regimes)."""
    found = {
        node.base
        for e in exprs
        for node in sp.preorder_traversal(e)
        if node.is_Pow
        and isinstance(node.base, sp.Piecewise)
        and all(v.is_Atom for v, _ in node.base.args)
        and any(v.is_Symbol for v, _ in node.base.args)
    }
    return sorted(found, key=sp.default_sort_key)


def _cse_with_selections_named(
    exprs: list[sp.Expr], symbols: Iterator[sp.Symbol]
) -> tuple[list[tuple[sp.Symbol, sp.Expr]], list[sp.Expr]]:
    """`sp.cse` of `exprs`, each selection of a variable raised to a power (`_fed_selections`) named first.

    sp.cse rebuilds every expression it takes apart, and sympy folds a power of a `Piecewise` into its pieces:
    1/where(|x| < t, c, x)**2 becomes where(|x| < t, 1/c**2, 1/x**2), the stand-in gone from the power, whose
    derivative at x = 0 is then inf times the `where`'s 0.  Named, the selection is one value the rest reads.
    """
    selections = _fed_selections(exprs)
    if not selections:
        return sp.cse(exprs, symbols=symbols, order="none")
    held = {s: sp.Dummy(f"selection{k}") for k, s in enumerate(selections)}
    with sp.evaluate(False):
        masked = [e.xreplace(held) for e in exprs]
    replacements, reduced = sp.cse([*masked, *selections], symbols=sp.numbered_symbols(cls=sp.Dummy), order="none")
    defined = [(held[s], r) for s, r in zip(selections, reduced[len(exprs) :], strict=True)]
    pending = [*replacements, *defined]
    waiting = {sym for sym, _ in pending}
    ordered: list[tuple[sp.Symbol, sp.Expr]] = []
    while pending:  # each after what it reads, in cse's order otherwise
        k = next(k for k, (_, v) in enumerate(pending) if not v.free_symbols & waiting)
        sym, value = pending.pop(k)
        waiting.discard(sym)
        ordered.append((sym, value))
    names = {sym: next(symbols) for sym, _ in ordered}
    return [(names[sym], v.xreplace(names)) for sym, v in ordered], [e.xreplace(names) for e in reduced[: len(exprs)]]


def shared_subexpressions(
    exprs: Sequence[sp.Expr], symbols: Iterator[sp.Symbol]
) -> tuple[list[tuple[sp.Symbol, sp.Expr]], list[sp.Expr]]:
    """`sp.cse` of `exprs`, sharing a divisor rather than its reciprocal.

    sp.cse shares `1/hypot(x, y)` of `x/hypot(x, y)` and `y/hypot(x, y)` as
    `t0 = 1/hypot(x, y)`, then `t0*y`: where the divisor is large (1.3e38 in
    float32) the reciprocal is subnormal and the product keeps a few bits of
    what `y/hypot` gets right (or 0 where it underflows).  A shared
    reciprocal becomes the shared divisor, each use a division, and a shared
    negation the value negated, each use subtracting it.
    """
    replacements, reduced = _cse_with_selections_named([pairs_added_first(e) for e in exprs], symbols)
    divisors: dict[sp.Symbol, sp.Expr] = {}
    shared = []
    for symbol, value in replacements:
        value = value.xreplace(divisors)
        # The number a value is times, irrational ones too (sqrt(2)/s is sqrt(2) times 1/s).
        coefficient, power = (
            value.as_independent(*value.free_symbols, as_Add=False)
            if isinstance(value, sp.Expr) and value.free_symbols
            else (sp.S.One, value)
        )
        if power.is_Pow and power.exp.is_Integer and power.exp < 0 and not power.base.is_number:
            # A number over a power, c/h**k, shared as h, each use divided by it: 0.5/s**2 as a factor of
            # 0.5 x**2/s**2 is inf where s**2 is subnormal and the quotient 3e273 (s = 1.2e-156); sqrt(2)/s as a
            # factor of sqrt(2)/(sqrt(pi) s erfcx(u)) is inf / inf = nan at s = 5e-324 (the value 0: a normal's
            # log-cdf's partial in x far in its upper tail).
            if power.base.is_Symbol:  # already named: divide by that name
                divisors[symbol] = value
                continue
            divisors[symbol] = coefficient * symbol**power.exp
            value = power.base
        elif isinstance(value, sp.Mul) and value.as_coeff_Mul()[0] == -1 and not (-value).is_Atom:
            # A negated value, -exp(r), shared as exp(r), each use negating it: sp.cse names -exp(r) of
            # exp(r) - r*y and exp(r) - y, which read it back as -r*y - t0 and -t0 - y, a negation more
            # for each (an eager kernel; under jit a Poisson NLL's tangent had three more operations than
            # autodiff's), where t0 - r*y and t0 - y subtract it.
            divisors[symbol] = -symbol
            value = -value
        shared.append((symbol, value))
    return _calls_named(*_products_kept_whole(shared, [e.xreplace(divisors) for e in reduced]), symbols)


def _products_kept_whole(
    replacements: list[tuple[sp.Symbol, sp.Expr]], reduced: list[sp.Expr]
) -> tuple[list[tuple[sp.Symbol, sp.Expr]], list[sp.Expr]]:
    """cse's shared products put back as factors into the products they were taken out of, and shared powers into
    the quotients that take them whole (`power_of_a_quotient`).

    sp.cse shares `y*z` of `x*y*z` and `y*z` as `t0 = y*z`, then `t0*x`:
    another order of the same product, which overflows at
    (x, y, z) = (-2.4e-184, 1.4e206, -3.7e121) where x*y*z is 1.2e144.
    Each product is computed in its own printed order, the one the
    stabilising search measures; a shared product stays shared where it is
    a whole expression (a partial, a term of a sum).
    """
    products: dict[sp.Expr, sp.Expr] = {}
    powers: dict[sp.Expr, sp.Expr] = {}

    def inline(expr: sp.Expr) -> sp.Expr:
        if not isinstance(expr, sp.Basic) or expr.is_Atom:
            return expr
        args = [inline(a) for a in expr.args]
        if isinstance(expr, sp.Mul) and any(a in powers for a in args):
            # A shared power over a divisor of the same degree, put back: computed as a power of the quotient
            # (`power_of_a_quotient`), where the named square of (p_loc - q_loc) overflows from 1.3e154.
            whole = sp.Mul(*(powers.get(a, a) for a in args))
            if power_of_a_quotient(whole) is not None:
                args = list(sp.Mul.make_args(whole))
        # Only a product of three or more non-numbers is reassociated; a number or a sign scales it exactly.
        if isinstance(expr, sp.Mul) and any(a in products for a in args) and sum(not a.is_number for a in args) > 1:
            return sp.Mul(*(products.get(a, a) for a in args))
        return expr.func(*args) if args != list(expr.args) else expr

    kept = []
    for symbol, value in replacements:
        value = inline(value)
        if isinstance(value, sp.Mul) and sum(not a.is_number for a in value.args) > 1:
            products[symbol] = value
        if isinstance(value, sp.Pow) and value.exp.is_Integer and value.exp >= 2:
            powers[symbol] = value
        kept.append((symbol, value))
    reduced = [inline(e) for e in reduced]
    used: set[sp.Basic] = set().union(*(e.free_symbols for e in reduced)) if reduced else set()
    for symbol, value in reversed(kept):
        if symbol in used:
            used |= value.free_symbols
    return [(symbol, value) for symbol, value in kept if symbol in used], reduced


def _calls_named(
    replacements: list[tuple[sp.Symbol, sp.Expr]], reduced: list[sp.Expr], symbols: Iterator[sp.Symbol]
) -> tuple[list[tuple[sp.Symbol, sp.Expr]], list[sp.Expr]]:
    """Each function call computed more than once after the shared products are put back (`_products_kept_whole`),
    named once, the largest first: cse shares `t0 = exp(-x**2)*sin(x)` of `exp(-x**2)*sin(x)*y` and
    `-2*(x*y*exp(-x**2)*sin(x))`, and put back as factors each product would compute `sin(x)` again.  A name
    reads the same value, so no product's order or rounding changes."""
    while True:
        counts: dict[sp.Expr, int] = {}
        for expr in [*(v for _, v in replacements), *reduced]:
            for node in sp.preorder_traversal(expr):
                if isinstance(node, sp.Function) and not isinstance(node, added) and node.free_symbols:
                    counts[node] = counts.get(node, 0) + 1
        repeated = [c for c, n in counts.items() if n > 1]
        if not repeated:
            return replacements, reduced
        call = max(repeated, key=lambda c: (sp.count_ops(c), sp.default_sort_key(c)))
        symbol = next(symbols)
        defined = [k for k, (s, _) in enumerate(replacements) if s in call.free_symbols]
        at = max(defined, default=-1) + 1
        replacements = [
            *replacements[:at],
            (symbol, call),
            *((s, v.xreplace({call: symbol})) for s, v in replacements[at:]),
        ]
        reduced = [e.xreplace({call: symbol}) if isinstance(e, sp.Basic) else e for e in reduced]
