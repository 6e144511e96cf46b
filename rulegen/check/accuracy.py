"""Stage 6, beside the checks: how many bits of each value and partial the generated code gets right.

Herbie's measure (Panchekha et al., PLDI 2015): points are sampled uniformly
over the float bit patterns inside each input's domain, so that every
magnitude from the smallest subnormal to the largest float is visited as
often as the numbers near 1; the error of a result is log2(1 + the number of
floats between it and the correctly rounded exact value), 0 bits where it is
correctly rounded and 64 (32 in float32) where it is nan.  The exact value
is the written forward (and its sympy derivative) in mpmath at a precision
raised until two evaluations round to the same float.

Each value and partial is measured in float64 and float32, in both backends,
for the generated code and for the framework's own autodiff of the forward
as written (printed naively, without rulegen's rewrites): what a user gets
without rulegen is the bar.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import sympy as sp

from rulegen.check.lowering import one_mlir_context
from rulegen.check.numerical import lambdified_derivative
from rulegen.check.outcome import CheckFailed, NotApplicable, brief
from rulegen.check.points import flat_call, joint_domain
from rulegen.check.subject import Subject, derived
from rulegen.derive.expr import lambdified
from rulegen.derive.measure import (
    assumed_domain,
    bits_of_error,
    exact_value,
    sample_floats,
    sampled_domain,
    special_points,
    with_probes,
)
from rulegen.spec.rules import Domain, Input, Rule, SympyBody

Mode = Literal["reverse", "forward"]
#: Where points are drawn: each input's `domain`; the whole float line its `assume` allows (where the search
#: chooses forms); or half of them in each.
Where = Literal["domain", "whole_line", "both"]

DTYPES: dict[str, Any] = {"float64": np.float64, "float32": np.float32}
BACKENDS = ("jax", "torch")
SOURCES = ("generated", "autodiff")


# ---------------------------------------------------------------- what is measured


@dataclass(frozen=True)
class Quantity:
    """A value of the forward (`wrt` None) or a partial d output / d wrt, as reverse or forward mode computes it."""

    output: str
    wrt: str | None = None
    #: "reverse": by a VJP (a backward); "forward": by a JVP, which a rule computes with code of its own.
    mode: Mode = "reverse"

    @property
    def label(self) -> str:
        if self.wrt is None:
            return self.output
        return f"d{self.output}/d{self.wrt}" + (" (jvp)" if self.mode == "forward" else "")

    @property
    def is_partial(self) -> bool:
        return self.wrt is not None


@dataclass(frozen=True)
class Series:
    """The bits of error of one quantity at every point, in one dtype, backend and source."""

    quantity: Quantity
    dtype: str
    backend: str
    source: str
    bits: np.ndarray
    note: str = ""  # why every point is counted as nan (the implementation raised)
    # Points where an input or the exact value is subnormal in the dtype: where XLA's fused kernels flush to
    # zero (and read a subnormal as zero), which decides there, not the formula (see `check_accuracy`).
    subnormal: np.ndarray | None = None
    #: The results themselves, in the dtype, and the exact values correctly rounded to it.
    got: np.ndarray | None = None
    exact: np.ndarray | None = None
    #: Points where an input is exactly 0 and the forward has a kink (a Piecewise, Max, Min, Abs, sign): a partial
    #: there is a convention (prelu's VJP at 0 takes the right side), which the check does not judge.
    kink: np.ndarray | None = None

    @property
    def inadmissible(self) -> np.ndarray:
        """Per point, whether the result is inf or nan where the exact value is a finite float of the dtype."""
        if self.got is None or self.exact is None:
            return np.zeros(self.bits.shape, bool)
        return ~np.isfinite(self.got) & np.isfinite(self.exact)

    @property
    def mean(self) -> float:
        return float(np.mean(self.bits)) if self.bits.size else math.nan

    @property
    def max(self) -> float:
        return float(np.max(self.bits)) if self.bits.size else math.nan


@dataclass(frozen=True)
class RuleAccuracy:
    """One rule's measurements; `skipped` says why there are none."""

    rule: str
    series: tuple[Series, ...] = ()
    inputs: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)  # dtype -> input name -> points
    skipped: str = ""

    def find(self, quantity: Quantity, dtype: str, backend: str, source: str) -> Series:
        found = self.get(quantity, dtype, backend, source)
        if found is None:
            raise KeyError((quantity.label, dtype, backend, source))
        return found

    def get(self, quantity: Quantity, dtype: str, backend: str, source: str) -> Series | None:
        """The series of `quantity` in `dtype`, `backend` and `source`; None where it was not measured."""
        return next(
            (
                s
                for s in self.series
                if (s.quantity, s.dtype, s.backend, s.source) == (quantity, dtype, backend, source)
            ),
            None,
        )

    @property
    def dtypes(self) -> list[str]:
        """The dtypes measured, in DTYPES' order."""
        return [d for d in DTYPES if any(s.dtype == d for s in self.series)]

    @property
    def quantities(self) -> list[Quantity]:
        return list(dict.fromkeys(s.quantity for s in self.series))

    def mean_bits(
        self,
        *,
        partials: bool,
        dtype: str,
        backend: str,
        source: str,
        mode: Mode = "reverse",
        flushed_inputs: bool = True,
    ) -> float:
        """The mean over the rule's values (or partials, in `mode`) and points; nan where it has none.

        `flushed_inputs=False` leaves out the points where `backend` reads a subnormal input as 0 (XLA): no code
        run there sees the input it was given, so those points measure the platform, not the formula.
        """
        kept = np.ones((), bool) if flushed_inputs else self.read_points(dtype, backend)
        chosen = [
            s.bits[np.broadcast_to(kept, s.bits.shape)]
            for s in self.series
            if s.quantity.is_partial == partials
            and (s.dtype, s.backend, s.source) == (dtype, backend, source)
            and (not partials or s.quantity.mode == mode)
        ]
        chosen = [c for c in chosen if c.size]
        return float(np.mean(np.concatenate(chosen))) if chosen else math.nan

    def read_points(self, dtype: str, backend: str) -> np.ndarray:
        """`read_as_given` at the rule's points of `dtype`."""
        return read_as_given(list(self.inputs.get(dtype, {}).values()), dtype, backend)

    def inadmissible(self, source: str = "generated") -> list[Series]:
        """The series of `source` that are inf or nan at a point where the exact value is a finite float of the
        dtype, of the points the backend reads as given (`read_points`)."""
        return [
            s
            for s in self.series
            if s.source == source
            and (s.inadmissible & np.broadcast_to(self.read_points(s.dtype, s.backend), s.bits.shape)).any()
        ]


class NotMeasurable(Exception):
    """The rule has nothing this measurement can sample (a snippet forward, complex or integer inputs)."""


#: Where an input the rule gives no domain is sampled, by what it assumes: the float line's part it allows.
def _measurable(rule: Rule) -> None:
    if not isinstance(rule.forward, SympyBody):
        raise NotMeasurable("the forward is a snippet: there is no exact expression to measure against")
    if rule.complex:
        raise NotMeasurable("complex inputs: bits of error are measured on the real float line")
    if rule.structured:
        raise NotMeasurable("structured arguments are not sampled yet")
    for spec in rule.inputs:
        if not spec.static and spec.dtype != "float":
            raise NotMeasurable(f"input {spec.name!r} is {spec.dtype}: only float arrays are sampled")
    if not any(o.differentiable for o in rule.outputs):
        raise NotMeasurable("no differentiable output")


def _static_value(rule: Rule, spec: Input) -> Any:
    if spec.has_default:
        return spec.default
    if rule.checks.points and spec.name in rule.checks.points[0].at:
        return rule.checks.points[0].at[spec.name]
    raise NotMeasurable(f"static input {spec.name!r} has no default and no point to take it from")


@dataclass
class _Plan:
    """What one rule's measurement needs: the exact functions, the written forward, the points' rules."""

    rule: Rule
    symbols: list[sp.Symbol]
    written: dict[str, sp.Expr]
    exact: dict[Quantity, Callable[..., Any]]
    statics: dict[str, Any]
    condition: Callable[..., Any] | None
    #: Where each array input is sampled, in `arrays`' order: its `domain`, where the checks sample.
    domains: list[Domain]
    #: The whole float line each array input's `assume` allows, where the search chooses forms.
    whole_line: list[Domain]
    #: Whether a written forward is not smooth (a Piecewise, Max, Min, Abs, sign): its partials at 0 are conventions.
    kinked: bool = False

    @property
    def arrays(self) -> list[Input]:
        return [i for i in self.rule.inputs if not i.static]


def _plan(rule: Rule, known: Sequence[str]) -> _Plan:
    from rulegen.derive.functions import MPMATH_IMPLEMENTATIONS
    from rulegen.derive.snippet import SnippetDerivation

    _measurable(rule)
    # The forward as written and its sympy derivatives: what the stabilising search chose is not read here,
    # and the search is most of a derivation's time.
    derivation = derived(rule.model_copy(update={"stabilise": False}), tuple(sorted(known)))
    if isinstance(derivation, SnippetDerivation):
        raise NotMeasurable("a body is a snippet: there is no exact expression to measure against")
    symbols = [derivation.symbols[i.name] for i in rule.inputs]
    as_written = {name: written for name, written, _ in derivation.rewritten}
    written = {name: as_written.get(name, expr) for name, expr in derivation.forward}
    modules = [dict(MPMATH_IMPLEMENTATIONS), "mpmath"]
    exact: dict[Quantity, Callable[..., Any]] = {}
    for output in (o for o in rule.outputs if o.differentiable):
        exact[Quantity(output.name)] = lambdified(symbols, written[output.name], modules=modules)
        # A rule whose derivative deliberately differs from the forward's (`true_derivative: false`) has no exact one.
        for spec in (i for i in rule.inputs if i.differentiable and rule.checks.true_derivative):
            partial = lambdified_derivative(written[output.name], derivation.symbols[spec.name], symbols, modules)
            if partial is not None:
                exact[Quantity(output.name, spec.name)] = partial
    statics = {i.name: _static_value(rule, i) for i in rule.inputs if i.static}
    arrays = [i for i in rule.inputs if not i.static]
    domains = [sampled_domain(i) for i in arrays]
    whole_line = [assumed_domain(i) for i in arrays]
    kinked = any(expr.has(sp.Piecewise, sp.Max, sp.Min, sp.Abs, sp.sign, sp.Heaviside) for expr in written.values())
    return _Plan(rule, symbols, written, exact, statics, joint_domain(rule), domains, whole_line, kinked)


# ---------------------------------------------------------------- the points and their exact values

#: Bits to which `_exact_value` rounds each working precision up.  mpmath keeps the Bernoulli numbers of its
#: digamma and loggamma per working precision, and a point's first precision follows its inputs' exponents
#: (`initial_precision`): point after point they were computed afresh at a precision a few bits from the last
#: (two thirds of the time of a Student-t log-density's accuracy check).  Rounded up, they are computed once
#: per step and read back, and each value is computed with no fewer bits than asked.
PRECISION_STEP = 256


def _at_precision_step(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn`, evaluated at mpmath's working precision rounded up to a multiple of PRECISION_STEP."""
    import mpmath

    def at_step(*args: Any) -> Any:
        with mpmath.workprec(-(-mpmath.mp.prec // PRECISION_STEP) * PRECISION_STEP):
            return fn(*args)

    return at_step


def _exact_value(fn: Callable[..., Any], point: Sequence[Any]) -> tuple[float, float] | None:
    """`exact_value` of `fn` at `point`, each evaluation at a precision rounded up (see PRECISION_STEP)."""
    return exact_value(_at_precision_step(fn), point)


#: Points per ratio and pair of inputs in the mixed-magnitude pairs (|a| << |b|) the check samples.
MIXED_POINTS = 4

#: Magnitudes each input also takes (either sign, inside its domain, the others as drawn), besides the points
#: drawn over every binade: where special functions' tails cancel (1 + erf(x/sqrt 2) from x = -5 to -13), a
#: band of a few binades that the check's drawn points mostly miss.
PROBES = tuple(1.37 * 2.0**k for k in (-1, 1, 2, 3, 4))


def _draw(
    plan: _Plan,
    count: int,
    rng: np.random.Generator,
    dtype: Any,
    *,
    probed: bool = False,
    where: Where = "domain",
) -> list[Any]:
    """`count` candidate points in `dtype`: one array per input (statics as given), drawn `where` says; with
    `probed`, each input's PROBES, special floats and pairs of mixed magnitudes on top (over the whole line
    unless `where` is "domain")."""
    domains = plan.domains if where == "domain" else plan.whole_line
    drawn = [sample_floats(domain, count, rng, dtype) for domain in domains]
    if where == "both":
        # Half in the domain, where the rule's author looks, half over the whole line, where the search decides.
        inside = [sample_floats(domain, count - count // 2, rng, dtype) for domain in plan.domains]
        drawn = [np.concatenate([a, b[: count // 2]]) for a, b in zip(inside, drawn, strict=True)]
    if probed:
        drawn = with_probes(drawn, domains, PROBES, dtype)
        # Each input's special floats (0, the smallest subnormal and normal, the largest, either sign, where its
        # domain holds them) and the mixed magnitudes: where forms break, as the search's acceptance gate samples.
        drawn = special_points(drawn, domains, dtype, rng, MIXED_POINTS)
    columns = {i.name: column for i, column in zip(plan.arrays, drawn, strict=True)}
    args = [plan.statics[i.name] if i.static else columns[i.name] for i in plan.rule.inputs]
    if plan.condition is not None:
        with np.errstate(all="ignore"):
            keep = np.broadcast_to(np.asarray(plan.condition(*args)) > 0.5, drawn[0].shape)
        args = [a[keep] if isinstance(a, np.ndarray) else a for a in args]
    return args


def _exact_points(
    plan: _Plan, count: int, rng: np.random.Generator, dtype: Any, where: Where = "domain"
) -> tuple[list[Any], dict[Quantity, np.ndarray]]:
    """Up to `count` points where every quantity is a finite real number, with its correctly rounded values.

    Points where the exact value is not a finite real number are dropped
    and more are drawn, as Herbie does; a rule defined almost nowhere on its
    domain gets fewer points.
    """
    which = 0 if np.dtype(dtype) == np.float64 else 1
    kept_args: list[list[Any]] = [[] for _ in plan.rule.inputs]
    kept: dict[Quantity, list[float]] = {q: [] for q in plan.exact}
    wanted = count
    for attempt in range(8):
        args = _draw(plan, count, rng, dtype, probed=attempt == 0, where=where)
        size = len(next(a for a in args if isinstance(a, np.ndarray)))
        if attempt == 0:
            wanted = size  # the probes and mixed magnitudes come on top
        for j in range(size):
            point = [float(a[j]) if isinstance(a, np.ndarray) else a for a in args]
            values = [_exact_value(fn, point) for fn in plan.exact.values()]
            if any(v is None for v in values):
                continue
            for column, value in zip(kept_args, point, strict=True):
                column.append(value)
            for q, v in zip(plan.exact, values, strict=True):
                assert v is not None
                kept[q].append(v[which])
            if len(kept_args[0]) == wanted:
                break
        if kept_args and len(kept_args[0]) == wanted:
            break
    args = [
        plan.statics[i.name] if i.static else np.asarray(column, dtype=dtype)
        for i, column in zip(plan.rule.inputs, kept_args, strict=True)
    ]
    return args, {q: np.asarray(v, dtype=np.float64) for q, v in kept.items()}


# ---------------------------------------------------------------- the implementations


def array_function(rule: Rule, exprs: Sequence[sp.Expr], backend: str) -> Callable[..., Any]:
    """`exprs` (one per output) printed as plain array code of the rule's inputs, returning them as a tuple:
    nothing custom, so the framework differentiates it itself (autodiff of the forward as written).

    Written with the framework's own functions, where generated code calls the runtime's mended ones
    (erfcx, whose frameworks' derivative cancels; torch's float64 digamma): what a user gets without rulegen.
    """
    from rulegen.plan.code import Import, import_statements
    from rulegen.plan.printers import print_jax_framework, print_torch_framework

    printer = print_jax_framework if backend == "jax" else print_torch_framework
    statics = frozenset(i.name for i in rule.inputs if i.static)
    imports: set[Import] = set()
    results = []
    for expr in exprs:
        code, needed = printer(expr, scalars=statics)
        imports |= needed
        results.append(code.text)
    params = ", ".join(i.name for i in rule.inputs)
    body = ", ".join(results) + ("," if len(results) == 1 else "")
    source = "\n".join(import_statements(imports)) + f"\ndef written_forward({params}):\n    return ({body})\n"
    # A module of the runtime's package, as in a generated one: the printers import its helpers relatively
    # (torch's zeta is the runtime's `from ._special import hurwitz_zeta`; static arithmetic `from . import _numbers`).
    package = f"rulegen.runtime.{backend}"
    namespace: dict[str, Any] = {"__name__": f"{package}.written_forward", "__package__": package}
    exec(compile(source, f"<written forward of {rule.name}>", "exec"), namespace)
    return namespace["written_forward"]


def _as_tuple(result: Any) -> tuple[Any, ...]:
    return result if isinstance(result, tuple) else (result,)


def _evaluate_jax(fn: Callable[..., Any], plan: _Plan, args: list[Any]) -> dict[Quantity, np.ndarray]:
    """Every quantity of `plan` from `fn` in JAX: values, and partials by the VJP of each output alone."""
    import jax
    import jax.numpy as jnp

    rule = plan.rule
    diff = [k for k, i in enumerate(rule.inputs) if i.differentiable]

    def of_diff(*xs: Any) -> tuple[Any, ...]:
        full = [jnp.asarray(a) if isinstance(a, np.ndarray) else a for a in args]
        for k, x in zip(diff, xs, strict=True):
            full[k] = x
        return _as_tuple(fn(*full))

    primals = [jnp.asarray(args[k]) for k in diff]
    found: dict[Quantity, np.ndarray] = {}
    for n, output in enumerate(rule.outputs):
        if not output.differentiable:
            continue
        # The VJP of this output alone, as jax.grad of it differentiates: the other outputs' cotangents are
        # symbolic zeros, not zero arrays that a partial overflowing to inf would turn into nan (torch's
        # backward of one output, below, gets None for them alike).
        out, pullback = jax.vjp(lambda *xs, n=n: of_diff(*xs)[n], *primals)
        found[Quantity(output.name)] = np.asarray(out)
        for k, grad in zip(diff, pullback(jnp.ones_like(out)), strict=True):
            found[Quantity(output.name, rule.inputs[k].name)] = np.asarray(grad)
    return found


def _evaluate_torch(fn: Callable[..., Any], plan: _Plan, args: list[Any]) -> dict[Quantity, np.ndarray]:
    """Every quantity of `plan` from `fn` in torch: values, and partials by one backward per output."""
    import torch

    rule = plan.rule
    tensors = [
        torch.from_numpy(a).requires_grad_(i.differentiable) if isinstance(a, np.ndarray) else a
        for a, i in zip(args, rule.inputs, strict=True)
    ]
    leaves = [t for t, i in zip(tensors, rule.inputs, strict=True) if i.differentiable]
    outs = _as_tuple(fn(*tensors))
    found: dict[Quantity, np.ndarray] = {}
    for n, output in enumerate(rule.outputs):
        if not output.differentiable:
            continue
        found[Quantity(output.name)] = outs[n].detach().numpy(force=True)
        grads = torch.autograd.grad(outs[n].sum(), leaves, retain_graph=True, allow_unused=True)
        for leaf_input, grad in zip((i for i in rule.inputs if i.differentiable), grads, strict=True):
            value = torch.zeros_like(outs[n]) if grad is None else grad
            found[Quantity(output.name, leaf_input.name)] = value.detach().numpy(force=True)
    return found


def jvp_in_each_input(
    backend: str,
    of_diff: Callable[..., tuple[Any, ...]],
    primals: Sequence[Any],
    tangents: Sequence[Any],
    outputs: Sequence[str],
    inputs: Sequence[str],
) -> dict[Quantity, np.ndarray]:
    """Forward mode a differentiable input at a time, the others held: each output's JVP in it, by `outputs` name.

    `of_diff` maps the `primals` (the differentiable inputs, named `inputs`)
    to the differentiable `outputs`; each input's tangent is `tangents`' of
    its place (ones give the partials of an elementwise function).
    """
    if backend == "jax":
        import jax

        def jvp(f: Callable[..., Any], primal: Any, tangent: Any) -> list[np.ndarray]:
            return [np.asarray(d) for d in jax.jvp(f, (primal,), (tangent,))[1]]
    else:
        import torch

        def jvp(f: Callable[..., Any], primal: Any, tangent: Any) -> list[np.ndarray]:
            return [d.numpy(force=True) for d in torch.func.jvp(f, (primal,), (tangent,))[1]]

    found: dict[Quantity, np.ndarray] = {}
    for j, (tangent, wrt) in enumerate(zip(tangents, inputs, strict=True)):

        def alone(x: Any, j: int = j) -> tuple[Any, ...]:
            return of_diff(*primals[:j], x, *primals[j + 1 :])

        for name, dot in zip(outputs, jvp(alone, primals[j], tangent), strict=True):
            found[Quantity(name, wrt, "forward")] = dot
    return found


def _forward_partials(backend: str) -> Callable[[Callable[..., Any], _Plan, list[Any]], dict[Quantity, np.ndarray]]:
    """Every partial of a plan's rule from `fn` in `backend` by forward mode (`jvp_in_each_input`, tangents of ones)."""

    def partials(fn: Callable[..., Any], plan: _Plan, args: list[Any]) -> dict[Quantity, np.ndarray]:
        ones: Callable[[Any], Any]
        full: list[Any]
        if backend == "jax":
            import jax.numpy as jnp

            full = [jnp.asarray(a) if isinstance(a, np.ndarray) else a for a in args]
            ones = jnp.ones_like
        else:
            import torch

            full = [torch.from_numpy(a) if isinstance(a, np.ndarray) else a for a in args]
            ones = torch.ones_like
        rule = plan.rule
        diff = [k for k, i in enumerate(rule.inputs) if i.differentiable]
        kept = [n for n, o in enumerate(rule.outputs) if o.differentiable]

        def of_diff(*xs: Any) -> tuple[Any, ...]:
            values = list(full)
            for k, x in zip(diff, xs, strict=True):
                values[k] = x
            outs = _as_tuple(fn(*values))
            return tuple(outs[n] for n in kept)

        primals = [full[k] for k in diff]
        names = [rule.outputs[n].name for n in kept]
        return jvp_in_each_input(
            backend, of_diff, primals, [ones(p) for p in primals], names, [rule.inputs[k].name for k in diff]
        )

    return partials


# ---------------------------------------------------------------- one rule


def measure_rule(
    rule: Rule, jax_pkg: Any, torch_pkg: Any, *, points: int = 256, seed: int = 0, known: Sequence[str] = ()
) -> RuleAccuracy:
    """The bits of error of every value and partial of `rule`, generated and autodiff, at `points` points per dtype.

    `jax_pkg` and `torch_pkg` are the built package's backends.  Raises
    SpecErrors where the rule's joint `domain` condition does not parse.
    """

    generated = {
        "jax": flat_call(rule, getattr(jax_pkg, rule.name)),
        "torch": flat_call(rule, getattr(torch_pkg, rule.name)),
    }
    with one_mlir_context():  # as the checks lower JAX (`rulegen accuracy`, the benchmarks)
        return measure_functions(rule, generated, points=points, seed=seed, known=known)


def measure_functions(
    rule: Rule,
    generated: dict[str, Callable[..., Any]],
    *,
    points: int = 256,
    seed: int = 0,
    known: Sequence[str] = (),
    dtypes: Sequence[str] = tuple(DTYPES),
    where: Where = "domain",
) -> RuleAccuracy:
    """`measure_rule` of the generated functions by backend, called with every input positionally (`flat_call`),
    at points drawn `where` says."""
    try:
        plan = _plan(rule, known or [rule.name])
    except NotMeasurable as why:
        return RuleAccuracy(rule.name, skipped=str(why))
    implementations = {(backend, "generated"): fn for backend, fn in generated.items()}
    written = [plan.written[o.name] for o in rule.outputs]
    implementations |= {(backend, "autodiff"): array_function(rule, written, backend) for backend in generated}
    series: list[Series] = []
    inputs: dict[str, dict[str, np.ndarray]] = {}
    for dtype_name in dtypes:
        dtype = DTYPES[dtype_name]
        rng = np.random.default_rng([seed, *rule.name.encode(), np.dtype(dtype).itemsize])
        try:
            args, exact = _exact_points(plan, points, rng, dtype, where)
        except ValueError as why:
            return RuleAccuracy(rule.name, skipped=str(why))
        # Forward mode computes the same partials, by the rule's JVP where reverse mode runs its VJP.
        exact |= {dataclasses.replace(q, mode="forward"): v for q, v in exact.items() if q.is_partial}
        if not any(isinstance(a, np.ndarray) and a.size for a in args):
            return RuleAccuracy(rule.name, skipped="no sampled point has a finite real value")
        inputs[dtype_name] = {i.name: a for i, a in zip(rule.inputs, args, strict=True) if not i.static}
        for (backend, source), fn in implementations.items():
            series += _measured(plan, fn, args, exact, dtype_name, backend, source)
    return RuleAccuracy(rule.name, tuple(series), inputs)


#: How each backend computes a rule's quantities, by the mode its partials are computed in.
_EVALUATIONS: dict[str, dict[Mode, Callable[[Callable[..., Any], _Plan, list[Any]], dict[Quantity, np.ndarray]]]] = {
    "jax": {"reverse": _evaluate_jax, "forward": _forward_partials("jax")},
    "torch": {"reverse": _evaluate_torch, "forward": _forward_partials("torch")},
}


def _computed(
    plan: _Plan, fn: Callable[..., Any], args: list[Any], backend: str
) -> tuple[dict[Quantity, np.ndarray], dict[Mode, str]]:
    """Every quantity `fn` computes in `backend` at `args`, in each mode; and, by mode, why one raised."""
    notes: dict[Mode, str] = {}
    found: dict[Quantity, np.ndarray] = {}
    for mode, evaluate in _EVALUATIONS[backend].items():
        try:
            with np.errstate(all="ignore"):
                found |= evaluate(fn, plan, args)
        except Exception as exc:  # a crash is as wrong as nan everywhere, and said so
            notes[mode] = f"{type(exc).__name__}: {brief(str(exc), 200)}"
    return found, notes


def _measured(
    plan: _Plan,
    fn: Callable[..., Any],
    args: list[Any],
    exact: dict[Quantity, np.ndarray],
    dtype: str,
    backend: str,
    source: str,
) -> Iterator[Series]:
    arrays = [np.asarray(a, dtype=np.float64) for a in args if isinstance(a, np.ndarray)]
    found, notes = _computed(plan, fn, args, backend)
    for quantity, reference in exact.items():
        note = notes.get(quantity.mode, "")
        got = found.get(quantity, np.full(reference.shape, np.nan))
        got = np.broadcast_to(np.asarray(got, dtype=DTYPES[dtype]), reference.shape)
        bits = bits_of_error(got, reference, DTYPES[dtype])
        if backend in FLUSHES_SUBNORMALS:
            # The platform's correctly rounded value of a subnormal is its signed zero: no JAX code computes one.
            flushed = np.where(subnormal([reference], DTYPES[dtype]), np.copysign(0.0, reference), reference)
            bits = np.minimum(bits, bits_of_error(got, flushed, DTYPES[dtype]))
        with np.errstate(over="ignore"):
            rounded = reference.astype(DTYPES[dtype])
        yield Series(
            quantity,
            dtype,
            backend,
            source,
            bits,
            note,
            subnormal([*arrays, reference], DTYPES[dtype]),
            np.asarray(got),
            rounded,
            np.logical_or.reduce([a == 0 for a in arrays]) if plan.kinked and quantity.is_partial else None,
        )


#: Backends whose arithmetic flushes subnormal results to zero (XLA on CPU and GPU: JAX's 1e-40 / 2 is 0 in
#: float32 and 5e-324 / 2 in float64): where the exact value is subnormal, its zero counts as correctly rounded.
FLUSHES_SUBNORMALS = frozenset({"jax"})


def read_as_given(inputs: Sequence[np.ndarray], dtype: str, backend: str) -> np.ndarray:
    """Per point, whether `backend` computes with the `inputs` it was given: False where it reads a subnormal input
    as 0 (XLA), so that what it returns there measures the platform, not the formula."""
    if backend not in FLUSHES_SUBNORMALS or not inputs:
        return np.ones((), bool)
    return ~subnormal(inputs, DTYPES[dtype])


def subnormal(values: Sequence[np.ndarray], dtype: Any) -> np.ndarray:
    """Per point, whether any of `values` (inputs and the exact value) is a nonzero below the dtype's normals."""
    tiny = np.finfo(dtype).tiny
    found = [(v != 0) & (np.abs(v) < tiny) for v in values]
    return np.logical_or.reduce(np.broadcast_arrays(*found))


# ---------------------------------------------------------------- what an accuracy check would decide


#: Bits a generated result may be worse than autodiff's, and the bits within which autodiff counts as right.
WORSE_BY_BITS = 1.0
AUTODIFF_RIGHT_BITS = 2.0
#: At one point, a generated result within this many bits of correctly rounded (255 ulps) is never counted
#: worse: where the partial itself cancels, both it and autodiff lose up to that many, and which of two right
#: orders of the same operations rounds luckily is chance (f_bessel_i1e's i0e - i1e*(1 + 1/x) at x = 1.508,
#: 0.45 - 0.448: generated 7.0 bits, autodiff 1.6 at seed 3; gelu, acosh, ndtri: 1.6-3 bits at seed 0).  A
#: loss over many points is the mean's to catch.
POINT_BITS = 8.0


@dataclass(frozen=True)
class Worse:
    """Why a generated quantity fails against autodiff: the mean, or the first point where autodiff is right."""

    point: int | None  # None: the mean over the points
    generated_bits: float
    autodiff_bits: float


def worse_than_autodiff(
    generated: np.ndarray, autodiff: np.ndarray, compared: np.ndarray | None = None
) -> Worse | None:
    """Whether generated bits of error (per point) are more than WORSE_BY_BITS above autodiff's; None where not.

    Worse on the mean over the points, or at any point where autodiff is
    within AUTODIFF_RIGHT_BITS of correctly rounded and the generated result
    is not within POINT_BITS (there a user loses what autodiff gave them).
    Only the points `compared` (all where None) count; a point is an index
    into the full arrays.
    """
    generated, autodiff = np.asarray(generated, dtype=np.float64), np.asarray(autodiff, dtype=np.float64)
    compared = np.ones(generated.shape, bool) if compared is None else np.asarray(compared, bool)
    if not compared.any():
        return None
    right = (autodiff <= AUTODIFF_RIGHT_BITS) & (generated > np.maximum(autodiff + WORSE_BY_BITS, POINT_BITS))
    right &= compared
    if right.any():
        k = int(np.argmax(right))
        return Worse(k, float(generated[k]), float(autodiff[k]))
    mean, autodiff_mean = generated[compared].mean(), autodiff[compared].mean()
    if mean > autodiff_mean + WORSE_BY_BITS:
        return Worse(None, float(mean), float(autodiff_mean))
    return None


# ---------------------------------------------------------------- the check


#: Points per dtype the `accuracy` check draws (`rulegen accuracy` draws 256), each input's PROBES on top: 32
#: drawn before the probes came (stop 40), 24 since, so that a rule of one input costs about what it did.
CHECK_POINTS = 24


def _fail_on(failures: Sequence[str]) -> None:
    """CheckFailed with the first three failures, where there are any."""
    if failures:
        more = f" (and {len(failures) - 3} more)" if len(failures) > 3 else ""
        raise CheckFailed("; ".join(failures[:3]) + more)


def check_accuracy(s: Subject) -> str:
    """Each value and partial (by a VJP and by a JVP), in both dtypes and backends, finite wherever the exact value
    is a finite float and no worse than autodiff of the forward as written.

    Bits of error against the correctly rounded mpmath value, at points
    spread over every magnitude (the float bit patterns): half inside the
    inputs' domains, half over the whole float line their `assume` allows,
    where the search chooses forms, each input's probes, special floats and
    mixed magnitudes on top.  The rule of `worse_than_autodiff` decides.
    """
    measured = s.once(
        "accuracy",
        lambda: measure_functions(
            s.rule,
            s.implementations,
            points=CHECK_POINTS,
            seed=s.seed,
            known=s.known,
            where="both",
        ),
    )
    if measured.skipped:
        raise NotApplicable(measured.skipped)
    _fail_on(accuracy_failures(measured, s.no_forward_mode))
    means = {
        dtype: [measured.mean_bits(partials=True, dtype=dtype, backend="torch", source=source) for source in SOURCES]
        for dtype in DTYPES
    }
    said = ", ".join(f"{dtype} {g:.1f} ({a:.1f})" for dtype, (g, a) in means.items() if not math.isnan(g))
    return (
        "finite wherever the exact value is, no value or partial worse than autodiff; partials' mean bits from"
        f" correctly rounded, generated (autodiff): {said}"
    )


#: Points per dtype over the whole float line at which the `admissible` check looks for inf and nan.
SWEEP_POINTS = 256


def inadmissible_results(
    rule: Rule,
    generated: dict[str, Callable[..., Any]],
    *,
    points: int = SWEEP_POINTS,
    seed: int = 0,
    known: Sequence[str] = (),
) -> list[str]:
    """Where a generated value or partial is inf or nan though the exact value is a finite float of the dtype,
    over the whole float line the inputs allow (probes and mixed magnitudes on top): one message per quantity,
    dtype and backend, naming the first such point, the exact value and autodiff's.

    Admissibility is the contract's first promise (SPEC section 3), whatever autodiff does: the frameworks'
    autodiff of `exp(x)/(exp(x) + 1)` is nan past 709 as well.  The generated code is evaluated at every
    point (cheap); mpmath only where it is not finite.
    """
    try:
        plan = _plan(rule, known or [rule.name])
    except NotMeasurable:
        return []
    autodiff = {b: array_function(rule, [plan.written[o.name] for o in rule.outputs], b) for b in generated}
    found = []
    for dtype_name, dtype in DTYPES.items():
        rng = np.random.default_rng([seed, *rule.name.encode(), np.dtype(dtype).itemsize, 1])
        try:
            args = _draw(plan, points, rng, dtype, probed=True, where="whole_line")
        except ValueError:
            continue
        arrays = [a for a in args if isinstance(a, np.ndarray)]
        if not arrays or not arrays[0].size:
            continue
        exact: dict[tuple[Any, ...], tuple[float, float] | None] = {}  # both backends meet the same points
        for backend, fn in generated.items():
            found += _inadmissible_at(plan, fn, autodiff[backend], args, dtype_name, backend, exact)
    return found


#: The working precisions (bits) at which `beyond_the_floats` evaluates an exact value: low, and apart enough
#: that a cancellation's leftover differs between them by orders of magnitude.
SCREEN_PRECISIONS = (96, 192)
#: Binades past the dtype's largest float beyond which `beyond_the_floats` believes a low-precision value.
SCREEN_MARGIN = 8


def beyond_the_floats(fn: Callable[..., Any], point: Sequence[Any], dtype: Any) -> bool:
    """Whether `fn` at `point` is surely no finite float of `dtype`: at each of SCREEN_PRECISIONS a real number
    over 2**SCREEN_MARGIN times the largest float, or a number off the real line, the two (their imaginary
    parts) within a factor of 2 of each other (their exponents within 2**-64 of each other, where huge).

    Where the generated code overflows, so mostly does the exact value (exp(x) past 709, half the float64
    line), and where it is nan the exact value is mostly complex (asin past 1): proving that at low precision
    is some hundred times cheaper than `exact_value`'s rounding, whose first precision covers the inputs'
    exponents (2,100 bits at 1e300).  A cancellation at low precision leaves a remainder that changes by
    orders of magnitude between the two; a value that does not is believed.
    """
    import mpmath

    def far(value: Any) -> tuple[bool, Any] | None:
        """(whether off the real line, its imaginary part) there, (False, itself) where beyond the floats, else None."""
        if isinstance(value, mpmath.mpc) and value.imag != 0 and mpmath.isfinite(value):
            return True, value.imag
        beyond = isinstance(value, mpmath.mpf) and mpmath.isfinite(value)
        return (False, value) if beyond and mpmath.mag(value) > np.finfo(dtype).maxexp + SCREEN_MARGIN else None

    values: list[tuple[bool, Any]] = []
    for precision in SCREEN_PRECISIONS:
        with mpmath.workprec(precision):
            try:
                found = far(fn(*[mpmath.mpf(a) for a in point]))
            except (ValueError, ZeroDivisionError, OverflowError, TypeError):
                return False
        if found is None or (values and found[0] != values[0][0]):
            return False
        values.append(found)
    (_, low), (_, high) = values
    # Within a factor of 2, or where the exponent is itself huge (5.48**1e133), within what its low-precision
    # rounding leaves of it; a cancellation's remainders differ by SCREEN_PRECISIONS' spread, 96 binades.
    apart = abs(mpmath.mag(low) - mpmath.mag(high))
    return bool(mpmath.sign(low) == mpmath.sign(high) and apart <= 1 + (abs(mpmath.mag(high)) >> 64))


def _inadmissible_at(
    plan: _Plan,
    fn: Callable[..., Any],
    autodiff: Callable[..., Any],
    args: list[Any],
    dtype: str,
    backend: str,
    exact_values: dict[tuple[Any, ...], tuple[float, float] | None],
) -> list[str]:
    got, _ = _computed(plan, fn, args, backend)  # a crash is the measure's to report
    theirs: dict[Quantity, np.ndarray] | None = None
    arrays = [np.asarray(a, dtype=np.float64) for a in args if isinstance(a, np.ndarray)]
    which = 0 if dtype == "float64" else 1
    found = []
    for quantity, values in got.items():
        exact_fn = plan.exact.get(dataclasses.replace(quantity, mode="reverse"))
        if exact_fn is None:
            continue
        values = np.broadcast_to(np.asarray(values, dtype=DTYPES[dtype]), arrays[0].shape)
        suspect = ~np.isfinite(values) & read_as_given(arrays, dtype, backend)
        for j in np.flatnonzero(suspect):
            point = [float(a[j]) if isinstance(a, np.ndarray) else a for a in args]
            key = (exact_fn, *point)
            if key not in exact_values:
                overflows = beyond_the_floats(exact_fn, point, DTYPES[dtype])
                exact_values[key] = None if overflows else _exact_value(exact_fn, point)
            exact = exact_values[key]
            if exact is None or not math.isfinite(exact[which]):
                continue
            if backend in FLUSHES_SUBNORMALS and subnormal([np.asarray(exact[which])], DTYPES[dtype]).any():
                continue
            if theirs is None:
                theirs, _ = _computed(plan, autodiff, args, backend)
            other = theirs.get(quantity)
            said = "" if other is None else f", autodiff {float(np.broadcast_to(other, values.shape)[j]):.6g}"
            inputs = ", ".join(
                f"{i.name}={v:.17g}" for i, v in zip(plan.rule.inputs, point, strict=True) if not i.static
            )
            found.append(
                f"{quantity.label} in {dtype} ({backend}): {float(values[j])} at {inputs} where the exact value is"
                f" {exact[which]:.6g}{said}"
            )
            break
    return found


def check_admissible(s: Subject) -> str:
    """No value or partial inf or nan where the exact value is a finite float, over the whole float line the
    inputs allow (`inadmissible_results`), whatever autodiff of the forward as written does there."""
    try:
        _measurable(s.rule)
    except NotMeasurable as why:
        raise NotApplicable(str(why)) from None
    generated = s.implementations
    _fail_on(inadmissible_results(s.rule, generated, points=SWEEP_POINTS, seed=s.seed, known=s.known))
    return f"finite wherever the exact value is, at {SWEEP_POINTS} points per dtype over the whole float line"


#: Each backend's other, whose generated code `backend_gaps` compares it with.
_OTHER_BACKEND = {"jax": "torch", "torch": "jax"}


def accuracy_failures(measured: RuleAccuracy, no_forward_mode: Collection[str] = ()) -> list[str]:
    """What `check_accuracy` fails on: each generated series inf or nan where the exact value is a finite float
    (whatever autodiff does there), or worse than autodiff's (`worse_than_autodiff`).

    The partials by forward mode of the backends in `no_forward_mode` (a
    hand-written Function without `jvp`, a `custom_vjp`) are not judged:
    that the framework refuses them is said where the checks say n/a.
    """
    failures = []
    for generated in (x for x in measured.series if x.source == "generated"):
        if generated.quantity.mode == "forward" and generated.backend in no_forward_mode:
            continue
        autodiff = measured.find(generated.quantity, generated.dtype, generated.backend, "autodiff")
        # Not compared where subnormals are in play: XLA's fused float32 kernels flush them (a generated
        # `sign(x)` is 0 at x = 3.3e-39, a value 7e-39 becomes 0) where the eager autodiff's ops do not.
        compared = None if generated.subnormal is None else ~generated.subnormal
        if generated.kink is not None:
            compared = ~generated.kink & (True if compared is None else compared)
        inadmissible = generated.inadmissible & (True if compared is None else compared)
        if inadmissible.any():
            failures.append(_inadmissible_message(measured, generated, autodiff, int(np.argmax(inadmissible))))
            continue
        worse = worse_than_autodiff(generated.bits, autodiff.bits, compared)
        if worse is not None:
            failures.append(_worse_message(measured, generated, worse))
    return failures


def _inadmissible_message(measured: RuleAccuracy, generated: Series, autodiff: Series, point: int) -> str:
    assert generated.got is not None and generated.exact is not None
    inputs = measured.inputs[generated.dtype]
    at = ", ".join(f"{name}={float(values[point]):.17g}" for name, values in inputs.items())
    theirs = "" if autodiff.got is None else f", autodiff {float(autodiff.got[point]):.6g}"
    return (
        f"{generated.quantity.label} in {generated.dtype} ({generated.backend}): {float(generated.got[point])} at"
        f" {at} where the exact value is {float(generated.exact[point]):.6g}{theirs}"
    )


def backend_gaps(measured: RuleAccuracy) -> list[str]:
    """Each generated series worse than the other backend's generated code, by `worse_than_autodiff`'s rule.

    A form one backend alone computes loses what the other keeps, though
    autodiff of the forward as written may lose it too (JAX's gelu kept
    1 + erf where torch computed erfc).  `rulegen accuracy` prints these; the
    check does not fail on them, because the frameworks' own functions differ
    too (XLA's lgamma, erfinv and log_ndtr tails, torch's polygamma: ten of
    the bundled and right rules, stop 40), which no rule can mend.
    """
    gaps = []
    for generated in (x for x in measured.series if x.source == "generated"):
        other = measured.get(generated.quantity, generated.dtype, _OTHER_BACKEND[generated.backend], "generated")
        if other is None or other.bits.shape != generated.bits.shape:
            continue
        flushed = [m for m in (generated.subnormal, other.subnormal) if m is not None]
        both = ~np.logical_or.reduce(flushed) if flushed else None
        worse = worse_than_autodiff(generated.bits, other.bits, both)
        if worse is not None:
            gaps.append(_worse_message(measured, generated, worse, f"{other.backend}'s generated code"))
    return gaps


def _worse_message(
    measured: RuleAccuracy, generated: Series, worse: Worse, reference: str = "autodiff of the forward as written"
) -> str:
    where = f"{generated.quantity.label} in {generated.dtype} ({generated.backend})"
    autodiff = f"{reference} {worse.autodiff_bits:.1f}"
    if worse.point is None:
        return f"{where}: {worse.generated_bits:.1f} bits of error on average, {autodiff}"
    inputs = measured.inputs[generated.dtype]
    at = ", ".join(f"{name}={float(values[worse.point]):.17g}" for name, values in inputs.items())
    return f"{where}: {worse.generated_bits:.1f} bits of error at {at}, {autodiff}"
