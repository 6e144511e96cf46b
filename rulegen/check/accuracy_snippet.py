"""Section 3 of the contract for rules written with snippets: no derivative worse than autodiff's.

A snippet has no exact expression to evaluate in mpmath, so the reference is
the forward itself (its body, or a sympy forward printed as plain array
code), differentiated by the framework in float64 at the float32 points: 29
more bits than the float32 results it judges, enough for every loss short of
a cancellation of nine decimal digits.  Against it, each
value and partial in float32 (a VJP of each output alone with a random
cotangent, a JVP in each input alone with a random tangent) of the generated
function and of the framework's own autodiff of the forward body, in both
backends; `worse_than_autodiff` decides, as for sympy rules.

The points are the rule's sample moved along the float line: shifted by
magnitudes from 0.6 to 1e4 and scaled to them and down to 1e-20, within what
the rule assumes of each input.  A sample keeps its structure there (rows of logits near each
other, a vector and its norm): `exp(x - out)` for logsumexp's gradient is
exact near 0 and loses the output's rounding error, ulp(out), near 1e4.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rulegen.check.accuracy import (
    FLUSHES_SUBNORMALS,
    SOURCES,
    Quantity,
    RuleAccuracy,
    Series,
    Worse,
    array_function,
    jvp_in_each_input,
    subnormal,
    worse_than_autodiff,
)
from rulegen.check.numerical import ASSUMED_SIGN
from rulegen.check.outcome import CheckFailed, NotApplicable, brief
from rulegen.check.subject import Subject, derived
from rulegen.derive.measure import bits_of_error
from rulegen.spec.rules import Rule, SnippetBody, SympyBody

#: Where the sample is moved to: each float array input shifted by these, and scaled by their magnitudes and by
#: TINY, where a difference of nearly equal terms (cosh' as (e^x - e^-x)/2) keeps nothing.
MAGNITUDES = (-1.0e4 - 0.3, -117.3, -23.7, -0.61, 0.73, 23.3, 117.1, 1.0e4 + 0.3)
TINY = (1.0e-3, 1.0e-8, 1.0e-20)
Function = Callable[..., tuple[Any, ...]]


@dataclass(frozen=True)
class _Point:
    """The sample moved along the float line, in float32, and random tangents for the derivatives (the
    cotangents, of the outputs' shapes, are drawn from `cotangent_draws` as the outputs are computed)."""

    where: str
    values: list[Any]
    tangents: list[np.ndarray]  # one per differentiable input
    seed: int  # the check's: another seed draws other tangents and cotangents

    @property
    def cotangent_draws(self) -> np.random.Generator:
        """Random cotangents, drawn an output at a time in the outputs' order: the same in every evaluation."""
        return np.random.default_rng([self.seed, len(self.where), *self.where.encode()])


def hand_written(rule: Rule) -> bool:
    """Whether the rule's forward or a derivative is a snippet: what this measure judges, not the mpmath one."""
    bodies = [rule.forward, rule.jvp, rule.vjp, *(rule.residuals.values() if isinstance(rule.residuals, dict) else ())]
    return any(isinstance(b, SnippetBody) for b in bodies)


def autodiff_body(rule: Rule, backend: str, fn: Callable[..., Any], known: Sequence[str]) -> Function | None:
    """The forward as a plain function of the rule's inputs in `backend`, for its autodiff; None where there
    is none (a host body, or a torch-only body JAX runs through a callback).

    A snippet is defined in the namespace of the rule's generated module
    (`fn`'s), where its names are bound as the generated code binds them
    (`xp`, `math`, the rules it calls); a sympy forward is printed as plain
    array code (`array_function`).
    """
    forward = rule.forward
    count = len(rule.outputs)
    if isinstance(forward, SympyBody):
        derivation = derived(rule, tuple(sorted(known)))
        by_name = dict(zip(derivation.forward[backend].results, derivation.forward[backend].exprs, strict=True))
        return array_function(rule, [by_name[o.name] for o in rule.outputs], backend)
    text = getattr(forward, backend) or forward.python
    module = sys.modules.get(getattr(fn, "__module__", ""), None)
    if text is None or module is None:
        return None
    namespace = dict(vars(module))
    params = ", ".join(i.name for i in rule.inputs)
    source = f"def _autodiff_forward({params}):\n" + "".join(f"    {line}\n" for line in text.value.splitlines())
    exec(compile(source, f"<{rule.name} forward>", "exec"), namespace)
    body = namespace["_autodiff_forward"]

    def outputs(*values: Any) -> tuple[Any, ...]:
        found = body(*values)
        found = found if isinstance(found, tuple) else (found,)
        return tuple(found[:count])  # a body returns its residuals after the outputs

    return outputs


def _measurable(rule: Rule) -> None:
    forward = rule.forward
    if not hand_written(rule):
        raise NotApplicable("every body is a sympy expression, measured against mpmath")
    if isinstance(forward, SnippetBody) and forward.numpy is not None:
        raise NotApplicable("a host forward runs outside autodiff: no autodiff to measure against")
    if rule.complex:
        raise NotApplicable("complex inputs: bits of error are measured on the real float line")
    if rule.structured:
        raise NotApplicable("structured arguments are not sampled yet")
    if not rule.checks.true_derivative:
        raise NotApplicable("the rule's derivative deliberately differs from the forward's (true_derivative: false)")
    if not any(o.differentiable for o in rule.outputs) or not any(i.differentiable for i in rule.inputs):
        raise NotApplicable("nothing differentiable")


def _points(s: Subject) -> Iterator[_Point]:
    """The sample, then shifted by and scaled to each magnitude where every element keeps what the rule assumes.

    Only an input the rule lets the checks sample anywhere moves: one with a
    `domain` of its own, or drawn by a `checks.sample` body, stays where the
    rule says it is checked (fixed_point's iteration to an absolute 1e-6
    would never end at a = 1e4 in float32), and so does every input of a
    rule with a joint `domain` condition.
    """
    rule = s.rule
    floats = [k for k, i in enumerate(rule.inputs) if not i.static and i.dtype == "float"]
    anywhere = rule.checks.sample is None and rule.domain is None
    movable = [k for k in floats if anywhere and not rule.inputs[k].domain_given]
    # (where, c, scale, shift): each moved input is `value * scale + shift`.
    moves = [("the sample", 0.0, 1.0, 0.0)]
    for c in MAGNITUDES if movable else ():
        moves += [(f"the sample shifted by {c:g}", c, 1.0, c), (f"the sample scaled by {abs(c):g}", c, abs(c), 0.0)]
    moves += [(f"the sample scaled by {c:g}", c, c, 0.0) for c in (TINY if movable else ())]
    for where, c, scale, shift in moves:
        values = [np.asarray(v, np.float32) if k in floats else v for k, v in enumerate(s.values)]
        for k in movable:
            values[k] = np.asarray(np.asarray(s.values[k], np.float64) * scale + shift, np.float32)
        kept = all(
            np.isfinite(values[k]).all() and all(ASSUMED_SIGN[a](values[k]).all() for a in rule.inputs[k].assume)
            for k in movable
        )
        if not kept:
            continue
        rng = np.random.default_rng([s.seed, *rule.name.encode(), int(abs(c) * 10)])
        tangents = [rng.standard_normal(np.shape(values[k])).astype(np.float32) for k in s.diff]
        yield _Point(where, values, tangents, s.seed)


def _bound(s: Subject, point: _Point, dtype: Any, fn: Function, convert: Callable[[np.ndarray], Any]) -> Any:
    """`fn` at the point as a function of the differentiable inputs (`Subject.bound`), and their values: the
    point's float arrays in `dtype`."""
    values = [
        np.asarray(v, dtype) if isinstance(v, np.ndarray) and i.dtype == "float" else v
        for v, i in zip(point.values, s.rule.inputs, strict=True)
    ]
    return dataclasses.replace(s, values=values).bound(fn, convert), [convert(values[k]) for k in s.diff]


# ---------------------------------------------------------------- evaluation in each backend


def _jax(fn: Function, s: Subject, point: _Point, dtype: Any, forward_mode: bool) -> dict[Quantity, np.ndarray]:
    import jax
    import jax.numpy as jnp

    rule = s.rule
    of_diff, primals = _bound(s, point, dtype, fn, jnp.asarray)
    names = [o.name for o in rule.outputs if o.differentiable]
    found: dict[Quantity, np.ndarray] = {}
    draws = point.cotangent_draws
    for n, name in enumerate(names):
        out, pullback = jax.vjp(lambda *xs, n=n: of_diff(*xs)[n], *primals)
        found[Quantity(name)] = np.asarray(out)
        cotangent = draws.standard_normal(out.shape).astype(np.float32)
        for k, grad in zip(s.diff, pullback(jnp.asarray(np.asarray(cotangent, dtype))), strict=True):
            found[Quantity(name, rule.inputs[k].name)] = np.asarray(grad)
    if forward_mode:
        tangents = [jnp.asarray(np.asarray(t, dtype)) for t in point.tangents]
        found |= jvp_in_each_input("jax", of_diff, primals, tangents, names, [rule.inputs[k].name for k in s.diff])
    return found


def _torch(fn: Function, s: Subject, point: _Point, dtype: Any, forward_mode: bool) -> dict[Quantity, np.ndarray]:
    import torch

    rule = s.rule
    of_diff, primals = _bound(s, point, dtype, fn, torch.from_numpy)
    names = [o.name for o in rule.outputs if o.differentiable]
    draws = point.cotangent_draws
    leaves = [x.clone().requires_grad_() for x in primals]
    outs = of_diff(*leaves)
    found: dict[Quantity, np.ndarray] = {}
    for n, name in enumerate(names):
        found[Quantity(name)] = outs[n].detach().numpy(force=True)
        cotangent = torch.from_numpy(draws.standard_normal(tuple(outs[n].shape)).astype(np.float32).astype(dtype))
        grads = torch.autograd.grad(outs[n], leaves, cotangent, retain_graph=True, allow_unused=True)
        for k, leaf, grad in zip(s.diff, leaves, grads, strict=True):
            value = torch.zeros_like(leaf) if grad is None else grad
            found[Quantity(name, rule.inputs[k].name)] = value.detach().numpy(force=True)
    if forward_mode:
        tangents = [torch.from_numpy(np.asarray(t, dtype)) for t in point.tangents]
        found |= jvp_in_each_input("torch", of_diff, primals, tangents, names, [rule.inputs[k].name for k in s.diff])
    return found


_EVALUATE = {"jax": _jax, "torch": _torch}


def _evaluated(
    evaluate: Callable[..., dict[Quantity, np.ndarray]], fn: Function, s: Subject, point: _Point, dtype: Any, fwd: bool
) -> dict[Quantity, np.ndarray] | str:
    """The quantities, or why there are none (the implementation raised)."""
    try:
        with np.errstate(all="ignore"):
            return evaluate(fn, s, point, dtype, fwd)
    except Exception as exc:
        return f"{type(exc).__name__}: {brief(str(exc), 200)}"


# ---------------------------------------------------------------- the check


@dataclass
class _Bits:
    """One quantity in one backend: bits of error of the generated code and of autodiff at every point, and
    which points count (`compared`); per point, where it is and its inputs' values, for a message."""

    generated: list[np.ndarray] = field(default_factory=list)
    autodiff: list[np.ndarray] = field(default_factory=list)
    compared: list[np.ndarray] = field(default_factory=list)
    where: list[tuple[str, np.ndarray]] = field(default_factory=list)


def measure_snippet(s: Subject) -> dict[tuple[Quantity, str], _Bits]:
    """Every value and partial of `s`'s rule, by backend, where autodiff of its forward body runs."""
    _measurable(s.rule)
    measured: dict[tuple[Quantity, str], _Bits] = {}
    for backend, generated in (("jax", s.jax_fn), ("torch", s.torch_fn)):
        autodiff = autodiff_body(s.rule, backend, generated, s.known)
        if autodiff is None:
            continue
        for point in _points(s):
            arrays = [np.asarray(v, np.float64) for v in point.values if isinstance(v, np.ndarray)]
            where = (point.where, np.concatenate([a.ravel() for a in arrays] or [np.zeros(0)]))
            found = _at(s, backend, generated, autodiff, point)
            terms = {} if s.elementwise else _term_sizes(s, point, {q: exact for q, (_, _, exact) in found.items()})
            for quantity, (ours, theirs, exact) in found.items():
                # Where the exact result overflows float32, any infinity is as right as float32 can be, and a
                # given JVP's term times a held input's zero tangent is nan, which no compiler can remove.
                compared = (np.abs(exact) <= np.finfo(np.float32).max) & ~_subnormal_anywhere(exact, arrays, backend)
                bits = measured.setdefault((quantity, backend), _Bits())
                size = terms.get(quantity, 0.0)
                with np.errstate(over="ignore"):  # an exact value beyond float32's range rounds to inf
                    bits.generated.append(against_terms(ours, exact, size).ravel())
                    bits.autodiff.append(against_terms(theirs, exact, size).ravel())
                bits.compared.append(compared.ravel())
                bits.where.append(where)
    return measured


def _term_sizes(s: Subject, point: _Point, exact: dict[Quantity, np.ndarray]) -> dict[Quantity, float]:
    """The size of the terms each partial of a rule that is not elementwise sums, by quantity: its cotangent's
    (a VJP's) or tangent's (a JVP's) largest entry, drawn as `_jax` and `_torch` draw them.

    An entry of softmax's VJP, `out * (out_bar - sum(out * out_bar))`, sums products of the cotangent with
    outputs at most 1, and is exactly 0 for the cotangent of ones (the gradient of the outputs' sum).
    """
    sizes: dict[Quantity, float] = {}
    draws = point.cotangent_draws
    names = [o.name for o in s.rule.outputs if o.differentiable]
    for name in names:
        value = exact.get(Quantity(name))
        if value is None:
            return sizes  # the draws are in the outputs' order: a missing one puts the rest out of step
        cotangent = draws.standard_normal(np.shape(value)).astype(np.float32)
        for k in s.diff:
            sizes[Quantity(name, s.rule.inputs[k].name)] = float(np.max(np.abs(cotangent), initial=0.0))
    for k, tangent in zip(s.diff, point.tangents, strict=True):
        for name in names:
            sizes[Quantity(name, s.rule.inputs[k].name, "forward")] = float(np.max(np.abs(tangent), initial=0.0))
    return sizes


def against_terms(got: np.ndarray, exact: np.ndarray, size: float) -> np.ndarray:
    """float32 bits of error of `got`, or fewer: its error in units of half a float32 ulp of terms of `size`,
    where the exact value is small beside them (no order of summing such terms keeps more)."""
    bits = bits_of_error(got, exact, np.float32)
    if not size > 0:
        return bits
    with np.errstate(all="ignore"):
        absolute = np.log2(1.0 + np.abs(np.asarray(got, np.float64) - exact) / (size * 2.0**-24))
    return np.where(np.isnan(got), bits, np.minimum(bits, absolute))


def _at(
    s: Subject, backend: str, generated: Function, autodiff: Function, point: _Point
) -> dict[Quantity, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """At one point, each quantity: the generated code's and autodiff's in float32, and the exact one.

    Nothing where autodiff of the body raises there (a domain it checks, a
    loop JAX cannot reverse): no bar to hold the rule to.
    """
    evaluate = _EVALUATE[backend]
    forward_mode = backend not in s.no_forward_mode
    exact = _evaluated(evaluate, autodiff, s, point, np.float64, forward_mode)
    theirs = _evaluated(evaluate, autodiff, s, point, np.float32, forward_mode)
    if isinstance(exact, str) or isinstance(theirs, str):
        return {}
    ours = _evaluated(evaluate, generated, s, point, np.float32, forward_mode)
    found = {}
    for quantity, want in exact.items():
        want = np.asarray(want, np.float64)
        # A generated function that raises where autodiff runs is as wrong as nan everywhere.
        got = np.full(want.shape, np.nan) if isinstance(ours, str) else ours[quantity]
        found[quantity] = (
            np.broadcast_to(np.asarray(got, np.float32), want.shape),
            np.asarray(theirs[quantity], np.float32),
            want,
        )
    return found


def _measured(s: Subject) -> dict[tuple[Quantity, str], _Bits]:
    """`measure_snippet`, or NotApplicable where it measured nothing."""
    measured = measure_snippet(s)
    if not measured:
        raise NotApplicable("autodiff of the forward body runs at none of the points")
    return measured


def snippet_accuracy(s: Subject) -> RuleAccuracy:
    """`measure_snippet` as `rulegen accuracy` shows it: float32 bits of error per quantity, backend and source,
    at the points the check's verdict compares (no plots: the points are a sample moved, not one input swept)."""
    try:
        measured = _measured(s)
    except NotApplicable as why:
        return RuleAccuracy(s.rule.name, skipped=str(why))
    series = []
    for (quantity, backend), bits in measured.items():
        compared = np.concatenate(bits.compared)
        for source in SOURCES:
            series.append(Series(quantity, "float32", backend, source, np.concatenate(getattr(bits, source))[compared]))
    return RuleAccuracy(s.rule.name, tuple(series))


def check_snippet_accuracy(s: Subject) -> str:
    """Each value and partial in float32, in both backends, no worse than autodiff of the forward body, on
    the sample moved along the float line (see the module's docstring)."""
    measured = _measured(s)
    failures = []
    for (quantity, backend), bits in measured.items():
        generated, autodiff = np.concatenate(bits.generated), np.concatenate(bits.autodiff)
        worse = worse_than_autodiff(generated, autodiff, np.concatenate(bits.compared))
        if worse is not None:
            failures.append(_message(quantity, backend, bits, worse))
    if failures:
        more = f" (and {len(failures) - 3} more)" if len(failures) > 3 else ""
        raise CheckFailed("; ".join(failures[:3]) + more)
    # Over the points the verdict compares: an overflowing exact value is not one of them.
    partials = [b for (q, _), b in measured.items() if q.is_partial] or list(measured.values())
    compared = np.concatenate([np.concatenate(b.compared) for b in partials])
    means = [
        float(np.mean(np.concatenate([np.concatenate(getattr(b, source)) for b in partials])[compared]))
        for source in SOURCES
    ]
    points = max(len(b.where) for b in measured.values())
    moved = f"{points} points: the sample moved to magnitudes 1e-20-1e4" if points > 1 else "the sample as given"
    backends = ", ".join(sorted({backend for _, backend in measured}))
    return (
        f"no value or partial worse than autodiff of the forward body ({backends}; float32 at {moved}, against "
        f"float64); mean bits of error, generated vs autodiff: {means[0]:.1f} vs {means[1]:.1f}"
    )


def _subnormal_anywhere(want: np.ndarray, arrays: Sequence[np.ndarray], backend: str) -> np.ndarray:
    """Where XLA's flushing decides (a subnormal input or result); every input's subnormal counts, per result."""
    if backend not in FLUSHES_SUBNORMALS:
        return np.zeros(want.shape, bool)
    inputs = any(bool(subnormal([a], np.float32).any()) for a in arrays)
    return np.broadcast_to(inputs, want.shape) | subnormal([want], np.float32)


def _message(quantity: Quantity, backend: str, bits: _Bits, worse: Worse) -> str:
    where = f"{quantity.label} in float32 ({backend})"
    autodiff = f"autodiff of the forward body {worse.autodiff_bits:.1f}"
    if worse.point is None:
        return f"{where}: {worse.generated_bits:.1f} bits of error on average, {autodiff}"
    sizes = np.cumsum([len(g) for g in bits.generated])
    k = int(np.searchsorted(sizes, worse.point, side="right"))
    described, values = bits.where[k]
    near = f" (inputs from {values.min():.6g} to {values.max():.6g})" if values.size else ""
    return f"{where}: {worse.generated_bits:.1f} bits of error at {described}{near}, {autodiff}"
