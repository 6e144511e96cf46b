"""Stage 2: parse symbolic bodies and derive every derivative a rule lacks.

A symbolic rule is elementwise, so each of its derivatives is a linear map
given by one partial per (output, input) pair: the JVP is
`sum_j partial_ij * x_j_dot`, the VJP is `sum_i partial_ij * y_i_bar`.  A
rule may state the partials (`derivatives`), a JVP (linear in the tangents)
or a VJP (linear in the cotangents); either way they are read back into
partials, checked, and transposed for the other mode.  Residuals are values
the forward pass saves; their own partials are derived too, because a
backward that reads a residual is differentiated through it at second order.
"""

from __future__ import annotations

import dataclasses
import math
import signal
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from types import MappingProxyType

import sympy as sp

from rulegen.derive import functions as fn
from rulegen.derive.derivation import Derivation, Partials
from rulegen.derive.expr import parse_expression
from rulegen.derive.forms import canonical, with_slopes
from rulegen.derive.functions import VANISHING, Piecewise, beta_ratios
from rulegen.derive.routes import Gives, choose_routes
from rulegen.derive.saved import completed
from rulegen.derive.snippet import SnippetDerivation, derive_snippet_rule
from rulegen.derive.stabilise import BUDGET, Choice, Sampling, searchable, stabilise
from rulegen.derive.stabilise.cost import NOTHING_FREE, Free, reused, roots
from rulegen.derive.symbols import scope, symbols_of
from rulegen.spec.errors import Loc, SpecError, SpecErrors
from rulegen.spec.names import COTANGENT, TANGENT
from rulegen.spec.rules import Domain, Input, Rule, SnippetBody, SympyBody, Text

#: Seconds of CPU time sympy may spend deriving and planning one rule before the rule is refused: a guard against a
#: sympy step that hangs, never what decides an output (the stabilising search is bounded by work).  CPU time, the
#: process's own (`ITIMER_PROF`), not the wall clock: on a machine shared tenfold a rule's wall time is ten times its
#: CPU time, and the load would decide which rules build.  CPU time still stretches with load (a busy core's
#: sibling thread, the kernel's time): the costliest rule of the benchmark suites, a KL divergence of two Betas
#: (four inputs, ten gamma-family calls, a series per group of arguments), takes 367 s of CPU searched cold alone
#: on a 2-core machine and passed 600 s beside a two-worker test run, where 600 was this limit and refused it.
#: Those of rules/, tests/right_rules and the shared examples take under 10 s.
DERIVE_SECONDS = 1200.0


class _Timeout(BaseException):
    """Raised by the alarm; a BaseException so that sympy's `except Exception` cannot swallow it."""


_limit_active = False

# Once the time is up the alarm fires again at this interval until the
# timeout escapes: a raise that lands in a callback whose exceptions are
# ignored (a garbage-collector callback of JAX's, say) is lost.
_REFIRE_SECONDS = 0.05


def _timeout_error(loc: Loc, seconds: float) -> SpecErrors:
    return SpecErrors([SpecError(loc, f"sympy needs more than {seconds:g} s for this rule")])


@contextmanager
def _refusing(loc: Loc, seconds: float) -> Iterator[None]:
    """Turn sympy running out of time or stack into a located refusal."""
    try:
        yield
    except _Timeout:
        raise _timeout_error(loc, seconds) from None
    except (RecursionError, MemoryError):
        raise SpecErrors([SpecError(loc, "this rule is too large or too deep for sympy")]) from None


@contextmanager
def sympy_time_limit(seconds: float, loc: Loc) -> Iterator[None]:
    """Refuse a rule (SpecErrors at `loc`) when sympy spends more than `seconds` on it.

    Only the main thread can take signals, so elsewhere this guards nothing;
    an inner limit inside an outer one defers to the outer.
    """
    global _limit_active
    if _limit_active or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        with _refusing(loc, seconds):
            yield
        return

    state = {"armed": True, "expired": False}

    def on_alarm(signum: int, frame: object) -> None:
        if state["armed"]:
            state["expired"] = True
            raise _Timeout

    previous = signal.signal(signal.SIGPROF, on_alarm)
    signal.setitimer(signal.ITIMER_PROF, seconds, _REFIRE_SECONDS)
    _limit_active = True
    try:
        try:
            with _refusing(loc, seconds):
                yield
        finally:
            state["armed"] = False
            signal.setitimer(signal.ITIMER_PROF, 0)
    except SpecErrors:
        raise
    except Exception as exc:
        # The alarm can land inside C code (`ast.parse`, a sympy extension)
        # that reports it as some other error (SystemError); once the time
        # is up, any failure is the timeout.
        if state["expired"]:
            raise _timeout_error(loc, seconds) from exc
        raise
    finally:
        _limit_active = False
        signal.signal(signal.SIGPROF, previous)


class _Deriver:
    """Derives one rule; collects errors instead of stopping at the first."""

    def __init__(self, rule: Rule, known_rules: frozenset[str]) -> None:
        self.rule = rule
        self.known_rules = known_rules
        self.symbols = symbols_of(rule)
        self.errors: list[SpecError] = []
        self.outputs = [o.name for o in rule.outputs]
        self.diff_outputs = [o.name for o in rule.outputs if o.differentiable]
        self.diff_inputs = [i.name for i in rule.inputs if i.differentiable]

    def scope(self, role: str) -> dict[str, sp.Symbol]:
        """The symbols a body of `role` may name (rulegen.derive.symbols.scope)."""
        return {n: self.symbols[n] for n in scope(self.rule, role)}

    def parse(self, text: Text, scope: Mapping[str, sp.Symbol], *, indicator: bool = False) -> sp.Expr | None:
        try:
            return parse_expression(text.value, scope, text.loc, indicator=indicator)
        except SpecError as exc:
            self.errors.append(exc)
            return None

    def fail(self, loc: Loc, message: str) -> None:
        self.errors.append(SpecError(loc, message))

    def per_name(self, body: SympyBody, names: list[str], what: str) -> dict[str, Text]:
        """The texts of a body that has one expression per name in `names`."""
        exprs = body.exprs
        if None in exprs:
            if len(names) != 1:
                self.fail(body.loc, f"this {what} needs one expression per name: {', '.join(names)}")
                return {}
            return {names[0]: exprs[None]}
        found: dict[str, Text] = {}
        for name, text in exprs.items():
            if name not in names:
                self.fail(text.loc, f"{name!r} is not one of {', '.join(names) or 'nothing'} ({what})")
            else:
                found[name] = text
        return found

    def derive(self) -> Derivation:
        rule = self.rule
        # derive_rule sends a rule here only when every body is symbolic.
        assert isinstance(rule.forward, SympyBody)
        forward_texts = self.per_name(rule.forward, self.outputs, "forward")
        forward = {}
        written = {}
        booleans = {o.name for o in rule.outputs if o.dtype == "bool"}
        for name, text in forward_texts.items():
            expr = self.parse(text, self.scope("forward"), indicator=name in booleans)
            if expr is not None:
                forward[name], written[name] = canonical(expr, complex_rule=rule.complex), expr
        for name in self.outputs:
            if name not in forward_texts and not self.errors:
                self.fail(rule.forward.loc, f"the forward body computes no value for output {name!r}")

        if rule.domain is not None:
            # Read only where the points are sampled, but refused here, at build time, where it does not parse.
            self.parse(rule.domain, {i.name: self.symbols[i.name] for i in rule.inputs}, indicator=True)
        residuals = self.derive_residuals()
        if self.errors:
            raise SpecErrors(self.errors)

        jvp_partials, vjp_partials = self.derive_partials(forward)
        residual_partials = self.residual_partials(forward, residuals, jvp_partials)
        if self.errors:
            raise SpecErrors(self.errors)
        routes = choose_routes(
            Gives(rule.name, symbolic=True, jvp=rule.jvp is not None, vjp=rule.vjp is not None, mode=rule.mode)
        )
        return Derivation(
            rule=rule,
            symbols=MappingProxyType(self.symbols),
            forward=tuple((n, forward[n]) for n in self.outputs),
            residuals=tuple(residuals.items()),
            jvp_partials=MappingProxyType(jvp_partials),
            vjp_partials=MappingProxyType(vjp_partials),
            residual_partials=MappingProxyType(residual_partials),
            routes=routes,
            rewritten=tuple((n, written[n], forward[n]) for n in self.outputs if written[n] != forward[n]),
        )

    def derive_residuals(self) -> dict[str, sp.Expr]:
        found: dict[str, sp.Expr] = {}
        for name, body in self.rule.residual_bodies.items():
            assert isinstance(body, SympyBody)  # rules with snippets are derived by derive_snippet_rule
            texts = self.per_name(body, [name], f"residual {name!r}")
            if name in texts:
                expr = self.parse(texts[name], self.scope(f"residual {name}"))
                if expr is not None:
                    found[name] = canonical(expr, complex_rule=self.rule.complex)
        return found

    def derive_partials(self, forward: Mapping[str, sp.Expr]) -> tuple[dict, dict]:
        rule = self.rule
        given = self.given_partials()
        jvp = vjp = dict(given)
        if rule.jvp is None or rule.vjp is None:
            for o in self.diff_outputs:
                for i in self.diff_inputs:
                    if (o, i) not in given:
                        jvp[(o, i)] = self.diff(forward[o], i, rule.forward.loc)
        if isinstance(rule.jvp, SympyBody):
            jvp = self.partials_of_linear(rule.jvp, self.diff_outputs, self.diff_inputs, TANGENT, "jvp")
            if rule.vjp is None:
                vjp = jvp
        if isinstance(rule.vjp, SympyBody):
            transposed = self.partials_of_linear(rule.vjp, self.diff_inputs, self.diff_outputs, COTANGENT, "vjp")
            vjp = {(o, i): e for (i, o), e in transposed.items()}
            if rule.jvp is None:
                jvp = vjp
        return _nonzero(jvp), _nonzero(vjp)

    def given_partials(self) -> dict[tuple[str, str], sp.Expr]:
        found: dict[tuple[str, str], sp.Expr] = {}
        scope = self.scope("derivatives")
        for out, row in self.rule.partials.items():
            if out not in self.diff_outputs:
                loc = next(iter(row.values())).loc if row else self.rule.loc
                self.fail(loc, f"{out!r} is not a differentiable output")
                continue
            for name, text in row.items():
                if name not in self.diff_inputs:
                    self.fail(text.loc, f"{name!r} is not a differentiable input")
                    continue
                expr = self.parse(text, scope)
                if expr is not None:
                    found[(out, name)] = expr
        return found

    def partials_of_linear(
        self, body: SympyBody, results: list[str], variables: list[str], suffix: str, what: str
    ) -> dict[tuple[str, str], sp.Expr]:
        """Read `result = sum_v coefficient * v<suffix>` back into coefficients."""
        scope = self.scope(what)
        found: dict[tuple[str, str], sp.Expr] = {}
        linear_symbols = [self.symbols[f"{v}{suffix}"] for v in variables]
        zero = dict.fromkeys(linear_symbols, 0)
        for result, text in self.per_name(body, results, what).items():
            expr = self.parse(text, scope)
            if expr is None:
                continue
            with self.guard(text.loc):
                coefficients = [sp.diff(expr, s) for s in linear_symbols]
                offset = expr.subs(zero)
                nonlinear = any(c.has(*linear_symbols) for c in coefficients)
            kind = "tangents" if suffix == TANGENT else "cotangents"
            if nonlinear or not _is_zero(offset):
                self.fail(text.loc, f"the {what} must be linear in its {kind} ({', '.join(map(str, linear_symbols))})")
                continue
            for v, c in zip(variables, coefficients, strict=True):
                found[(result, v)] = c
        return found

    def residual_partials(
        self, forward: Mapping[str, sp.Expr], residuals: Mapping[str, sp.Expr], partials: Partials
    ) -> dict[tuple[str, str], sp.Expr]:
        """d residual / d input, through the outputs a residual reads."""
        found: dict[tuple[str, str], sp.Expr] = {}
        for name, expr in residuals.items():
            for i in self.diff_inputs:
                total = self.diff(expr, i, self.rule.loc)
                for out in self.outputs:
                    if expr.has(self.symbols[out]):
                        inner = partials.get((out, i), 0)
                        total += self.diff(expr, out, self.rule.loc) * inner
                found[(name, i)] = total
        return _nonzero(found)

    def diff(self, expr: sp.Expr, name: str, loc: Loc) -> sp.Expr:
        with self.guard(loc):
            result = differentiate(expr, self.symbols[name])
        if result.has(sp.Derivative, sp.Subs):
            self.fail(loc, f"sympy cannot differentiate {expr} with respect to {name}; give `derivatives`")
            return sp.S.Zero
        return result

    def guard(self, loc: Loc) -> AbstractContextManager[None]:
        """Name the expression at `loc` when sympy gives up on it."""
        return _refusing(loc, DERIVE_SECONDS)


def differentiate(expr: sp.Expr, symbol: sp.Symbol) -> sp.Expr:
    """d expr / d symbol as the frameworks' autodiff has it: steps and kinks differentiate to 0 almost everywhere."""
    # floor and ceiling are steps: sympy leaves their derivative
    # unevaluated; the frameworks' own autodiff gives 0, as here.
    result = sp.diff(expr, symbol).replace(_is_step_derivative, lambda _: sp.S.Zero)
    if expr.free_symbols and all(s.is_extended_real for s in expr.free_symbols):
        # A real rule computes in real arithmetic, nan wherever a value would be complex.  sympy differentiates
        # Abs(u) of a u it cannot show real (gamma(x), real but at its poles) through re(u) and im(u), which no
        # printer prints: abs(gamma(x)) and log(abs(gamma(x))) were internal errors.  Their real parts are them.
        result = result.replace(lambda e: isinstance(e, sp.re), lambda e: e.args[0])
        result = result.replace(lambda e: isinstance(e, sp.im), lambda _: sp.S.Zero)
    # DiracDelta of a kink (sign, Abs's second derivative) is 0 to the frameworks' autodiff too.
    result = result.replace(lambda e: isinstance(e, VANISHING), lambda _: sp.S.Zero)
    result = result.replace(lambda e: isinstance(e, sp.Subs) and not e.expr.has(sp.Derivative), sp.Subs.doit)
    result = result.replace(_is_step_of_difference, _tied)
    # d/da log(beta(a, b)) is beta's partial over beta: digamma(a) - digamma(a + b), as sympy's product cancels.
    result = beta_ratios(result)
    if any(not p.exp.is_number for p in result.atoms(sp.Pow)):
        # d/dx x**n is n*x**n/x to sympy, nan at x = 0; n*x**(n - 1) is not.
        result = sp.powsimp(result, combine="exp")
    return result


def _is_step_of_difference(expr: sp.Basic) -> bool:
    return isinstance(expr, sp.Heaviside) and expr.args[0].is_Add and len(expr.args[0].args) == 2


def _tied(step: sp.Heaviside) -> sp.Expr:
    """Heaviside(a - b), Max's derivative, as 1/2 wherever a == b: a tie of infinities too, where a - b is nan.

    1/2 at a tie is sympy's Heaviside(0) and both frameworks' derivative of maximum and minimum.
    """
    a, minus_b = step.args[0].args
    return Piecewise((sp.S.Half, sp.Eq(a, -minus_b)), (step, True))


def _is_step_derivative(expr: sp.Basic) -> bool:
    # A tuple: `sp.floor | sp.ceiling` is a sympy Or, not a union of types.
    return isinstance(expr, sp.Derivative) and isinstance(expr.expr, (sp.floor, sp.ceiling))


def _is_zero(expr: sp.Expr) -> bool:
    return expr == 0 or sp.simplify(expr) == 0


def _nonzero(partials: Mapping[tuple[str, str], sp.Expr]) -> dict[tuple[str, str], sp.Expr]:
    return {k: v for k, v in partials.items() if v != 0}


def has_snippets(rule: Rule) -> bool:
    bodies = [rule.forward, rule.jvp, rule.vjp]
    bodies += list(rule.residual_bodies.values())
    return any(isinstance(b, SnippetBody) for b in bodies)


def derive_rule(rule: Rule, known_rules: Iterable[str] = ()) -> Derivation | SnippetDerivation:
    """Every derivative of `rule` in closed form, or SpecErrors saying why not.

    A rule with a snippet body gets a SnippetDerivation instead: what each
    backend runs, and from which bodies its two modes come.  `known_rules`
    names the other rules of the build, which snippet bodies may call.
    """
    with sympy_time_limit(DERIVE_SECONDS, rule.loc):
        if has_snippets(rule):
            return derive_snippet_rule(rule, known_rules)
        derivation = _Deriver(rule, frozenset(known_rules) | {rule.name}).derive()
        return completed(simplest_where_unmeasured(stabilised(derivation) if rule.stabilise else derivation))


def _sampling(d: Derivation) -> Sampling | None:
    """Where the rule's expressions are measured: its float array inputs and static float numbers over the float
    line their assumptions allow; None where it has none to sample.

    Not the rule's `domain`: that is where the checks sample and never
    changes the generated code (SPEC), which must be right outside it too.
    """
    rule = d.rule
    if rule.complex:
        return None
    arrays = [i for i in rule.inputs if i.dtype == "float" and (not i.static or _static_number(i))]
    if not any(not i.static for i in arrays):
        return None
    try:
        return Sampling(tuple((d.symbols[i.name], _sampled(i)) for i in arrays))
    except ValueError:
        return None


def defined_where(sampling: Sampling, forward: sp.Expr | None) -> Sampling | None:
    """`sampling` where `forward` is defined: each argument of a function of the registry's own (a class of
    rulegen.derive.functions) in it that has a `domain`, where the argument is an input, inside that domain (None
    where there is none to add).

    A partial is measured where its output has a value: logit's 1/p - 1/(p - 1) cancels at p > 1, where logit
    is nan, and within [0, 1] is the form whose own derivative is right (`functions._in_partial_fractions`).
    """
    if forward is None:
        return None
    variables = set(sampling.variables)
    conditions: list[sp.Basic] = []
    for call in sp.preorder_traversal(forward):
        function = fn.BY_NAME.get(type(call).__name__) if isinstance(call, sp.Function) else None
        # The registry's own functions, whose partials it states (sympy's, log's 1/x, it does not).
        if function is None or not function.domain or type(call).__module__ != fn.__name__:
            continue
        for k in range(function.orders, len(call.args)):
            lo, hi = function.argument_domain(k)
            argument = call.args[k]
            # An input itself: the condition is numpy code of the inputs (`Sampling.condition`).
            if argument not in variables:
                continue
            conditions += [argument >= sp.Rational(lo)] if math.isfinite(lo) else []
            conditions += [argument <= sp.Rational(hi)] if math.isfinite(hi) else []
    if not conditions:
        return None
    condition = sp.And(*conditions) if sampling.condition is None else sp.And(sampling.condition, *conditions)
    return Sampling(sampling.domains, condition)


def _static_number(spec: Input) -> bool:
    """Whether `spec` is a static float number the search can hold as a variable (a focal loss's gamma)."""
    return isinstance(spec.default, float) and (spec.has_default or spec.domain_given)


def _sampled(spec: Input) -> Domain:
    """Where the search samples `spec`: an array over the float line its `assume` allows; a static number over
    the `domain` the rule gives it, else at its default (the whole line would choose regimes on a focal loss's
    gamma at 1e300, which no user passes, and cost minutes)."""
    from rulegen.derive.measure import assumed_domain

    if not spec.static:
        return assumed_domain(spec)
    if spec.domain_given:
        return spec.bounds
    return Domain(ge=spec.default, le=spec.default)


def simplest_where_unmeasured(d: Derivation) -> Derivation:
    """`d` with each partial the stabilising search did not measure factored where that has fewer operations.

    A measured partial keeps the form the search chose (a sum of quotients
    factored over one denominator can overflow where the sum does not); one
    it screened as accurate, could not sample (a complex rule) or was told
    not to search (`stabilise: false`) is printed in its simplest form:
    (2a - i)/(z + 2)**2, not a/(z + 2) - (a z + i)/(z + 2)**2.
    """
    measured = {c.quantity for c in d.choices if not math.isnan(c.bits_before[0])}

    def partials(of: Partials) -> Partials:
        return MappingProxyType({(o, i): e if f"d{o}/d{i}" in measured else _simplest(e) for (o, i), e in of.items()})

    jvp_partials = partials(d.jvp_partials)
    vjp_partials = jvp_partials if d.vjp_partials == d.jvp_partials else partials(d.vjp_partials)
    return dataclasses.replace(
        d, jvp_partials=jvp_partials, vjp_partials=vjp_partials, residual_partials=partials(d.residual_partials)
    )


def _simplest(expr: sp.Expr) -> sp.Expr:
    try:
        factored = sp.factor(expr)
    except Exception:  # sympy cannot factor every expression; the derived one stands
        return expr
    return factored if sp.count_ops(factored) < sp.count_ops(expr) else expr


def stabilised(d: Derivation) -> Derivation:
    """`d` with every expression the backends compute in the form the stabilising search measured best.

    The forward first, with the form the rule wrote among its candidates
    (the canonical forms are candidates, chosen by measured error like any
    other); then each partial, with the derivative of each good form of the
    forward among its candidates (a derivative of a form that does not
    cancel rarely cancels itself); then each residual and its partials.  An
    expression in other symbols (outputs, statics, integer arrays) stays.
    At most `BUDGET.searches_per_rule` distinct expressions are searched, in the
    order above; later ones stay as derived (a count, not a clock, so that
    the machine's load cannot change the output).
    """
    sampling = _sampling(d)
    if sampling is None:
        return d
    choices: dict[str, Choice] = {}
    searched: set[sp.Expr] = set()
    policy = d.rule.policy

    def chosen(
        label: str,
        expr: sp.Expr,
        alternatives: tuple[tuple[str, sp.Expr], ...] = (),
        written: sp.Expr | None = None,
        where: Sampling | None = None,
        free: Free = NOTHING_FREE,
    ) -> Choice | None:
        where = where or sampling
        if not searchable(expr, where):
            return None
        if expr not in searched:
            if len(searched) >= BUDGET.searches_per_rule:
                return None
            searched.add(expr)
        choice = stabilise(
            expr,
            where,
            quantity=label,
            alternatives=alternatives,
            policy=policy,
            written=written,
            free=free,
        )
        choices.setdefault(label, choice)
        return choice

    written = {name: w for name, w, _ in d.rewritten} | {
        name: e for name, e in d.forward if name not in {n for n, _, _ in d.rewritten}
    }
    booleans = {o.name for o in d.rule.outputs if not o.differentiable}
    forms: dict[str, tuple[sp.Expr, ...]] = {}
    forward = []
    for n, e in d.forward:
        alternatives = (("as written", written[n]),) if written[n] != e else ()
        choice = None if n in booleans else chosen(n, e, alternatives, written[n])
        forward.append((n, e if choice is None else choice.chosen))
        # The forms whose derivatives the partials try: the good forms measured (the branches of a form with
        # regimes among them: its partial's search joins their derivatives by regimes of its own), the written one.
        found = () if choice is None else choice.good_forms
        forms[n] = tuple(dict.fromkeys((*found, e, written[n])))
    derived = dict(d.forward)
    # What a partial reads of the forward for nothing: the function calls of the forward the backends compute, and
    # of the forward as written, which autodiff of it reads.
    free = {n: reused([e]) for n, e in forward}
    written_free = {n: reused([e]) for n, e in written.items()}
    written_roots = {n: roots([e]) for n, e in written.items()}
    # Where each output is defined, once: every partial of it, in either mode, is searched there.
    defined = {o: defined_where(sampling, e) for o, e in derived.items()}

    # A partial is differentiated again at the next order: in the forms whose derivatives do not cancel.
    slopes = (lambda e: e) if d.rule.complex else with_slopes

    def partials(of: Partials) -> Partials:
        table = {}
        for (o, i), e in of.items():
            symbol = d.symbols[i]
            alternatives: tuple[tuple[str, sp.Expr], ...] = ()
            reference = None
            if o in derived and e == differentiate(derived[o], symbol):
                # Only a derived partial: one the rule gives is its own reference, whatever the forward says.
                alternatives = tuple(
                    ("derivative of a forward form", differentiate(f, symbol)) for f in forms[o] if f != derived[o]
                )
                # What autodiff of the forward as written computes: the reference of `fast` and `balanced`.
                reference = differentiate(written[o], symbol) if written[o] != derived[o] else None
            choice = chosen(
                f"d{o}/d{i}",
                e,
                alternatives,
                reference,
                defined.get(o),
                Free(free.get(o, frozenset()), written_free.get(o, frozenset()), written_roots.get(o, frozenset())),
            )
            table[(o, i)] = slopes(e if choice is None else choice.chosen)
        return MappingProxyType(table)

    jvp_partials = partials(d.jvp_partials)
    vjp_partials = jvp_partials if d.vjp_partials == d.jvp_partials else partials(d.vjp_partials)
    residual_partials = partials(d.residual_partials)
    residuals = []
    for n, e in d.residuals:
        choice = chosen(f"residual {n}", e)
        residuals.append((n, e if choice is None else choice.chosen))
    computed = dict(forward)
    return dataclasses.replace(
        d,
        forward=tuple(forward),
        residuals=tuple(residuals),
        jvp_partials=jvp_partials,
        vjp_partials=vjp_partials,
        residual_partials=residual_partials,
        rewritten=tuple((n, written[n], computed[n]) for n, _ in d.forward if written[n] != computed[n]),
        choices=tuple(choices.values()),
    )
