"""Stage 6: check generated rules against the mathematics and against each other.

Every rule is built, imported and exercised in float64 at seeded random
points of its inputs' domains: values against the other backend and against
mpmath, derivatives against finite differences, JVP against VJP, each
backend's JVP and VJP against the other's, second order, the frameworks'
transforms, broadcasting, float32, and the rule's own `checks.points`.  Each
check reports pass, fail with the numbers, or n/a with the reason; an
exception inside a check is a failure of that check, never of the run.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import functools
import importlib
import json
import logging
import math
import multiprocessing
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np

from rulegen import names
from rulegen.build import available_cores
from rulegen.spec import Input, Returned, Rule, SnippetBody, Structured, SympyBody

CHECKS = (
    "forward",
    "mpmath",
    "wide",
    "jvp_fd",
    "vjp_dot",
    "cross_backend",
    "second_order",
    "transforms_jax",
    "transforms_torch",
    "broadcast",
    "float32",
    "low_precision",
    "dtype",
    "scalars",
    "points",
    "structures",
    "compile",
    "durability",
)
Status = Literal["pass", "fail", "n/a"]
RTOL, ATOL = 1e-7, 1e-9
_NUMPY_DTYPES = {"float": np.float64, "int": np.int64, "bool": np.bool_}


@dataclass(frozen=True)
class Outcome:
    rule: str
    check: str
    status: Status
    detail: str = ""


class CheckFailed(Exception):
    """A check's finding, with the numbers that show it."""


class NotApplicable(Exception):
    """Why a check says nothing about this rule."""


def compare(
    name: str,
    got: Any,
    expected: Any,
    rtol: float,
    atol: float,
    where: Callable[[tuple[int, ...], tuple[int, ...]], str] | None = None,
) -> None:
    """Fail with where and by how much `got` differs from `expected`.

    `where(index, shape)` names the inputs at the index of the worst entry
    (`_Subject.where`): the message then says `at x=0.5, y=2 (index (1,))`.
    """
    # Complex values are compared as complex numbers: |got - expected| against |expected|.
    kind = np.complex128 if np.iscomplexobj(got) or np.iscomplexobj(expected) else np.float64
    got_a = np.asarray(got, dtype=kind)
    exp_a = np.asarray(expected, dtype=kind)
    if got_a.shape != exp_a.shape:
        raise CheckFailed(f"{name}: shape {got_a.shape}, expected {exp_a.shape}")
    # Equal infinities agree (inf - inf is nan), and so do two nans.
    same = (got_a == exp_a) | (np.isnan(got_a) & np.isnan(exp_a))
    with np.errstate(invalid="ignore"):
        close = np.isfinite(exp_a) & (np.abs(got_a - exp_a) <= atol + rtol * np.abs(exp_a))
        bad = ~same & ~close
    if bad.any():
        index = np.unravel_index(int(np.argmax(np.where(bad, np.abs(got_a - exp_a), -1.0))), bad.shape)
        error = np.abs(got_a - exp_a)[index]
        position = tuple(int(i) for i in index)
        inputs = where(position, got_a.shape) if where is not None else ""
        at = f"at {inputs} (index {position})" if inputs else f"at index {position}"
        raise CheckFailed(
            f"{name}: {at} expected {exp_a[index]:.17g}, "
            f"got {got_a[index]:.17g} (abs error {error:.3g}; {int(bad.sum())} of {bad.size} entries off)"
        )


def _number(value: complex) -> str:
    """A sum for a message: a real one as a float, all its digits."""
    return f"{value.real:.17g}" if value.imag == 0 else f"{value:.17g}"


def _to_numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):
        return value.detach().numpy(force=True)
    return np.asarray(value)


@dataclass
class _Subject:
    """One rule with its two implementations and a sample point."""

    rule: Rule
    jax_fn: Callable[..., Any]
    torch_fn: Callable[..., Any]
    values: list[Any]  # every argument, numpy arrays for arrays
    diff: list[int]  # positions of differentiable inputs
    outputs: list[int]  # positions of differentiable outputs
    rtol: float
    atol: float
    rng: np.random.Generator
    no_forward_mode: dict[str, str] = dataclasses.field(default_factory=dict)
    elementwise: bool = True
    note: str = ""
    known: tuple[str, ...] = ()  # the rules of the build, which bodies may call
    seed: int = 0

    @property
    def jax_forward_mode(self) -> bool:
        return "jax" not in self.no_forward_mode

    @property
    def torch_forward_mode(self) -> bool:
        return "torch" not in self.no_forward_mode

    def skipped(self, part: str) -> bool:
        """Whether the rule's `checks.skip` names this part of a check (e.g. `vmap`)."""
        return part in self.rule.checks.skip

    def bound(self, fn: Callable[..., Any], convert: Callable[[Any], Any]) -> Callable[..., tuple[Any, ...]]:
        """`fn` as a function of the differentiable inputs, returning the differentiable outputs.

        The other arrays are converted here, once: inside a function Dynamo
        traces under torch.func, `torch.from_numpy` of a constant trips its
        guards ("Guard failed on the same frame it was created").
        """
        base = [convert(v) if isinstance(v, np.ndarray) else v for v in self.values]

        def f(*xs: Any) -> tuple[Any, ...]:
            full = list(base)
            for k, x in zip(self.diff, xs, strict=True):
                full[k] = x
            out = fn(*full)
            outs = out if isinstance(out, tuple) else (out,)
            return tuple(outs[k] for k in self.outputs)

        return f

    def jax_f(self, *xs: Any) -> tuple[Any, ...]:
        import jax.numpy as jnp

        return self.bound(self.jax_fn, jnp.asarray)(*xs)

    def torch_f(self, *xs: Any) -> tuple[Any, ...]:
        import torch

        return self.bound(self.torch_fn, torch.from_numpy)(*xs)

    def xs(self) -> list[np.ndarray]:
        return [self.values[k] for k in self.diff]

    # Every message names inputs, outputs and partials as the rule does, never by position.

    def output_name(self, k: int) -> str:
        """The k-th differentiable output's name: the k-th result of `jax_f` and `torch_f`."""
        return self.rule.outputs[self.outputs[k]].name

    def input_name(self, k: int) -> str:
        """The k-th differentiable input's name: the k-th argument of `jax_f` and `torch_f`."""
        return self.rule.inputs[self.diff[k]].name

    def partial(self, k: int) -> str:
        """The k-th gradient the checks take (of the differentiable outputs' sum) by name: `dout/dy`."""
        outputs = [self.rule.outputs[o].name for o in self.outputs]
        total = outputs[0] if len(outputs) == 1 else f"({' + '.join(outputs)})"
        return f"d{total}/d{self.input_name(k)}"

    def where(self, index: tuple[int, ...] = (), shape: tuple[int, ...] = ()) -> str:
        """Every array input's value by name (`x=23.3, y=1`), at `index` of their broadcast to `shape`.

        "" where the inputs do not broadcast to `shape` (a Jacobian's block,
        a reduction's result): the index alone then says where.
        """
        named = []
        for value, spec in zip(self.values, self.rule.inputs, strict=True):
            if spec.static or not isinstance(value, np.ndarray):
                continue
            try:
                entry = np.broadcast_to(value, shape)[index]
            except (ValueError, IndexError):
                return ""
            named.append(f"{spec.name}={entry:.8g}" if entry.dtype.kind in "fc" else f"{spec.name}={entry}")
        return ", ".join(named)

    def positions(self) -> str:
        """What the frameworks' own checks (gradcheck) number: `output 0 = out, input 1 = y`."""
        outputs = [f"output {k} = {self.output_name(k)}" for k in range(len(self.outputs))]
        return ", ".join([*outputs, *(f"input {k} = {self.input_name(k)}" for k in range(len(self.diff)))])

    def at_first(self, mask: np.ndarray) -> str:
        """` at x=.., y=..`: the inputs where `mask` (shaped like a result) first holds, or ""."""
        found = np.argwhere(mask)
        inputs = self.where(tuple(int(i) for i in found[0]), mask.shape) if len(found) else ""
        return f" at {inputs}" if inputs else ""

    def compare(self, name: str, got: Any, expected: Any, rtol: float, atol: float) -> None:
        """`compare` naming the inputs where `got` is off."""
        compare(name, got, expected, rtol, atol, self.where)


def _sample(rule: Rule, rng: np.random.Generator) -> list[Any]:
    given: dict[str, Any] = {}
    if isinstance(rule.checks.sample, SnippetBody) and rule.checks.sample.numpy is not None:
        namespace: dict[str, Any] = {"np": np, "rng": rng}
        body = "def _sample(rng):\n" + "".join(f"    {line}\n" for line in rule.checks.sample.numpy.value.splitlines())
        exec(compile(body, f"<{rule.name} checks.sample>", "exec"), namespace)
        given = dict(namespace["_sample"](rng))
    values: list[Any] = []
    for spec in rule.inputs:
        if spec.name in given:
            value = given[spec.name]
            values.append(np.asarray(value, dtype=np.float64) if spec.dtype == "float" and not spec.static else value)
        elif spec.static:
            if spec.has_default:
                values.append(spec.default)
            elif rule.checks.points and spec.name in rule.checks.points[0].at:
                values.append(rule.checks.points[0].at[spec.name])
            else:
                raise NotApplicable(f"static input {spec.name!r} has no default, point or sample")
        else:
            values.append(_draw(spec, rng))
    if rule.domain is not None:
        _meet_joint_domain(rule, values, {spec.name for spec in rule.inputs if spec.name not in given}, rng)
    return values


def _draw(spec: Input, rng: np.random.Generator) -> Any:
    """Random values of an array input inside its domain."""
    lo, hi = spec.interval
    lo = lo if math.isfinite(lo) else (hi - 6 if math.isfinite(hi) else -3.0)
    hi = hi if math.isfinite(hi) else lo + 6
    margin = 0.02 * (hi - lo)
    if spec.dtype == "float":
        return rng.uniform(lo + margin, hi - margin, size=spec.shape)
    if spec.dtype == "complex":
        # The domain bounds the real and the imaginary part: a square of the complex plane.
        parts = rng.uniform(lo + margin, hi - margin, size=(2, *spec.shape))
        return parts[0] + 1j * parts[1]
    if spec.dtype == "bool":
        return rng.random(size=spec.shape) < 0.5
    return rng.integers(int(lo), int(hi) + 1, size=spec.shape)


#: Draws of the inputs before a rule's joint `domain` condition is given up on.
_JOINT_DOMAIN_DRAWS = 200


def joint_domain(rule: Rule) -> Callable[..., Any] | None:
    """The rule's `domain` condition on several inputs as a numpy function of every input; None if it has none."""
    import sympy

    from rulegen.expr import parse_expression
    from rulegen.symbols import symbols_of

    if rule.domain is None:
        return None
    symbols = symbols_of(rule)
    indicator = parse_expression(rule.domain.value, symbols, rule.domain.loc, indicator=True)
    return sympy.lambdify([symbols[i.name] for i in rule.inputs], indicator, modules="numpy")


def _meet_joint_domain(rule: Rule, values: list[Any], drawn: set[str], rng: np.random.Generator) -> None:
    """Redraw, in place, the inputs drawn here at the sampled points where the rule's `domain` condition fails."""
    condition = joint_domain(rule)
    assert condition is not None
    arrays = [k for k, spec in enumerate(rule.inputs) if spec.name in drawn and not spec.static]
    for _ in range(_JOINT_DOMAIN_DRAWS):
        with np.errstate(all="ignore"):
            holds = np.asarray(condition(*values)) > 0.5
        if holds.all():
            return
        for k in arrays:
            fresh = _draw(rule.inputs[k], rng)
            failing = np.broadcast_to(~holds, np.shape(values[k])) if holds.ndim <= np.ndim(values[k]) else None
            values[k] = fresh if failing is None else np.where(failing, fresh, values[k])
    raise NotApplicable(
        f"the rule's domain `{rule.domain}` held at too few of the points drawn from its inputs' domains"
    )


_DERIVED: dict[tuple[str, ...], Any] = {}


def _derived(rule: Rule, known: tuple[str, ...]) -> Any:
    """The rule's derivation, once per rule and set of known rules."""
    from rulegen.derive import derive_rule

    key = (rule.source, rule.name, rule.source_hash, *known)
    if key not in _DERIVED:
        _DERIVED[key] = derive_rule(rule, known)
    return _DERIVED[key]


def _forward_modes(rule: Rule, known: Sequence[str]) -> tuple[dict[str, str], bool]:
    """Why each backend has no forward mode (absent: it has one), and whether the rule is elementwise."""
    from rulegen.snippet import SnippetDerivation

    derivation = _derived(rule, tuple(sorted(known)))
    elementwise = not isinstance(derivation, SnippetDerivation) or (
        derivation.forward["torch"].kind == "sympy" or (derivation.host and rule.batching == "elementwise")
    )
    return dict(derivation.routes.no_forward_mode), elementwise


def _pointwise(s: _Subject) -> None:
    """Fall back to one point of the sample when the rule does not take the sample's arrays whole.

    A rule whose bodies are scalar code (a `lax.while_loop` on a scalar
    condition) cannot run on a sample of several points; its derivatives
    are then checked at the first point of each array.
    """
    import jax.numpy as jnp
    import torch

    try:
        s.jax_fn(*[jnp.asarray(v) if isinstance(v, np.ndarray) else v for v in s.values])
        s.torch_fn(*[torch.from_numpy(v) if isinstance(v, np.ndarray) else v for v in s.values])
    except Exception as exc:
        arrays = [v for v in s.values if isinstance(v, np.ndarray)]
        if not arrays or any(v.ndim != 1 or len(v) != len(arrays[0]) for v in arrays) or s.elementwise:
            raise
        s.values = [np.asarray(v[0]) if isinstance(v, np.ndarray) else v for v in s.values]
        s.note = f" (at one point of the sample: the rule raised {type(exc).__name__} on the whole sample)"


def _subject(rule: Rule, jax_pkg: Any, torch_pkg: Any, seed: int, known: Sequence[str] = ()) -> _Subject:
    rng = np.random.default_rng([seed, *rule.name.encode()])
    tolerance = rule.checks.tolerance
    no_forward_mode, elementwise = _forward_modes(rule, known or [rule.name])
    subject = _Subject(
        rule=rule,
        jax_fn=flat_call(rule, getattr(jax_pkg, rule.name)),
        torch_fn=flat_call(rule, getattr(torch_pkg, rule.name)),
        values=_sample(rule, rng),
        diff=[k for k, i in enumerate(rule.inputs) if i.differentiable],
        outputs=[k for k, o in enumerate(rule.outputs) if o.differentiable],
        rtol=tolerance.rtol if tolerance else RTOL,
        atol=tolerance.atol if tolerance else ATOL,
        rng=rng,
        no_forward_mode=no_forward_mode,
        elementwise=elementwise,
        known=tuple(sorted(known or [rule.name])),
        seed=seed,
    )
    if rule.checks.sample is not None:
        _pointwise(subject)
    return subject


def flat_call(rule: Rule, fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn`, a rule's public function, as a function of the rule's inputs returning its outputs in order.

    A structured rule's function takes named tuples, dicts and tuples and
    returns its structure: every check calls it through this, so the
    structures' code is checked with the rest, and a result of another
    structure than the rule's fails.
    """
    if not rule.structured:
        return fn

    def call(*values: Any) -> Any:
        arguments = structured_arguments(rule, values)
        found = fn(*arguments)
        if rule.returns is None:
            return found
        by_name = dict(_returned_leaves(rule.returns, found, "the result"))
        flat = tuple(by_name[o.name] for o in rule.outputs)
        return flat if len(flat) > 1 else flat[0]

    return call


_FIELD_TYPES: dict[tuple[str, ...], type] = {}
_LEFT_OUT = object()


def structured_arguments(rule: Rule, values: Sequence[Any]) -> list[Any]:
    """The public function's arguments for the rule's `values`: structures built around them.

    `values` has one per input, or fewer: the inputs left out take their defaults.
    """
    pending = iter(values)
    arguments: list[Any] = []
    for p in rule.parameters:
        if not isinstance(p, Structured):
            value = next(pending, _LEFT_OUT)
            if value is _LEFT_OUT:
                break
            arguments.append(value)
            continue
        leaves = {i.dict_key if p.kind == "keys" else i.name: next(pending) for i in p.leaves}
        if p.kind == "fields":
            key = (names.camel_case(p.name), *leaves)
            if key not in _FIELD_TYPES:
                _FIELD_TYPES[key] = collections.namedtuple(key[0], list(leaves))
            arguments.append(_FIELD_TYPES[key](**leaves))
        else:
            arguments.append(leaves if p.kind == "keys" else tuple(leaves.values()))
    return arguments


def _returned_leaves(returned: Returned, value: Any, where: str) -> Iterator[tuple[str, Any]]:
    """(output, its value) for each output in `value`, which must have the structure `returned` declares."""
    if returned.kind == "output":
        yield returned.name, value
        return
    if returned.kind == "tuple":
        if not isinstance(value, tuple) or len(value) != len(returned.items):
            raise CheckFailed(f"{where} is {type(value).__name__}, not a tuple of {len(returned.items)}")
        for k, ((_, item), part) in enumerate(zip(returned.items, value, strict=True)):
            yield from _returned_leaves(item, part, f"{where}[{k}]")
        return
    if returned.kind == "namedtuple":
        fields = [field for field, _ in returned.items]
        if type(value).__name__ != returned.name or getattr(value, "_fields", None) != tuple(fields):
            raise CheckFailed(f"{where} is {type(value).__name__}, not a named tuple {returned.name}{tuple(fields)}")
        for (field, item), part in zip(returned.items, value, strict=True):
            yield from _returned_leaves(item, part, f"{where}.{field}")
        return
    keys = [key for key, _ in returned.items]
    if not isinstance(value, dict) or list(value) != keys:
        raise CheckFailed(f"{where} is {type(value).__name__}, not a dict with keys {keys}")
    for key, item in returned.items:
        yield from _returned_leaves(item, value[key], f"{where}[{key!r}]")


def _normal_like(rng: np.random.Generator, value: Any) -> np.ndarray:
    """Standard normal numbers shaped like `value`: complex ones (both parts normal) for a complex value."""
    if np.iscomplexobj(value):
        return rng.standard_normal(np.shape(value)) + 1j * rng.standard_normal(np.shape(value))
    return rng.standard_normal(np.shape(value))


def _tangents(s: _Subject) -> list[np.ndarray]:
    return [_normal_like(s.rng, x) for x in s.xs()]


def _cotangents(s: _Subject, outs: Sequence[Any]) -> list[np.ndarray]:
    return [_normal_like(s.rng, _to_numpy(o)) for o in outs]


def _jvp_jax(s: _Subject, xs: Sequence[Any], ts: Sequence[Any]) -> list[np.ndarray]:
    import jax
    import jax.numpy as jnp

    _, out = jax.jvp(s.jax_f, [jnp.asarray(x) for x in xs], [jnp.asarray(t) for t in ts])
    return [_to_numpy(o) for o in out]


def _jvp_torch(s: _Subject, xs: Sequence[Any], ts: Sequence[Any]) -> list[np.ndarray]:
    import torch

    out = torch.func.jvp(s.torch_f, tuple(map(torch.from_numpy, xs)), tuple(map(torch.from_numpy, ts)))[1]
    return [_to_numpy(o) for o in out]


def _vjp_jax(s: _Subject, xs: Sequence[Any], cs: Sequence[Any]) -> list[np.ndarray]:
    import jax
    import jax.numpy as jnp

    _, pullback = jax.vjp(s.jax_f, *[jnp.asarray(x) for x in xs])
    return [_to_numpy(g) for g in pullback(tuple(jnp.asarray(c) for c in cs))]


def _vjp_torch(s: _Subject, xs: Sequence[Any], cs: Sequence[Any]) -> list[np.ndarray]:
    """torch's VJP, in JAX's convention (the transpose J^T c) wherever the two differ.

    For complex values torch's backward gives the conjugate Wirtinger
    gradient, conj(J^T conj(c)): the checks read it back through that
    relation, so a backward that forgets to conjugate disagrees with JAX.
    """
    import torch

    pullback = torch.func.vjp(s.torch_f, *map(torch.from_numpy, xs))[1]
    if not s.rule.complex:
        return [_to_numpy(g) for g in pullback(tuple(map(torch.from_numpy, cs)))]
    grads = pullback(tuple(torch.from_numpy(np.conj(c)) for c in cs))
    return [np.conj(_to_numpy(g)) for g in grads]


def _finite_difference(
    f: Callable[..., Sequence[Any]], xs: Sequence[np.ndarray], ts: Sequence[np.ndarray], width: float
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Directional derivative by Richardson-extrapolated central differences, and its error estimate.

    With step h ~ eps**(1/5) the truncation error of the extrapolated
    difference is O(h**4) and the rounding error O(eps / h): both near
    1e-12 relative for smooth functions in float64.  The step never
    exceeds a thousandth of the narrowest input domain, so that it stays
    inside the region the rule is meant for.

    The error estimate of each entry is how far two extrapolations (steps
    h, h/2 and h/2, h/4) are apart: O(h**4) where the function is smooth
    between the points, O(h) or more where a kink (a Piecewise or `where`
    switching branch, an `Abs`) lies within the step.
    """
    scale = max(1.0, max(float(np.max(np.abs(x))) if np.size(x) else 0.0 for x in xs))
    h = 1e-3 * min(scale, width)

    def central(step: float) -> list[np.ndarray]:
        plus = f(*[x + step * t for x, t in zip(xs, ts, strict=True)])
        minus = f(*[x - step * t for x, t in zip(xs, ts, strict=True)])
        return [(_to_numpy(p) - _to_numpy(m)) / (2 * step) for p, m in zip(plus, minus, strict=True)]

    coarse, fine, finest = central(h), central(h / 2), central(h / 4)
    extrapolated = [(4 * b - a) / 3 for a, b in zip(coarse, fine, strict=True)]
    refined = [(4 * c - b) / 3 for b, c in zip(fine, finest, strict=True)]
    with np.errstate(invalid="ignore"):
        error = [np.abs(r - e) for e, r in zip(extrapolated, refined, strict=True)]
    return extrapolated, error


def _smooth_entries(
    fd: Sequence[np.ndarray], error: Sequence[np.ndarray], rtol: float, atol: float
) -> list[np.ndarray]:
    """Per output, the entries whose difference can judge a JVP: their error estimate within half the tolerance."""
    with np.errstate(invalid="ignore"):
        return [
            ~(e > 0.1 * (atol * max(1.0, float(np.max(np.abs(w), initial=0.0))) + rtol * np.abs(w)))
            for w, e in zip(fd, error, strict=True)
        ]


def _domain_width(s: _Subject) -> float:
    widths = [hi - lo for i in s.rule.inputs if i.differentiable for lo, hi in [i.interval]]
    return min((w for w in widths if math.isfinite(w)), default=1.0)


def _numpy_forward(s: _Subject) -> Callable[..., list[np.ndarray]]:
    return lambda *xs: [_to_numpy(o) for o in s.jax_f(*xs)]


# ---------------------------------------------------------------- the checks


def check_forward(s: _Subject) -> str:
    import jax.numpy as jnp
    import torch

    jout = s.jax_fn(*[jnp.asarray(v) if isinstance(v, np.ndarray) else v for v in s.values])
    tout = s.torch_fn(*[torch.from_numpy(v) if isinstance(v, np.ndarray) else v for v in s.values])
    jouts = jout if isinstance(jout, tuple) else (jout,)
    touts = tout if isinstance(tout, tuple) else (tout,)
    if len(jouts) != len(rule_outputs := s.rule.outputs) or len(touts) != len(rule_outputs):
        raise CheckFailed(f"expected {len(rule_outputs)} outputs, got {len(jouts)} (jax) and {len(touts)} (torch)")
    for o, a, b in zip(rule_outputs, jouts, touts, strict=True):
        jax_value, torch_value = _to_numpy(a), _to_numpy(b)
        # Equal values of another kind (an int output a float in one backend) are a different result.
        if jax_value.dtype.kind != torch_value.dtype.kind:
            raise CheckFailed(f"output {o.name}: torch gives {b.dtype}, jax {a.dtype}")
        s.compare(f"output {o.name}: torch vs jax", torch_value, jax_value, s.rtol, s.atol)
    return f"{len(rule_outputs)} output(s) agree"


def check_mpmath(s: _Subject) -> str:
    import mpmath
    import sympy

    from rulegen.derive import derive_rule, symbols_of
    from rulegen.functions import MPMATH_IMPLEMENTATIONS
    from rulegen.snippet import SnippetDerivation

    if not isinstance(s.rule.forward, SympyBody):
        raise NotApplicable("the forward is a snippet, not a sympy expression")
    derivation = derive_rule(s.rule, [s.rule.name])
    if isinstance(derivation, SnippetDerivation):
        code = derivation.forward["jax"]
        forward_exprs = tuple(zip(code.results, code.exprs, strict=True))
        symbols_by_name = symbols_of(s.rule)
    else:
        forward_exprs = derivation.forward
        symbols_by_name = dict(derivation.symbols)
    names = [i.name for i in s.rule.inputs]
    symbols = [symbols_by_name[n] for n in names]
    jouts = s.jax_fn(*s.values)
    jouts = jouts if isinstance(jouts, tuple) else (jouts,)
    # mpmath's complex numbers (mpc) where the rule's are complex.
    kind, number, result = (complex, mpmath.mpc, complex) if s.rule.complex else (float, mpmath.mpf, float)
    arrays = np.broadcast_arrays(
        *[np.asarray(v, dtype=kind) for v, i in zip(s.values, s.rule.inputs, strict=True) if not i.static]
    )
    count = min(8, arrays[0].size if arrays else 1)
    for (name, expr), got in zip(forward_exprs, jouts, strict=True):
        fn = sympy.lambdify(symbols, expr, modules=[dict(MPMATH_IMPLEMENTATIONS), "mpmath"])
        got_flat = np.broadcast_to(_to_numpy(got), arrays[0].shape).ravel() if arrays else np.ravel(got)
        flat = [a.ravel() for a in arrays]
        expected = []
        with mpmath.workdps(40):
            for j in range(count):
                columns = iter(flat)
                args = [
                    v if spec.static else number(kind(next(columns)[j]))
                    for v, spec in zip(s.values, s.rule.inputs, strict=True)
                ]
                expected.append(result(fn(*args)))
        compare(f"output {name} vs mpmath", got_flat[:count], np.array(expected), max(s.rtol, 1e-12), s.atol)
    return f"{count} points agree with a 40-digit evaluation"


# Points far outside any sample domain: no integers (floor's and ceiling's kinks).
WIDE_POINTS = (-1.0e4 - 0.3, -117.3, -23.7, -0.61, 0.73, 23.3, 117.1, 1.0e4 + 0.3)
_FLOAT32_MAX, _TINY = float(np.finfo(np.float32).max), 1e-300


def _sympy_forward(s: _Subject) -> tuple[list[Any], list[tuple[str, Any]]]:
    """The rule's inputs as sympy symbols and its forward expressions, for a high-precision reference."""
    from rulegen.derive import derive_rule, symbols_of
    from rulegen.snippet import SnippetDerivation

    derivation = derive_rule(s.rule, [s.rule.name])
    if isinstance(derivation, SnippetDerivation):
        code = derivation.forward["jax"]
        return [symbols_of(s.rule)[i.name] for i in s.rule.inputs], list(zip(code.results, code.exprs, strict=True))
    return [derivation.symbols[i.name] for i in s.rule.inputs], list(derivation.forward)


def _lambdified_derivative(total: Any, x: Any, symbols: list[Any], modules: list[Any]) -> Callable[..., Any] | None:
    """d total / dx for mpmath, floor and ceiling differentiated to 0 as the frameworks do; None if sympy cannot."""
    import sympy

    derivative = sympy.diff(total, x).replace(
        lambda e: isinstance(e, sympy.Derivative) and isinstance(e.expr, sympy.floor | sympy.ceiling),
        lambda e: sympy.S.Zero,
    )
    if derivative.has(sympy.Derivative):
        return None
    return sympy.lambdify(symbols, derivative, modules=modules)


_ASSUMED_SIGN = {
    "positive": lambda v: v > 0,
    "nonnegative": lambda v: v >= 0,
    "negative": lambda v: v < 0,
    "nonpositive": lambda v: v <= 0,
    "nonzero": lambda v: v != 0,
}


def _wide_point(s: _Subject, c: float) -> list[Any] | None:
    """Every float array input near `c`, each a little apart (ties are kinks of Max, Min and comparisons).

    None where an input would break what the rule assumes of it (`assume:`):
    calls there are the caller's error.
    """
    values, k = [], 0
    for v, spec in zip(s.values, s.rule.inputs, strict=True):
        if spec.static:
            values.append(v)
        elif spec.dtype == "float":
            value = c * (1 + 0.137 * k)
            if not all(_ASSUMED_SIGN[a](value) for a in spec.assume):
                return None
            values.append(np.asarray(value, dtype=np.float64))
            k += 1
        else:
            values.append(np.asarray(np.ravel(v)[0]))
    return values


def _reference(fn: Callable[..., Any], values: Sequence[Any], rule: Rule) -> float | None:
    """`fn` at `values` with 40 digits, or None where it is not a finite real number float64 can hold."""
    import mpmath

    args = [v if spec.static else mpmath.mpf(float(v)) for v, spec in zip(values, rule.inputs, strict=True)]
    try:
        with mpmath.workdps(40):
            value = fn(*args)
            if not mpmath.isfinite(value) or mpmath.im(value) != 0:
                return None
            value = float(mpmath.re(value))
    except (ValueError, ZeroDivisionError, TypeError, OverflowError):
        return None
    return value if abs(value) < 1e300 and (value == 0 or abs(value) > _TINY) else None


def check_wide(s: _Subject) -> str:
    """The generated code on the whole real line, not only on the sample domain.

    At points far outside any domain (±0.61 to ±1e4), where the forward is
    a finite real number: the value and the gradient in float64 against a
    40-digit evaluation of the forward and of its sympy derivative, and in
    float32 finite wherever float32 can hold the exact value.  A simplification
    right only on the domain (atan2 made atan) or a derivative that overflows
    (exp(x) / (1 + exp(x)) at x = 100 in float32) fails here.
    """
    import sympy

    if s.rule.complex:
        raise NotApplicable(
            "it probes the real line far from the domain; a complex rule is checked on its square of the plane"
        )

    from rulegen.functions import MPMATH_IMPLEMENTATIONS

    if not isinstance(s.rule.forward, SympyBody):
        raise NotApplicable("the forward is a snippet, not a sympy expression")
    symbols, forward = _sympy_forward(s)
    modules = [dict(MPMATH_IMPLEMENTATIONS), "mpmath"]
    diff_names = {s.rule.outputs[k].name for k in s.outputs}
    total = sum((e for n, e in forward if n in diff_names), sympy.S.Zero)
    values_fn = [sympy.lambdify(symbols, e, modules=modules) for _, e in forward]
    derivative = s.rule.checks.true_derivative and s.diff
    maybe = [_lambdified_derivative(total, symbols[k], symbols, modules) for k in s.diff] if derivative else []
    # A derivative sympy leaves unevaluated: the values alone.
    grads_fn = [g for g in maybe if g is not None] if None not in maybe else []
    found = []
    for c in WIDE_POINTS:
        values = _wide_point(s, c)
        if values is None:
            continue
        point = dataclasses.replace(s, values=values)
        refs = [r for f in values_fn if (r := _reference(f, point.values, s.rule)) is not None]
        grads = [g for f in grads_fn if (g := _reference(f, point.values, s.rule)) is not None]
        if len(refs) == len(values_fn) and len(grads) == len(grads_fn):
            found.append((c, point, refs, grads))
    if not found:
        raise NotApplicable("the forward is no finite real number at any of the wide points")
    # Errors are measured against the largest magnitude each takes on these
    # points: a tail value of 1e-121 (gelu's derivative at -23.7) comes out
    # of a cancellation that neither the code nor a 40-digit reference resolves.
    scales = np.max(np.abs([[*refs, *grads] for _, _, refs, grads in found]), axis=0)
    for _, point, refs, grads in found:
        _wide_compare(point, refs, grads, scales)
    return f"{len(found)} of {len(WIDE_POINTS)} wide points (±0.61 to ±1e4) hold in float64, and finite in float32"


def _wide_compare(point: _Subject, refs: list[float], grads: list[float], scales: np.ndarray) -> None:
    """A point's float64 values and gradients against the references, and float32 finiteness."""
    import jax
    import jax.numpy as jnp

    xs = point.xs()
    at = point.where()
    jouts = point.jax_fn(*[jnp.asarray(v) if isinstance(v, np.ndarray) else v for v in point.values])
    jouts = jouts if isinstance(jouts, tuple) else (jouts,)
    for k, (o, r) in enumerate(zip(jouts, refs, strict=True)):
        name = point.rule.outputs[k].name
        compare(f"at {at}: jax output {name} vs 40 digits", _to_numpy(o), np.asarray(r), 1e-8, 1e-9 * scales[k])
    for backend in ("jax", "torch") if grads else ():
        got = [_point_grad(point, backend, j) for j in range(len(xs))]
        for j, (g, r) in enumerate(zip(got, grads, strict=True)):
            scale = scales[len(refs) + j]
            compare(
                f"at {at}: {backend} gradient {point.partial(j)} vs 40 digits", g, np.asarray(r), 1e-7, 1e-8 * scale
            )
    representable = all(abs(r) < _FLOAT32_MAX for r in (*refs, *grads))
    if not representable:
        return
    f32 = dataclasses.replace(
        point,
        values=[
            v.astype(np.float32) if isinstance(v, np.ndarray) and v.dtype == np.float64 else v for v in point.values
        ],
    )
    for backend in ("jax", "torch"):
        outs = (
            f32.jax_f(*[jnp.asarray(x) for x in f32.xs()])
            if backend == "jax"
            else f32.torch_f(*[__import__("torch").from_numpy(x) for x in f32.xs()])
        )
        if not all(np.isfinite(_to_numpy(o)).all() for o in outs):
            exact = ", ".join(f"{o.name} = {r:.8g}" for o, r in zip(point.rule.outputs, refs, strict=False))
            raise CheckFailed(f"at {at}: {backend} float32 value is not finite where the exact one is {exact}")
        if grads:
            got = [_point_grad(f32, backend, j) for j in range(len(xs))]
            if not all(np.isfinite(g).all() for g in got):
                found = ", ".join(
                    f"{point.partial(j)} = {g.item():.8g} (exactly {r:.8g})"
                    for j, (g, r) in enumerate(zip(got, grads, strict=True))
                )
                raise CheckFailed(f"at {at}: {backend} float32 gradient {found}")
    del jax


def _true_derivative(s: _Subject) -> None:
    if not s.rule.checks.true_derivative:
        raise NotApplicable("the rule's derivative deliberately differs from the forward's (true_derivative: false)")
    if not s.diff:
        raise NotApplicable("no differentiable input")


def check_jvp_fd(s: _Subject) -> str:
    _true_derivative(s)
    rtol, atol = max(s.rtol, 1e-6), max(s.atol, 1e-8)
    backends = []
    if s.jax_forward_mode:
        backends.append(("jax", _jvp_jax))
    if s.torch_forward_mode:
        backends.append(("torch", _jvp_torch))
    if not backends:
        raise NotApplicable(f"no forward mode in either backend: {s.no_forward_mode['torch']}")
    for attempt in range(3):
        xs, ts = s.xs(), _tangents(s)
        fd, error = _finite_difference(_numpy_forward(s), xs, ts, _domain_width(s))
        smooth = _smooth_entries(fd, error, rtol, atol)
        # Within a difference step of a kink the differences judge nothing: those entries are
        # skipped, and a sample with more of them than smooth ones drawn again.
        kept, total = sum(int(m.sum()) for m in smooth), sum(m.size for m in smooth)
        if kept * 2 < total and (attempt < 2 or not kept):
            s.values = _sample(s.rule, s.rng)
            continue
        for backend, jvp in backends:
            for k, (got, want, ok) in enumerate(zip(jvp(s, xs, ts), fd, smooth, strict=True)):
                scale = max(1.0, float(np.max(np.abs(want))) if want.size else 0.0)
                got_a = np.asarray(got)
                if got_a.shape == want.shape:  # else compare says so; skipped entries compare equal
                    got_a, want = np.where(ok, got_a, 0), np.where(ok, want, 0)
                s.compare(
                    f"{backend} JVP of output {s.output_name(k)} vs finite differences", got_a, want, rtol, atol * scale
                )
        skipped = total - kept
        near = f" ({skipped} of {total} entries skipped: a kink lies within the difference step)" if skipped else ""
        return f"{', '.join(b for b, _ in backends)} JVPs agree with finite differences{near}{s.note}"
    raise CheckFailed("no sample point where the forward is smooth within the difference step, in 3 samples")


def check_vjp_dot(s: _Subject) -> str:
    _true_derivative(s)
    xs, ts = s.xs(), _tangents(s)
    done = []
    pairs = []
    if s.jax_forward_mode:
        pairs.append(("jax", _jvp_jax, _vjp_jax))
    if s.torch_forward_mode:
        pairs.append(("torch", _jvp_torch, _vjp_torch))
    if s.torch_forward_mode and not s.jax_forward_mode:
        pairs.append(("jax VJP / torch JVP", _jvp_torch, _vjp_jax))
    if s.jax_forward_mode and not s.torch_forward_mode:
        pairs.append(("torch VJP / jax JVP", _jvp_jax, _vjp_torch))
    if not pairs:
        raise NotApplicable(f"no forward mode in either backend: {s.no_forward_mode['torch']}")
    for backend, jvp, vjp in pairs:
        jt = jvp(s, xs, ts)
        cs = _cotangents(s, jt)
        grads = vjp(s, xs, cs)
        # Bilinear (no conjugate) products: the transpose's identity, complex values included.
        left = sum(complex(np.sum(c * j)) for c, j in zip(cs, jt, strict=True))
        right = sum(complex(np.sum(g * t)) for g, t in zip(grads, ts, strict=True))
        scale = max(1.0, sum(float(np.sum(np.abs(c * j))) for c, j in zip(cs, jt, strict=True)))
        if abs(left - right) > 1e-9 * scale + max(s.atol, 0.0):
            raise CheckFailed(
                f"{backend}: <y_bar, J x_dot> = {_number(left)} but <J^T y_bar, x_dot> = {_number(right)}"
            )
        done.append(backend)
    return f"<y_bar, J x_dot> = <J^T y_bar, x_dot> ({', '.join(done)})"


def check_cross_backend(s: _Subject) -> str:
    if not s.diff:
        raise NotApplicable("no differentiable input")
    xs, ts = s.xs(), _tangents(s)
    compared = []
    if s.jax_forward_mode and s.torch_forward_mode:
        tj = _jvp_torch(s, xs, ts)
        for k, (a, b) in enumerate(zip(_jvp_jax(s, xs, ts), tj, strict=True)):
            s.compare(f"JVP of output {s.output_name(k)}: torch vs jax", b, a, s.rtol, s.atol)
        compared.append("JVP")
    cs = _cotangents(s, [_to_numpy(o) for o in s.jax_f(*xs)])
    for k, (a, b) in enumerate(zip(_vjp_jax(s, xs, cs), _vjp_torch(s, xs, cs), strict=True)):
        s.compare(f"VJP for input {s.input_name(k)}: torch vs jax", b, a, s.rtol, s.atol)
    compared.append("VJP")
    missing = "" if len(compared) == 2 else f" (no JVP to compare: {next(iter(s.no_forward_mode.values()))})"
    return " and ".join(compared) + f" agree{missing}{s.note}"


def _smaller_subject(s: _Subject) -> _Subject:
    """The sample cut to four entries per array when all arrays share a shape: Jacobians stay small."""
    shapes = {np.shape(v) for v in s.values if isinstance(v, np.ndarray)}
    if not s.elementwise or len(shapes) != 1 or not next(iter(shapes)):
        return s
    return dataclasses.replace(s, values=[v.reshape(-1)[:4] if isinstance(v, np.ndarray) else v for v in s.values])


def check_second_order(s: _Subject) -> str:
    import jax.numpy as jnp
    import torch
    from jax.test_util import check_grads

    _true_derivative(s)
    small = _smaller_subject(s)
    leaves = tuple(torch.from_numpy(x).clone().requires_grad_() for x in small.xs())
    try:
        torch.autograd.gradgradcheck(small.torch_f, leaves, raise_exception=True)
    except Exception as exc:
        raise CheckFailed(f"torch gradgradcheck ({s.positions()}): {str(exc)[:600]}") from None
    modes = ["fwd", "rev"] if s.jax_forward_mode else ["rev"]
    try:
        # The derivatives being checked are exact, so the difference step
        # only trades truncation (eps**2) for rounding (1e-16 / eps): 1e-5
        # of the inputs' scale, inside the domain, keeps both below 1e-8.
        scale = max(1.0, max(float(np.mean(np.abs(x))) for x in small.xs()))
        eps = min(1e-5 * scale, 1e-3 * _domain_width(s))
        check_grads(small.jax_f, [jnp.asarray(x) for x in small.xs()], order=2, modes=modes, eps=eps)
    except AssertionError as exc:
        raise CheckFailed(f"jax check_grads(order=2, modes={modes}) ({s.positions()}): {str(exc)[:600]}") from None
    return f"gradgradcheck and check_grads(order=2, modes={modes}) pass"


def _sum_of(f: Callable[..., Sequence[Any]]) -> Callable[..., Any]:
    return lambda *xs: sum(o.sum() for o in f(*xs))


def _jax_grad(s: _Subject, f: Callable[..., Any], argnums: tuple[int, ...]) -> Callable[..., Any]:
    """jax.grad of `f`, a sum of outputs: a complex rule's is the complex derivative (holomorphic)."""
    import jax

    return jax.grad(f, argnums, holomorphic=s.rule.complex)


def _torch_total(s: _Subject, f: Callable[..., Sequence[Any]]) -> Callable[..., Any]:
    """The sum of `f`'s outputs as torch differentiates it: a complex sum has no gradient, its real part has."""
    summed = _sum_of(f)
    return (lambda *xs: summed(*xs).real) if s.rule.complex else summed


def _torch_grads(s: _Subject, total: Any, leaves: Sequence[Any]) -> list[Any]:
    """torch's gradient of `total`, a sum of outputs, in JAX's convention.

    A complex sum has no gradient in torch: its real part has, the conjugate
    of the complex derivative (torch's conjugate Wirtinger convention).
    """
    import torch

    if s.rule.complex:
        grads = torch.autograd.grad(total.real, leaves, allow_unused=True, materialize_grads=True)
        return [g.conj() for g in grads]
    return list(torch.autograd.grad(total, leaves, allow_unused=True, materialize_grads=True))


def _linear_derivative(s: _Subject) -> bool:
    """Whether derivatives obey linearity (grad = summed jacrev rows): not for a deliberate, non-linear VJP."""
    return s.rule.checks.true_derivative


def check_transforms_jax(s: _Subject) -> str:
    import jax
    import jax.numpy as jnp

    small = _smaller_subject(s)
    xs = [jnp.asarray(x) for x in small.xs()]
    if not xs:
        raise NotApplicable("no differentiable input")
    argnums = tuple(range(len(xs)))
    eager = small.jax_f(*xs)
    names = ["jit"]
    for k, (a, b) in enumerate(zip(jax.jit(small.jax_f)(*xs), eager, strict=True)):
        small.compare(f"jit, output {s.output_name(k)}", a, b, s.rtol, s.atol)
    if not s.skipped("vmap"):
        batch = [jnp.stack([x, x * 0.75 + 0.1 * jnp.sign(x)]) for x in xs]
        mapped = jax.vmap(small.jax_f)(*batch)
        for j in range(2):
            looped = small.jax_f(*[b[j] for b in batch])
            for k, (a, b) in enumerate(zip(mapped, looped, strict=True)):
                compare(f"vmap, output {s.output_name(k)}, batch {j}", a[j], b, s.rtol, s.atol)
        names.append("vmap")
    total = _sum_of(small.jax_f)
    # A complex rule's derivatives are complex derivatives: every transform takes holomorphic=True.
    holomorphic = s.rule.complex
    grads = jax.grad(total, argnums, holomorphic=holomorphic)(*xs)
    for k, (a, b) in enumerate(
        zip(jax.jit(jax.grad(total, argnums, holomorphic=holomorphic))(*xs), grads, strict=True)
    ):
        small.compare(f"jit(grad) vs grad, {s.partial(k)}", a, b, s.rtol, s.atol)
    names.append("grad")
    rev = jax.jacrev(small.jax_f, argnums, holomorphic=holomorphic)(*xs)
    if _linear_derivative(s):
        for k, g in enumerate(grads):
            summed = sum(np.sum(_to_numpy(rev[o][k]), axis=tuple(range(np.ndim(eager[o])))) for o in range(len(eager)))
            small.compare(f"grad vs jacrev, {s.partial(k)}", g, summed, s.rtol, s.atol)
    names.append("jacrev")
    if s.jax_forward_mode:
        fwd = jax.jacfwd(small.jax_f, argnums, holomorphic=holomorphic)(*xs)
        for o in range(len(eager)):
            for k in range(len(xs)):
                compare(
                    f"jacfwd vs jacrev, d{s.output_name(o)}/d{s.input_name(k)}", fwd[o][k], rev[o][k], s.rtol, s.atol
                )
        hess = jax.hessian(total, argnums, holomorphic=holomorphic)(*xs)
        hess_rr = jax.jacrev(jax.grad(total, argnums, holomorphic=holomorphic), argnums, holomorphic=holomorphic)(*xs)
        for i in range(len(xs)):
            for k in range(len(xs)):
                compare(
                    f"hessian vs jacrev(grad), block {s.input_name(i)},{s.input_name(k)}",
                    hess[i][k],
                    hess_rr[i][k],
                    max(s.rtol, 1e-9),
                    s.atol,
                )
        names += ["jacfwd", "hessian"]
    else:
        names.append(f"(no jacfwd, hessian: {s.no_forward_mode['jax']})")
    return ", ".join(names) + " consistent" + s.note


def check_transforms_torch(s: _Subject) -> str:
    import torch

    small = _smaller_subject(s)
    xs = tuple(torch.from_numpy(x) for x in small.xs())
    if not xs:
        raise NotApplicable("no differentiable input")
    names = []
    if not s.skipped("vmap"):
        _compare_vmap_torch(s, small, xs)
        names.append("vmap")
    leaves = _compare_grad_torch(s, small, xs)
    names.append("grad")
    # torch.func's jacrev, jacfwd and hessian batch with vmap, and refuse complex inputs.
    batching = not s.skipped("vmap") and not s.rule.complex
    if batching:
        rev = torch.func.jacrev(small.torch_f, tuple(range(len(xs))))(*xs)
        names.append("jacrev")
    if s.torch_forward_mode and batching:
        _compare_forward_mode_torch(s, small, xs, rev)
        names += ["jacfwd", "jvp", "hessian"]
    if _linear_derivative(s):
        _gradcheck_torch(s, small, leaves)
        names.append("gradcheck" + ("" if s.torch_forward_mode else " (reverse mode)"))
    if not s.torch_forward_mode:
        names.append(f"(no jacfwd, jvp, hessian: {s.no_forward_mode['torch']})")
    elif s.rule.complex:
        names.append("(no jacrev, jacfwd, hessian: torch.func's refuse complex inputs)")
    elif not batching:
        names.append(f"(no jacrev, jacfwd, hessian: they use vmap, skipped: {s.rule.checks.skip['vmap']})")
    return ", ".join(names) + " consistent" + s.note


def _compare_vmap_torch(s: _Subject, small: _Subject, xs: tuple[Any, ...]) -> None:
    import torch

    # sgn, the sign of a real number and x / |x| of a complex one.
    batch = tuple(torch.stack([x, x * 0.75 + 0.1 * torch.sgn(x)]) for x in xs)
    mapped = torch.func.vmap(small.torch_f)(*batch)
    for j in range(2):
        looped = small.torch_f(*[b[j] for b in batch])
        for k, (a, b) in enumerate(zip(mapped, looped, strict=True)):
            compare(f"vmap, output {s.output_name(k)}, batch {j}", _to_numpy(a[j]), _to_numpy(b), s.rtol, s.atol)


def _compare_grad_torch(s: _Subject, small: _Subject, xs: tuple[Any, ...]) -> tuple[Any, ...]:
    """torch.func.grad against autograd.grad; the leaves autograd differentiated."""
    import torch

    total = _torch_total(s, small.torch_f)
    grads = torch.func.grad(total, tuple(range(len(xs))))(*xs)
    leaves = tuple(x.clone().requires_grad_() for x in xs)
    autograd = torch.autograd.grad(total(*leaves), leaves, allow_unused=True, materialize_grads=True)
    for k, (a, b) in enumerate(zip(grads, autograd, strict=True)):
        small.compare(f"torch.func.grad vs autograd.grad, {s.partial(k)}", _to_numpy(a), _to_numpy(b), s.rtol, s.atol)
    return leaves


def _compare_forward_mode_torch(s: _Subject, small: _Subject, xs: tuple[Any, ...], rev: Any) -> None:
    """jacfwd against jacrev, jvp against jacfwd, hessian against jacrev of jacrev."""
    import torch

    argnums = tuple(range(len(xs)))
    eager = small.torch_f(*xs)
    fwd = torch.func.jacfwd(small.torch_f, argnums)(*xs)
    for o in range(len(eager)):
        for k in range(len(xs)):
            label = f"jacfwd vs jacrev, d{s.output_name(o)}/d{s.input_name(k)}"
            compare(label, _to_numpy(fwd[o][k]), _to_numpy(rev[o][k]), s.rtol, s.atol)
    tangent = torch.func.jvp(small.torch_f, xs, tuple(torch.ones_like(x) for x in xs))[1]
    for o in range(len(eager)):
        shape = np.shape(_to_numpy(eager[o]))
        by_jac = sum(
            _to_numpy(fwd[o][k]).reshape(np.prod(shape, dtype=int), -1).sum(axis=1).reshape(shape) for k in argnums
        )
        small.compare(f"jvp vs jacfwd, output {s.output_name(o)}", _to_numpy(tangent[o]), by_jac, s.rtol, s.atol)
    total = _sum_of(small.torch_f)
    hess = torch.func.hessian(total, argnums)(*xs)
    hess_rr = torch.func.jacrev(torch.func.jacrev(total, argnums), argnums)(*xs)
    for i in argnums:
        for k in argnums:
            label = f"hessian vs jacrev(jacrev), block {s.input_name(i)},{s.input_name(k)}"
            compare(label, _to_numpy(hess[i][k]), _to_numpy(hess_rr[i][k]), max(s.rtol, 1e-9), s.atol)


def _gradcheck_torch(s: _Subject, small: _Subject, leaves: tuple[Any, ...]) -> None:
    import torch

    # torch's batched-gradient check runs backward under its legacy
    # batching, which cannot batch a host (NumPy) body.
    host = not s.elementwise and "numpy" in _forward_kind(s.rule)
    try:
        torch.autograd.gradcheck(
            small.torch_f,
            leaves,
            check_forward_ad=s.torch_forward_mode,
            check_batched_grad=not host and not s.skipped("vmap"),
            raise_exception=True,
        )
    except Exception as exc:
        raise CheckFailed(f"gradcheck ({s.positions()}): {str(exc)[:600]}") from None


def _forward_kind(rule: Rule) -> str:
    forward = rule.forward
    return (
        "sympy"
        if isinstance(forward, SympyBody)
        else " ".join(k for k in ("python", "jax", "torch", "numpy") if getattr(forward, k) is not None)
    )


def check_broadcast(s: _Subject) -> str:
    arrays = [k for k, i in enumerate(s.rule.inputs) if not i.static]
    if len(arrays) < 2:
        raise NotApplicable("fewer than two array inputs: nothing broadcasts")
    if not s.diff:
        raise NotApplicable("no differentiable input")
    shapes = [(3, 1), (1, 4), (4,), (3, 4)]
    values = list(s.values)
    for n, k in enumerate(arrays):
        values[k] = np.asarray(s.values[k]).reshape(-1)[: int(np.prod(shapes[n % len(shapes)]))]
        values[k] = np.resize(values[k], shapes[n % len(shapes)])
    full = np.broadcast_shapes(*[np.shape(values[k]) for k in arrays])
    expanded = list(values)
    for k in arrays:
        expanded[k] = np.broadcast_to(values[k], full).copy()
    if not isinstance(s.rule.forward, SympyBody):
        # Elementwise (sympy) rules promise broadcasting; a snippet rule is
        # held to it only where its forward broadcasts like array code, that
        # is, gives on stretchable shapes what it gives on the stretched
        # arrays.  Its cotangents must then be those of the stretched
        # inputs summed back, whatever its VJP body does by hand.
        reason = _not_broadcasting(s, values, expanded)
        if reason:
            raise NotApplicable(f"the forward does not broadcast its inputs: {reason}")
    for name in ("jax", "torch"):
        small, big = _broadcast_grads(s, name, values, expanded)
        for k, g, b in zip(s.diff, small, big, strict=True):
            shape = np.shape(values[k])
            got_shape = np.shape(_to_numpy(g))
            if tuple(got_shape) != tuple(shape):
                what = f"cotangent of {s.rule.inputs[k].name}"
                raise CheckFailed(f"{name}: {what} has shape {got_shape}, the input has {shape}")
            lead = len(full) - len(shape)
            axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape) if n == 1 and full[lead + i] != 1)
            expected = np.sum(_to_numpy(b), axis=axes).reshape(shape)
            compare(f"{name}: cotangent of {s.rule.inputs[k].name}", _to_numpy(g), expected, s.rtol, s.atol)
    return f"inputs of shapes {[np.shape(values[k]) for k in arrays]} get cotangents of their own shapes"


def _broadcast_grads(s: _Subject, name: str, values: list[Any], expanded: list[Any]) -> tuple[Any, Any]:
    """One backend's gradients at inputs of stretchable shapes, and at the same inputs stretched."""
    import jax.numpy as jnp
    import torch

    diff = list(s.diff)
    fn, convert = (s.jax_fn, jnp.asarray) if name == "jax" else (s.torch_fn, torch.from_numpy)

    def total(*xs: Any, base: list[Any]) -> Any:
        args = [convert(v) if isinstance(v, np.ndarray) else v for v in base]
        for k, x in zip(diff, xs, strict=True):
            args[k] = x
        out = fn(*args)
        outs = out if isinstance(out, tuple) else (out,)
        return sum(outs[o].sum() for o in s.outputs)

    def grads(base: list[Any]) -> Any:
        if name == "jax":
            return _jax_grad(s, lambda *xs: total(*xs, base=base), tuple(range(len(diff))))(
                *[jnp.asarray(base[k]) for k in diff]
            )
        leaves = [torch.from_numpy(base[k]).requires_grad_() for k in diff]
        return _torch_grads(s, total(*leaves, base=base), leaves)

    return grads(values), grads(expanded)


def _not_broadcasting(s: _Subject, values: list[Any], expanded: list[Any]) -> str:
    """Why the rule's forward does not act on `values` as on their broadcast `expanded`; empty if it does."""
    import jax.numpy as jnp
    import torch

    for name, fn, convert in (("jax", s.jax_fn, jnp.asarray), ("torch", s.torch_fn, torch.from_numpy)):
        try:
            with _quiet_host_callbacks():
                small = fn(*[convert(v) if isinstance(v, np.ndarray) else v for v in values])
                big = fn(*[convert(v) if isinstance(v, np.ndarray) else v for v in expanded])
            pairs = zip(*(o if isinstance(o, tuple) else (o,) for o in (small, big)), strict=True)
            for k, (a, b) in enumerate(pairs):
                compare(
                    f"output {s.rule.outputs[k].name} vs the broadcast inputs'",
                    _to_numpy(a),
                    _to_numpy(b),
                    s.rtol,
                    s.atol,
                )
        except Exception as exc:
            # The last line of a host callback's error is the host's own exception.
            lines = str(exc).strip().splitlines() or [""]
            return f"{name}: {type(exc).__name__}: {lines[-1][:200]}"
    return ""


@contextmanager
def _quiet_host_callbacks() -> Iterator[None]:
    """Keep JAX from logging the traceback of a host body that raises where the caller expects it may."""
    logger = logging.getLogger("jax._src.callback")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def check_float32(s: _Subject) -> str:
    import jax
    import jax.numpy as jnp
    import torch

    xs64 = s.xs()
    ref = [_to_numpy(o) for o in s.jax_f(*xs64)]
    found = []
    # Non-differentiable float arrays go to float32 too: the whole call is float32.
    # A complex rule's single precision is complex64.
    narrow = {np.dtype(np.float64): np.float32, np.dtype(np.complex128): np.complex64}
    s32 = dataclasses.replace(
        s,
        values=[v.astype(narrow[v.dtype]) if isinstance(v, np.ndarray) and v.dtype in narrow else v for v in s.values],
    )
    for name, convert in (
        ("jax", lambda x: jnp.asarray(x, dtype=narrow[x.dtype])),
        ("torch", lambda x: torch.from_numpy(x.astype(narrow[x.dtype]))),
    ):
        f32 = s32.jax_f if name == "jax" else s32.torch_f
        outs = f32(*[convert(x) for x in xs64])
        for k, (o, r) in enumerate(zip(outs, ref, strict=True)):
            o = _to_numpy(o)
            if o.dtype != narrow[r.dtype]:
                raise CheckFailed(
                    f"{name}: output {s.output_name(k)} is {o.dtype} for {np.dtype(narrow[r.dtype])} inputs"
                )
            finite = np.isfinite(r)
            if not np.isfinite(o[finite]).all():
                where = s.at_first(finite & ~np.isfinite(o))
                raise CheckFailed(f"{name}: output {s.output_name(k)} is not finite in float32 where float64 is{where}")
            s.compare(
                f"{name}: float32 output {s.output_name(k)} vs float64",
                o,
                r,
                1e-4,
                1e-5 * max(1.0, float(np.max(np.abs(r[finite]), initial=0.0))),
            )
        if s.diff:
            argnums = tuple(range(len(xs64)))
            if name == "jax":
                grads = _jax_grad(s, _sum_of(f32), argnums)(*[convert(x) for x in xs64])
            else:
                leaves = [cast("torch.Tensor", convert(x)).requires_grad_() for x in xs64]
                grads = _torch_grads(s, _sum_of(f32)(*leaves), leaves)
            grads64 = _jax_grad(s, _sum_of(s.jax_f), argnums)(*[jnp.asarray(x) for x in xs64])
            for k, (g, g64) in enumerate(zip(grads, grads64, strict=True)):
                g, g64 = _to_numpy(g), _to_numpy(g64)
                finite = np.isfinite(g64)
                if not np.isfinite(g[finite]).all():
                    where = s.at_first(finite & ~np.isfinite(g))
                    raise CheckFailed(f"{name}: float32 gradient {s.partial(k)} is not finite where float64 is{where}")
                s.compare(
                    f"{name}: float32 gradient {s.partial(k)} vs float64",
                    g,
                    g64,
                    1e-3,
                    1e-4 * max(1.0, float(np.max(np.abs(g64[finite]), initial=0.0))),
                )
        found.append(name)
    del jax
    return f"float32 finite and within 1e-4 of float64 ({', '.join(found)})"


#: Within this many eps of the float64 value at the rounded inputs, relative to max(|value|, 1).
LOW_PRECISION_EPS = 4.0


def check_low_precision(s: _Subject) -> str:
    """bfloat16 and float16 in: outputs and gradients of that dtype, within a few of its eps of float64."""
    if s.rule.complex:
        raise NotApplicable("bfloat16 and float16 have no complex counterpart (complex32 is no dtype JAX has)")
    import jax.numpy as jnp
    import torch

    for jax_dtype, torch_dtype in ((jnp.bfloat16, torch.bfloat16), (jnp.float16, torch.float16)):
        _check_low_dtype(s, jax_dtype, torch_dtype)
    return f"bfloat16 and float16: values and gradients within {LOW_PRECISION_EPS:g} eps of float64 (jax, torch)"


def _check_low_dtype(s: _Subject, jax_dtype: Any, torch_dtype: Any) -> None:
    import jax.numpy as jnp
    import torch

    label = str(jnp.dtype(jax_dtype))
    rounded = [np.asarray(jnp.asarray(x, dtype=jax_dtype), dtype=np.float64) for x in s.xs()]
    # The reference: float64 at the rounded inputs, non-differentiated float arrays rounded too.
    exact = dataclasses.replace(
        s, values=[_low_value(v, functools.partial(_rounded64, dtype=jax_dtype)) for v in s.values]
    )
    ref = [_to_numpy(o) for o in exact.jax_f(*rounded)]
    grads64 = _grads_jax(exact.jax_f, rounded, np.float64) if s.diff else []
    eps, largest = float(jnp.finfo(jax_dtype).eps), float(jnp.finfo(jax_dtype).max)
    # Arguments as each backend's own arrays: NumPy has no bfloat16 that torch takes.
    converters: dict[str, Callable[[Any], Any]] = {
        "jax": functools.partial(jnp.asarray, dtype=jax_dtype),
        "torch": functools.partial(torch.tensor, dtype=torch_dtype),
    }
    for name, convert in converters.items():
        low = dataclasses.replace(s, values=[_low_value(v, convert) for v in s.values])
        f = low.jax_f if name == "jax" else low.torch_f
        xs = [convert(x) for x in rounded]
        for k, (o, r) in enumerate(zip(map(_to_numpy_any, f(*xs)), ref, strict=True)):
            if np.issubdtype(r.dtype, np.floating):
                _within_eps(f"{name}: {label} output {s.output_name(k)}", o, r, eps, largest, exact)
        if s.diff:
            grads = _grads_jax(f, xs, None) if name == "jax" else _grads_torch(f, xs)
            for k, (g, g64) in enumerate(zip(grads, grads64, strict=True)):
                _within_eps(f"{name}: {label} gradient {s.partial(k)}", g, g64, eps, largest, exact)


def _rounded64(value: np.ndarray, dtype: Any) -> np.ndarray:
    import jax.numpy as jnp

    return np.asarray(jnp.asarray(value, dtype=dtype), dtype=np.float64)


def _low_value(value: Any, convert: Callable[[np.ndarray], Any]) -> Any:
    """A float64 array argument through `convert` (to the low dtype); other arguments as they are."""
    return convert(value) if isinstance(value, np.ndarray) and value.dtype == np.float64 else value


def _to_numpy_any(value: Any) -> np.ndarray:
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().double().numpy() if value.is_floating_point() else value.numpy()
    return (
        np.asarray(value, dtype=np.float64)
        if np.issubdtype(np.asarray(value).dtype, np.floating)
        else np.asarray(value)
    )


def _grads_jax(f: Callable[..., Sequence[Any]], xs: Sequence[Any], dtype: Any) -> list[np.ndarray]:
    import jax
    import jax.numpy as jnp

    total = lambda *a: sum(o.astype(jnp.float32).sum() if dtype is None else o.sum() for o in f(*a))  # noqa: E731
    return [_to_numpy_any(g) for g in jax.grad(total, tuple(range(len(xs))))(*[jnp.asarray(x) for x in xs])]


def _grads_torch(f: Callable[..., Sequence[Any]], xs: Sequence[Any]) -> list[np.ndarray]:
    import torch

    leaves = [x.clone().requires_grad_() for x in xs]
    grads = torch.autograd.grad(_sum_of(f)(*leaves), leaves, allow_unused=True, materialize_grads=True)
    return [_to_numpy_any(g) for g in grads]


def _within_eps(what: str, got: np.ndarray, exact: np.ndarray, eps: float, largest: float, point: _Subject) -> None:
    """`got` within LOW_PRECISION_EPS eps of `exact` relative to max(|exact|, 1), where the dtype holds it.

    `point`: the rounded inputs, named in the message where `got` is off.
    """
    held = np.isfinite(exact) & (np.abs(exact) <= largest)
    if not np.isfinite(got[held]).all():
        where = point.at_first(held & ~np.isfinite(got))
        raise CheckFailed(f"{what} is not finite where its dtype holds the exact value{where}")
    with np.errstate(invalid="ignore"):
        error = np.where(held, np.abs(got - exact) / np.maximum(np.abs(exact), 1.0) / eps, 0.0)
    worst = float(np.max(error, initial=0.0))
    if worst > LOW_PRECISION_EPS:
        where = point.at_first(error == worst)
        raise CheckFailed(
            f"{what} is {worst:.3g} eps from float64 at the rounded inputs{where} (bound {LOW_PRECISION_EPS:g})"
        )


@contextmanager
def _torch_default_dtype(dtype: Any) -> Iterator[None]:
    import torch

    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def _torch_results(s: _Subject) -> list[np.ndarray]:
    """Outputs, JVP (where torch has forward mode) and VJP of the rule in torch, at float64 inputs."""
    xs = s.xs()
    outs = [_to_numpy(o) for o in s.torch_f(*[__import__("torch").from_numpy(x) for x in xs])]
    if not s.diff:
        return outs
    tangents = _tangents(s)
    cotangents = _cotangents(s, outs)
    found = [*outs, *_vjp_torch(s, xs, cotangents)]
    if s.torch_forward_mode:
        found += _jvp_torch(s, xs, tangents)
    return found


def check_dtype(s: _Subject) -> str:
    """float64 in is float64 throughout: results, tangents and cotangents, and every intermediate.

    An intermediate that torch makes in its default dtype (`torch.where(c,
    0.1, 0.2)`, `torch.exp` of an integer tensor, `torch.tensor(0.1)`) is
    float32 by default, a relative error near 1e-8 that other checks'
    tolerances let pass.  Under a bfloat16 default it is an error near 1e-3,
    and code that never uses the default dtype gives the same numbers.
    """
    import jax.numpy as jnp

    rng_state = s.rng.bit_generator.state
    reference = _torch_results(s)
    s.rng.bit_generator.state = rng_state
    with _torch_default_dtype(__import__("torch").bfloat16):
        narrow = _torch_results(s)
    # What _torch_results returns, by name: the outputs, the cotangents, the tangents.
    outputs = [f"output {s.output_name(k)}" for k in range(len(s.outputs))]
    labels = [*outputs, *(f"cotangent of {s.input_name(k)}" for k in range(len(s.diff)))]
    labels += [f"tangent of {s.output_name(k)}" for k in range(len(s.outputs))]
    for what, got, ref in zip(labels, narrow, reference, strict=False):
        if ref.dtype.kind == "f" and ref.dtype != np.float64:
            raise CheckFailed(f"torch: {what} is {ref.dtype} for float64 inputs")
        if ref.dtype.kind == "c" and ref.dtype != np.complex128:
            raise CheckFailed(f"torch: {what} is {ref.dtype} for complex128 inputs")
        s.compare(f"torch: {what} with a bfloat16 default dtype vs the float32 default's", got, ref, 1e-12, 1e-300)
    outs = s.jax_f(*[jnp.asarray(x) for x in s.xs()])
    results = list(outs)
    if s.diff:
        results += list(_jax_grad(s, _sum_of(s.jax_f), tuple(range(len(s.diff))))(*[jnp.asarray(x) for x in s.xs()]))
    for what, r in zip([*outputs, *(f"gradient {s.partial(k)}" for k in range(len(s.diff)))], results, strict=False):
        if jnp.issubdtype(r.dtype, jnp.complexfloating) and r.dtype != jnp.complex128:
            raise CheckFailed(f"jax: {what} is {r.dtype} for complex128 inputs")
        if jnp.issubdtype(r.dtype, jnp.floating) and r.dtype != jnp.float64:
            raise CheckFailed(f"jax: {what} is {r.dtype} for float64 inputs")
    return "float64 throughout (torch: the same results under a bfloat16 default dtype)"


def _call_both(s: _Subject, values: Sequence[Any]) -> dict[str, list[np.ndarray]]:
    """Each backend's outputs for arguments given as they are (numbers stay numbers)."""
    import jax.numpy as jnp
    import torch

    found = {}
    for name, fn, convert in (("jax", s.jax_fn, jnp.asarray), ("torch", s.torch_fn, torch.from_numpy)):
        out = fn(*[convert(v) if isinstance(v, np.ndarray) else v for v in values])
        found[name] = [_to_numpy(o) for o in (out if isinstance(out, tuple) else (out,))]
    return found


def _same_calls(
    what: str, got: dict[str, list[np.ndarray]], expected: dict[str, list[np.ndarray]], s: _Subject
) -> None:
    for backend, outs in got.items():
        for k, (o, e) in enumerate(zip(outs, expected[backend], strict=True)):
            if np.shape(o) != np.shape(e) and np.size(o) == 1:
                o = np.broadcast_to(o, np.shape(e))  # an elementwise rule of numbers alone gives a number
            compare(f"{backend}: {what}, output {s.rule.outputs[k].name}", o, e, s.rtol, s.atol)


def check_scalars(s: _Subject) -> str:
    """Calls as users make them: a Python number for each array input in turn, and the defaults left out.

    torch's `apply` hands numbers on as numbers, which torch functions
    refuse; JAX takes them.  Each call must give what the call with arrays
    of that number gives.
    """
    done = []
    arrays = [k for k, i in enumerate(s.rule.inputs) if not i.static and i.dtype == "float"]
    if s.elementwise:
        for k in arrays:
            number = float(np.ravel(s.values[k])[0])
            with_number = [number if j == k else v for j, v in enumerate(s.values)]
            with_array = [np.full_like(v, number) if j == k else v for j, v in enumerate(s.values)]
            what = f"a Python number for {s.rule.inputs[k].name}"
            # A number beside no float tensor takes torch's default dtype: float64 here, as in the array call.
            with _torch_default_dtype(__import__("torch").float64):
                got = _call_both(s, with_number)
            _same_calls(what, got, _call_both(s, with_array), s)
        done.append(f"a number for each of {len(arrays)} float array(s)")
    defaulted = [k for k, i in enumerate(s.rule.inputs) if i.has_default]
    if defaulted:
        explicit = [s.rule.inputs[k].default if k in defaulted else v for k, v in enumerate(s.values)]
        _same_calls("defaults left out", _call_both(s, explicit[: defaulted[0]]), _call_both(s, explicit), s)
        done.append(f"{len(defaulted)} default(s) left out")
    if not done:
        raise NotApplicable(
            "no float array input takes a number (the rule is not elementwise) and no input has a default"
        )
    return "; ".join(done) + ", in both backends"


def check_points(s: _Subject) -> str:
    import jax.numpy as jnp
    import torch

    points = s.rule.checks.points
    if not points:
        raise NotApplicable("the rule gives no checks.points")
    rtol = max(s.rtol, 1e-12)
    notes: set[str] = set()
    for n, point in enumerate(points):
        given = [point.at.get(i.name, i.default if i.has_default else None) for i in s.rule.inputs]
        missing = [i.name for i, v in zip(s.rule.inputs, given, strict=True) if v is None]
        if missing:
            raise CheckFailed(f"point {n}: no value for {missing}")
        at_point = dataclasses.replace(
            s,
            values=[
                v if i.static else np.asarray(v, dtype=_NUMPY_DTYPES[i.dtype])
                for i, v in zip(s.rule.inputs, given, strict=True)
            ],
        )
        for name, fn, convert in (("jax", s.jax_fn, jnp.asarray), ("torch", s.torch_fn, torch.from_numpy)):
            if point.value is not None:
                out = fn(*[convert(v) if isinstance(v, np.ndarray) else v for v in at_point.values])
                outs = out if isinstance(out, tuple) else (out,)
                got = np.concatenate([np.ravel(_to_numpy(o)) for o in outs])
                compare(f"point {n}: {name} value", got, np.ravel(point.value), rtol, s.atol)
            if point.grad is not None:
                for input_name, expected in point.grad.items():
                    k = _point_input(s, n, "grad", input_name)
                    got = _point_grad(at_point, name, s.diff.index(k))
                    if not np.isfinite(got).all():
                        raise CheckFailed(f"point {n}: {name} gradient for {input_name} is {got}")
                    compare(f"point {n}: {name} grad {input_name}", got, expected, rtol, s.atol)
            for first, row in (point.hessian or {}).items():
                for second, expected in row.items():
                    k, m = (s.diff.index(_point_input(s, n, "hessian", i)) for i in (first, second))
                    got = _point_hessian(at_point, name, k, m)
                    if not np.isfinite(got).all():
                        raise CheckFailed(f"point {n}: {name} hessian {first}, {second} is {got}")
                    compare(f"point {n}: {name} hessian {first}, {second}", got, expected, rtol, s.atol)
            if point.jvp is not None:
                tangents = [np.zeros_like(x) for x in at_point.xs()]
                for input_name, tangent in point.jvp.tangents.items():
                    k = _point_input(s, n, "jvp tangents", input_name)
                    shape = np.shape(tangents[s.diff.index(k)])
                    tangents[s.diff.index(k)] = np.broadcast_to(np.asarray(tangent, dtype=np.float64), shape).copy()
                got, note = _point_jvp(at_point, name, tangents)
                if note:
                    notes.add(note)
                compare(f"point {n}: {name} jvp", got, np.ravel(point.jvp.value), rtol, s.atol)
    return f"{len(points)} point(s) hold in both backends" + "".join(sorted(notes))


def _point_input(s: _Subject, n: int, key: str, input_name: str) -> int:
    """The position of a differentiable input that a point's `grad` or `jvp` names."""
    k = next((j for j, i in enumerate(s.rule.inputs) if i.name == input_name), None)
    if k is None:
        raise CheckFailed(f"point {n}: {key} names unknown input {input_name!r}")
    if k not in s.diff:
        raise CheckFailed(f"point {n}: {key} names {input_name!r}, which is not differentiable")
    return k


def _point_grad(s: _Subject, backend: str, position: int) -> np.ndarray:
    """The gradient of the sum of the differentiable outputs for one input."""
    xs = s.xs()
    if backend == "jax":
        import jax

        return _to_numpy(jax.grad(_sum_of(s.jax_f), position)(*xs))
    import torch

    leaves = [torch.from_numpy(x).requires_grad_() for x in xs]
    grads = torch.autograd.grad(_sum_of(s.torch_f)(*leaves), leaves, allow_unused=True, materialize_grads=True)
    return _to_numpy(grads[position])


def _point_hessian(s: _Subject, backend: str, first: int, second: int) -> np.ndarray:
    """The gradient with respect to input `second` of the sum of the gradient for input `first`.

    Reverse over reverse, which every rule has in both backends (forward
    mode over a custom_vjp does not exist).
    """
    xs = s.xs()
    if backend == "jax":
        import jax
        import jax.numpy as jnp

        def summed_grad(*args: Any) -> Any:
            return jnp.sum(jax.grad(_sum_of(s.jax_f), first)(*args))

        return _to_numpy(jax.grad(summed_grad, second)(*xs))
    import torch

    leaves = [torch.from_numpy(x).requires_grad_() for x in xs]
    (grad,) = torch.autograd.grad(_sum_of(s.torch_f)(*leaves), leaves[first], create_graph=True)
    (hessian,) = torch.autograd.grad(grad.sum(), leaves[second], allow_unused=True, materialize_grads=True)
    return _to_numpy(hessian)


def _point_jvp(s: _Subject, backend: str, tangents: Sequence[np.ndarray]) -> tuple[np.ndarray, str]:
    """The differentiable outputs' tangents, raveled and concatenated, and a note when reverse mode gave them.

    A backend without forward mode still has its derivative checked: the
    JVP is then the Jacobian from reverse mode applied to the tangents.
    """
    xs = s.xs()
    forward_mode = s.jax_forward_mode if backend == "jax" else s.torch_forward_mode
    if forward_mode:
        found = (_jvp_jax if backend == "jax" else _jvp_torch)(s, xs, tangents)
        return np.concatenate([np.ravel(t) for t in found]), ""
    outs = [_to_numpy(o) for o in s.jax_f(*xs)]
    found = []
    for o, out in enumerate(outs):
        rows = []
        for e in range(out.size):
            cotangents = [np.zeros_like(c) for c in outs]
            cotangents[o].flat[e] = 1.0
            row = (_vjp_jax if backend == "jax" else _vjp_torch)(s, xs, cotangents)
            rows.append(sum(float(np.sum(g * t)) for g, t in zip(row, tangents, strict=True)))
        found.append(np.array(rows))
    return np.concatenate(found), f" ({backend} JVP by reverse mode: {s.no_forward_mode[backend]})"


def check_structures(s: _Subject) -> str:
    """Gradients with respect to structured arguments come in those structures, equal to the inputs' gradients."""
    import jax
    import jax.numpy as jnp
    import torch

    rule = s.rule
    if not rule.structured:
        raise NotApplicable("the rule takes and returns arrays, no structures")
    # What grad can take: arrays and structures all of whose arrays are differentiable.
    wrt = [
        k
        for k, p in enumerate(rule.parameters)
        if all(i.differentiable for i in (p.leaves if isinstance(p, Structured) else (p,)))
    ]
    if not wrt:
        raise NotApplicable("no argument is differentiable as a whole")
    weights = [_normal_like(s.rng, _to_numpy(o)) for o in s.jax_f(*[jnp.asarray(x) for x in s.xs()])]
    flat = _grads_of_weighted(s, weights)
    by_input = dict(zip((rule.inputs[k].name for k in s.diff), flat, strict=True))
    public = {"jax": s.jax_fn, "torch": s.torch_fn}
    for backend, convert in (("jax", jnp.asarray), ("torch", torch.from_numpy)):
        values = [convert(v) if isinstance(v, np.ndarray) else v for v in s.values]
        arguments = structured_arguments(rule, values)

        def total(*args: Any, backend: str = backend, convert: Callable[[Any], Any] = convert) -> Any:
            # The structures as the user passes them: rebuilt from whatever the transform hands in.
            outs = public[backend](*_leaves_of_arguments(rule, args))
            outs = outs if isinstance(outs, tuple) else (outs,)
            xp = jnp if backend == "jax" else torch
            summed = sum(xp.sum(outs[k] * convert(w)) for k, w in zip(s.outputs, weights, strict=True))
            # torch differentiates a complex rule's real part (conjugate Wirtinger), JAX holomorphically.
            return summed.real if backend == "torch" and rule.complex else summed

        if backend == "jax":
            grads = jax.grad(total, argnums=tuple(wrt), holomorphic=rule.complex)(*arguments)
        else:
            grads = torch.func.grad(total, argnums=tuple(wrt))(*arguments)
        got = dict(zip(wrt, grads, strict=True))
        wrong = next((k for k, g in got.items() if type(g) is not type(arguments[k])), None)
        if wrong is not None:
            raise CheckFailed(
                f"{backend}: the gradient for {rule.parameters[wrong].name!r} is {type(got[wrong]).__name__}, "
                f"not {type(arguments[wrong]).__name__}"
            )
        parts = _leaves_of_arguments(rule, [got.get(k, a) for k, a in enumerate(arguments)])
        for leaf, part in zip(rule.inputs, parts, strict=True):
            if leaf.name in by_input:
                found = _to_numpy(part)
                found = np.conj(found) if backend == "torch" and rule.complex else found
                compare(f"{backend} gradient of {leaf.name}", found, by_input[leaf.name], s.rtol, s.atol)
    kinds = ", ".join(f"{p.name} ({p.kind})" for p in rule.parameters if isinstance(p, Structured))
    shapes = f"{kinds} in" + (", " if rule.returns else "") if kinds else ""
    return f"jax.grad and torch.func.grad through the structures ({shapes}{'results' if rule.returns else ''})"


def _leaves_of_arguments(rule: Rule, arguments: Sequence[Any]) -> list[Any]:
    """The rule's inputs, one value each, from the public function's arguments (structures taken apart)."""
    leaves: list[Any] = []
    for p, a in zip(rule.parameters, arguments, strict=True):
        if not isinstance(p, Structured):
            leaves.append(a)
        elif p.kind == "fields":
            leaves += [getattr(a, i.name) for i in p.leaves]
        elif p.kind == "keys":
            leaves += [a[i.dict_key] for i in p.leaves]
        else:
            leaves += list(a)
    return leaves


def _grads_of_weighted(s: _Subject, weights: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The gradient of sum(w * out) with respect to each differentiable input, by JAX on flat inputs."""
    import jax.numpy as jnp

    def total(*xs: Any) -> Any:
        return sum(jnp.sum(o * w) for o, w in zip(s.jax_f(*xs), weights, strict=True))

    grads = _jax_grad(s, total, tuple(range(len(s.diff))))(*[jnp.asarray(x) for x in s.xs()])
    return [np.asarray(g) for g in grads]


def check_compile(s: _Subject, include: bool) -> str:
    import torch

    if not include:
        raise NotApplicable("torch.compile is checked with --compile (it takes ~30 s)")
    xs = tuple(torch.from_numpy(x) for x in s.xs())
    compiled = torch.compile(_sum_of(s.torch_f), fullgraph=True)
    leaves = tuple(x.clone().requires_grad_() for x in xs)
    try:
        got = _torch_grads(s, compiled(*leaves), leaves)
    except torch._dynamo.exc.Unsupported as exc:
        if "data-dependent" not in str(exc).lower():
            raise
        raise NotApplicable(
            "fullgraph=True cannot trace the data-dependent control flow of the rule's own body (a Python loop or "
            "branch on tensor values); without fullgraph, torch.compile breaks the graph there (see durability)"
        ) from None
    leaves = tuple(x.clone().requires_grad_() for x in xs)
    want = _torch_grads(s, _sum_of(s.torch_f)(*leaves), leaves)
    for k, (a, b) in enumerate(zip(got, want, strict=True)):
        s.compare(f"compiled gradient {s.partial(k)} vs eager", _to_numpy(a), _to_numpy(b), s.rtol, s.atol)
    return "torch.compile(fullgraph=True) matches eager"


# ---------------------------------------------------------------- running


class CheckSession:
    """Rules built once and checked, rule by rule, in this process or in worker processes.

    With `jobs` above 1 each rule's checks run in one of `jobs` worker
    processes, started with "spawn": torch and JAX hold threads and
    runtime state that a forked child inherits half-initialised.  A rule's
    outcomes do not depend on where it runs (its random points come from the
    seed and its name), so they are the same as in one process, in the
    same order.  Several seeds can be run in one session without rebuilding
    the package or restarting the workers.
    """

    def __init__(self, rules: Sequence[Rule], package: str | None = None, *, jobs: int = 1) -> None:
        self.rules = list(rules)
        self.package = package
        self.jobs = max(1, min(jobs, len(self.rules)))
        self._stack = ExitStack()
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._modules: tuple[Any, Any] | None = None

    def __enter__(self) -> CheckSession:
        with self._stack:
            package, folder = self.package, None
            if package is None:
                package = "rulegen_checked"
                folder = self._stack.enter_context(tempfile.TemporaryDirectory(prefix="rulegen-check-"))
                self._stack.callback(_forget_package, package)
                from rulegen.build import build

                build(sorted({Path(r.source) for r in self.rules}), Path(folder) / package)
            if self.jobs > 1:
                # Each worker gets an equal share of the cores for torch's own threads.
                threads = max(1, available_cores() // self.jobs)
                self._pool = self._stack.enter_context(
                    concurrent.futures.ProcessPoolExecutor(
                        max_workers=self.jobs,
                        mp_context=multiprocessing.get_context("spawn"),
                        initializer=_start_worker,
                        initargs=(self.rules, package, folder, threads),
                    )
                )
            else:
                if folder is not None:
                    sys.path.insert(0, folder)
                    self._stack.callback(sys.path.remove, folder)
                self._modules = _import_package(package)
            # Entered whole: keep what was opened until __exit__.
            self._stack = self._stack.pop_all()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stack.close()
        self._pool = self._modules = None

    @property
    def modules(self) -> tuple[Any, Any]:
        """The built package's JAX and torch modules, imported in this process (a session of one job)."""
        assert self._modules is not None, "modules are imported here only by a session of one job, once entered"
        return self._modules

    def run(
        self, *, seed: int = 0, include_compile: bool = False, progress: Callable[[Outcome], None] | None = None
    ) -> list[Outcome]:
        """Every check on every rule at the points of `seed`, in rule order."""
        if self._pool is None:
            assert self._modules is not None, "run() is for inside `with CheckSession(...)`"
            jax_pkg, torch_pkg = self._modules
            names = [r.name for r in self.rules]
            outcomes = []
            for rule in self.rules:
                for check in CHECKS:
                    outcome = _run_one(rule, check, jax_pkg, torch_pkg, seed, include_compile, names)
                    outcomes.append(outcome)
                    if progress is not None:
                        progress(outcome)
            return outcomes
        by_rule: dict[int, list[Outcome]] = {}
        futures = {self._pool.submit(_check_in_worker, k, seed, include_compile): k for k in range(len(self.rules))}
        for future in concurrent.futures.as_completed(futures):
            k = futures[future]
            try:
                by_rule[k] = future.result()
            except Exception as exc:  # not a check's failure (each is caught): the worker died, say in native code
                detail = f"the worker process checking it failed: {type(exc).__name__}: {exc}"
                by_rule[k] = [Outcome(self.rules[k].name, check, "fail", detail) for check in CHECKS]
            if progress is not None:
                for outcome in by_rule[k]:
                    progress(outcome)
        return [outcome for k in range(len(self.rules)) for outcome in by_rule[k]]


def _import_package(package: str) -> tuple[Any, Any]:
    import jax

    jax.config.update("jax_enable_x64", True)
    return importlib.import_module(f"{package}.jax"), importlib.import_module(f"{package}.torch")


def _forget_package(package: str) -> None:
    """Drop a temporary package's modules, so that the next one of the same name is imported afresh."""
    for module in [m for m in sys.modules if m == package or m.startswith(f"{package}.")]:
        del sys.modules[module]


# A worker process's rules and imported package, set once by `_start_worker`.
_WORKER: dict[str, Any] = {}


def _start_worker(rules: list[Rule], package: str, folder: str | None, threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
    if folder is not None:
        sys.path.insert(0, folder)
    _WORKER.update(rules=rules, modules=_import_package(package))


def _check_in_worker(index: int, seed: int, include_compile: bool) -> list[Outcome]:
    rules: list[Rule] = _WORKER["rules"]
    jax_pkg, torch_pkg = _WORKER["modules"]
    names = [r.name for r in rules]
    return [_run_one(rules[index], check, jax_pkg, torch_pkg, seed, include_compile, names) for check in CHECKS]


def run_checks(
    rules: Sequence[Rule],
    package: str | None = None,
    *,
    seed: int = 0,
    include_compile: bool = False,
    progress: Callable[[Outcome], None] | None = None,
    jobs: int = 1,
) -> list[Outcome]:
    """Every check on every rule; `package` names an importable built package, else one is built.

    `jobs` above 1 checks rules in that many worker processes (see `CheckSession`).
    """
    with CheckSession(rules, package, jobs=jobs) as session:
        return session.run(seed=seed, include_compile=include_compile, progress=progress)


_FUNCTIONS: dict[str, Callable[[_Subject], str]] = {
    "forward": check_forward,
    "mpmath": check_mpmath,
    "wide": check_wide,
    "jvp_fd": check_jvp_fd,
    "vjp_dot": check_vjp_dot,
    "cross_backend": check_cross_backend,
    "second_order": check_second_order,
    "transforms_jax": check_transforms_jax,
    "transforms_torch": check_transforms_torch,
    "broadcast": check_broadcast,
    "float32": check_float32,
    "low_precision": check_low_precision,
    "dtype": check_dtype,
    "scalars": check_scalars,
    "points": check_points,
    "structures": check_structures,
}


def _run_one(
    rule: Rule, check: str, jax_pkg: Any, torch_pkg: Any, seed: int, include_compile: bool, known: Sequence[str] = ()
) -> Outcome:
    skip = rule.checks.skip.get(check)
    if skip is not None:
        return Outcome(rule.name, check, "n/a", f"skipped by the rule: {skip}")
    try:
        subject = _subject(rule, jax_pkg, torch_pkg, seed, known)
        if check == "compile":
            detail = check_compile(subject, include_compile)
        elif check == "durability":
            from rulegen.durability import check_durability

            detail = check_durability(subject, include_compile, jax_pkg)
        else:
            detail = _FUNCTIONS[check](subject)
        return Outcome(rule.name, check, "pass", detail)
    except NotApplicable as why:
        return Outcome(rule.name, check, "n/a", str(why))
    except CheckFailed as failure:
        return Outcome(rule.name, check, "fail", str(failure))
    except Exception as exc:
        return Outcome(rule.name, check, "fail", f"{type(exc).__name__}: {str(exc)[:600]}")


def summary(outcomes: Sequence[Outcome]) -> str:
    counts = {status: sum(o.status == status for o in outcomes) for status in ("pass", "fail", "n/a")}
    rules = len({o.rule for o in outcomes})
    return f"{rules} rules: {counts['pass']} passed, {counts['fail']} failed, {counts['n/a']} n/a"


def report_table(outcomes: Sequence[Outcome]):
    from rich.table import Table

    table = Table(title="rulegen test", show_lines=False)
    table.add_column("rule")
    for check in CHECKS:
        table.add_column(check, justify="center")
    by_rule: dict[str, dict[str, Outcome]] = {}
    for o in outcomes:
        by_rule.setdefault(o.rule, {})[o.check] = o
    marks = {"pass": "[green]pass[/green]", "fail": "[bold red]FAIL[/bold red]", "n/a": "[dim]n/a[/dim]"}
    for rule, cells in by_rule.items():
        table.add_row(rule, *(marks[cells[c].status] if c in cells else "" for c in CHECKS))
    return table


# Two letters per check: the compact table's column heads, spelled out in its legend.
CHECK_CODES = {
    "forward": "fw",
    "mpmath": "mp",
    "wide": "wi",
    "jvp_fd": "jf",
    "vjp_dot": "vd",
    "cross_backend": "cb",
    "second_order": "so",
    "transforms_jax": "tj",
    "transforms_torch": "tt",
    "broadcast": "bc",
    "float32": "32",
    "low_precision": "lp",
    "dtype": "dt",
    "scalars": "sc",
    "points": "pt",
    "structures": "st",
    "compile": "co",
    "durability": "du",
}
_MARKS = {"pass": "[green]✓[/green]", "fail": "[bold red]✗[/bold red]", "n/a": "[dim]·[/dim]"}


def compact_table(outcomes: Sequence[Outcome]):
    """One row per rule, one mark per check under its two-letter code: fits 80 columns (see `legend`)."""
    from rich.table import Table

    table = Table(title="rulegen test", box=None, pad_edge=False, collapse_padding=True, title_justify="left")
    # A long name is cut short rather than folded onto a second row (the failure lines below name it
    # whole), at what leaves every check its column in 80.
    table.add_column("rule", max_width=80 - 3 * len(CHECKS) - 1, overflow="ellipsis", no_wrap=True)
    for check in CHECKS:
        table.add_column(CHECK_CODES[check], justify="center", no_wrap=True, min_width=2)
    by_rule: dict[str, dict[str, Outcome]] = {}
    for o in outcomes:
        by_rule.setdefault(o.rule, {})[o.check] = o
    for rule, cells in by_rule.items():
        table.add_row(rule, *(_MARKS[cells[c].status] if c in cells else "" for c in CHECKS))
    return table


def legend() -> str:
    """What the compact table's marks and column codes mean."""
    codes = ", ".join(f"{CHECK_CODES[check]} {check}" for check in CHECKS)
    return f"{_MARKS['pass']} pass  {_MARKS['fail']} FAIL  {_MARKS['n/a']} n/a (reasons below); {codes}"


def outcomes_json(outcomes: Sequence[Outcome]) -> str:
    return json.dumps([asdict(o) for o in outcomes], indent=1)
