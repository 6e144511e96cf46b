"""The numerical checks: values against the other backend and mpmath, derivatives against finite differences,
JVP against VJP, each backend against the other, second order, and the rule's own points."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rulegen.check.derivatives import (
    cotangents,
    jvp_jax,
    jvp_torch,
    sum_of,
    tangents,
    vjp_jax,
    vjp_torch,
)
from rulegen.check.outcome import CheckFailed, NotApplicable, brief, compare
from rulegen.check.points import NUMPY_DTYPES, sample
from rulegen.check.subject import Subject, derived, from_numpy, smaller, to_numpy
from rulegen.derive.expr import lambdified
from rulegen.spec.rules import Domain, Rule, SympyBody


def _number(value: complex) -> str:
    """A sum for a message: a real one as a float, all its digits."""
    return f"{value.real:.17g}" if value.imag == 0 else f"{value:.17g}"


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
        return [(to_numpy(p) - to_numpy(m)) / (2 * step) for p, m in zip(plus, minus, strict=True)]

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


def _domain_width(s: Subject) -> float:
    widths = [hi - lo for i in s.rule.inputs if i.differentiable for lo, hi in [i.interval]]
    return min((w for w in widths if math.isfinite(w)), default=1.0)


def _numpy_forward(s: Subject) -> Callable[..., list[np.ndarray]]:
    return lambda *xs: [to_numpy(o) for o in s.jax_f(*xs)]


def _one_backend(s: Subject, what: str) -> None:
    """NotApplicable where a framework is not installed: `what` compares the two."""
    if s.absent:
        raise NotApplicable(f"{what} needs both frameworks: {'; '.join(s.absent.values())}")


def check_forward(s: Subject) -> str:
    _one_backend(s, "comparing the two frameworks' values")
    import jax.numpy as jnp
    import torch

    jout = s.jax_fn(*[jnp.asarray(v) if isinstance(v, np.ndarray) else v for v in s.values])
    tout = s.torch_fn(*[torch.from_numpy(v) if isinstance(v, np.ndarray) else v for v in s.values])
    jouts = jout if isinstance(jout, tuple) else (jout,)
    touts = tout if isinstance(tout, tuple) else (tout,)
    if len(jouts) != len(rule_outputs := s.rule.outputs) or len(touts) != len(rule_outputs):
        raise CheckFailed(f"expected {len(rule_outputs)} outputs, got {len(jouts)} (jax) and {len(touts)} (torch)")
    for o, a, b in zip(rule_outputs, jouts, touts, strict=True):
        jax_value, torch_value = to_numpy(a), to_numpy(b)
        # Equal values of another kind (an int output a float in one backend) are a different result.
        if jax_value.dtype.kind != torch_value.dtype.kind:
            raise CheckFailed(f"output {o.name}: torch gives {b.dtype}, jax {a.dtype}")
        s.compare(f"output {o.name}: torch vs jax", torch_value, jax_value, s.rtol, s.atol)
    return f"{len(rule_outputs)} output(s) agree"


def check_mpmath(s: Subject) -> str:
    import mpmath

    if not isinstance(s.rule.forward, SympyBody):
        raise NotApplicable("the forward is a snippet, not a sympy expression")
    forward = _mpmath_forward(s)
    first = s.backends[0]
    convert = from_numpy(first)
    jouts = s.fn(first)(*[convert(v) if isinstance(v, np.ndarray) else v for v in s.values])
    jouts = jouts if isinstance(jouts, tuple) else (jouts,)
    # mpmath's complex numbers (mpc) where the rule's are complex.
    kind, number, result = (complex, mpmath.mpc, complex) if s.rule.complex else (float, mpmath.mpf, float)
    arrays = np.broadcast_arrays(
        *[np.asarray(v, dtype=kind) for v, i in zip(s.values, s.rule.inputs, strict=True) if not i.static]
    )
    count = min(8, arrays[0].size if arrays else 1)
    for (name, fn), got in zip(forward, jouts, strict=True):
        got_flat = np.broadcast_to(to_numpy(got), arrays[0].shape).ravel() if arrays else np.ravel(got)
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


# Points far outside the default sample domain: no integers (floor's and ceiling's kinks).
WIDE_POINTS = (-1.0e4 - 0.3, -117.3, -23.7, -0.61, 0.73, 23.3, 117.1, 1.0e4 + 0.3)


_FLOAT32_MAX, _TINY = float(np.finfo(np.float32).max), 1e-300


def _sympy_forward(s: Subject) -> tuple[list[Any], list[tuple[str, Any]]]:
    """The rule's inputs as sympy symbols and its forward expressions, for a high-precision reference."""
    from rulegen.derive.partials import symbols_of
    from rulegen.derive.snippet import SnippetDerivation

    derivation = derived(s.rule, (s.rule.name,))
    if isinstance(derivation, SnippetDerivation):
        code = derivation.forward["jax"]
        return [symbols_of(s.rule)[i.name] for i in s.rule.inputs], list(zip(code.results, code.exprs, strict=True))
    return [derivation.symbols[i.name] for i in s.rule.inputs], list(derivation.forward)


def _mpmath_forward(s: Subject) -> list[tuple[str, Callable[..., Any]]]:
    """Each output's name and its forward as an mpmath function of the inputs, made once per subject."""

    def mpmath_functions() -> list[tuple[str, Callable[..., Any]]]:
        from rulegen.derive.functions import MPMATH_IMPLEMENTATIONS

        symbols, forward = _sympy_forward(s)
        modules = [dict(MPMATH_IMPLEMENTATIONS), "mpmath"]
        return [(name, lambdified(symbols, expr, modules=modules)) for name, expr in forward]

    return s.once("mpmath forward", mpmath_functions)


def lambdified_derivative(total: Any, x: Any, symbols: list[Any], modules: list[Any]) -> Callable[..., Any] | None:
    """d total / dx for mpmath, floor and ceiling differentiated to 0 as the frameworks do; None if sympy cannot."""
    import sympy

    derivative = sympy.diff(total, x).replace(
        lambda e: isinstance(e, sympy.Derivative) and isinstance(e.expr, sympy.floor | sympy.ceiling),
        lambda e: sympy.S.Zero,
    )
    if derivative.has(sympy.Derivative):
        return None
    return lambdified(symbols, derivative, modules=modules)


#: Whether a value (each element of an array) keeps what `assume:` says of an input.
ASSUMED_SIGN = {
    "positive": lambda v: v > 0,
    "nonnegative": lambda v: v >= 0,
    "negative": lambda v: v < 0,
    "nonpositive": lambda v: v <= 0,
    "nonzero": lambda v: v != 0,
}


def inside_bounds(domain: Domain, value: float, index: int) -> float | None:
    """`value` if `domain` holds it, else a point inside it: the `index`-th of WIDE_POINTS' spread over a bounded
    domain, `value` reflected in the one bound of a half-bounded one; None where that too falls outside."""
    if math.isfinite(domain.lo) and math.isfinite(domain.hi):
        fraction = ((index + 0.5) / len(WIDE_POINTS) + 0.137 * math.copysign(1, value)) % 1.0
        moved = domain.lo + (domain.hi - domain.lo) * fraction
    elif math.isfinite(domain.lo):
        moved = domain.lo + abs(value - domain.lo)
    elif math.isfinite(domain.hi):
        moved = domain.hi - abs(value - domain.hi)
    else:
        moved = value
    for candidate in (value, moved):
        above = candidate > domain.lo if domain.lo_open else candidate >= domain.lo
        below = candidate < domain.hi if domain.hi_open else candidate <= domain.hi
        if above and below and candidate not in domain.exclude:
            return candidate
    return None


def wide_point(s: Subject, c: float) -> list[Any] | None:
    """Every float array input near `c`, each a little apart (ties are kinks of Max, Min and comparisons), and
    inside its `domain` where the rule wrote one (`inside_bounds`): a label in [0, 1] is never -11370.

    None where an input would break what the rule assumes of it (`assume:`):
    calls there are the caller's error.
    """
    values, k = [], 0
    for v, spec in zip(s.values, s.rule.inputs, strict=True):
        if spec.static:
            values.append(v)
        elif spec.dtype == "float":
            value: float | None = c * (1 + 0.137 * k)
            if spec.domain_given:
                value = inside_bounds(spec.bounds, c * (1 + 0.137 * k), WIDE_POINTS.index(c) + k)
            if value is None or not all(ASSUMED_SIGN[a](value) for a in spec.assume):
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


def check_wide(s: Subject) -> str:
    """The generated code far from the default sample domain, inside the bounds a rule writes.

    At points from ±0.61 to ±1e4 (an input with a `domain` taken inside it), where the forward is
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

    from rulegen.derive.functions import MPMATH_IMPLEMENTATIONS

    if not isinstance(s.rule.forward, SympyBody):
        raise NotApplicable("the forward is a snippet, not a sympy expression")
    symbols, forward = _sympy_forward(s)
    modules = [dict(MPMATH_IMPLEMENTATIONS), "mpmath"]
    diff_names = {s.rule.outputs[k].name for k in s.outputs}
    total = sum((e for n, e in forward if n in diff_names), sympy.S.Zero)
    values_fn = [fn for _, fn in _mpmath_forward(s)]
    derivative = s.rule.checks.true_derivative and s.diff
    maybe = [lambdified_derivative(total, symbols[k], symbols, modules) for k in s.diff] if derivative else []
    # A derivative sympy leaves unevaluated: the values alone.
    grads_fn = [g for g in maybe if g is not None] if None not in maybe else []
    found = []
    for c in WIDE_POINTS:
        values = wide_point(s, c)
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
    return (
        f"{len(found)} of {len(WIDE_POINTS)} wide points (±0.61 to ±1e4, inside each written domain) hold in float64,"
        " and finite in float32"
    )


def _wide_compare(point: Subject, refs: list[float], grads: list[float], scales: np.ndarray) -> None:
    """A point's float64 values and gradients against the references, and float32 finiteness."""
    at = point.where()
    first = point.backends[0]
    convert = from_numpy(first)
    jouts = point.fn(first)(*[convert(v) if isinstance(v, np.ndarray) else v for v in point.values])
    jouts = jouts if isinstance(jouts, tuple) else (jouts,)
    for k, (o, r) in enumerate(zip(jouts, refs, strict=True)):
        name = point.rule.outputs[k].name
        compare(f"at {at}: {first} output {name} vs 40 digits", to_numpy(o), np.asarray(r), 1e-8, 1e-9 * scales[k])
    for backend in point.backends if grads else ():
        got = _point_grads(point, backend)
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
    for backend in point.backends:
        outs = f32.f(backend)(*map(from_numpy(backend), f32.xs()))
        if not all(np.isfinite(to_numpy(o)).all() for o in outs):
            exact = ", ".join(f"{o.name} = {r:.8g}" for o, r in zip(point.rule.outputs, refs, strict=False))
            raise CheckFailed(f"at {at}: {backend} float32 value is not finite where the exact one is {exact}")
        if grads:
            got = _point_grads(f32, backend)
            if not all(np.isfinite(g).all() for g in got):
                found = ", ".join(
                    f"{point.partial(j)} = {g.item():.8g} (exactly {r:.8g})"
                    for j, (g, r) in enumerate(zip(got, grads, strict=True))
                )
                raise CheckFailed(f"at {at}: {backend} float32 gradient {found}")


def _true_derivative(s: Subject) -> None:
    if not s.rule.checks.true_derivative:
        raise NotApplicable("the rule's derivative deliberately differs from the forward's (true_derivative: false)")
    if not s.diff:
        raise NotApplicable("no differentiable input")


def check_jvp_fd(s: Subject) -> str:
    _true_derivative(s)
    rtol, atol = max(s.rtol, 1e-6), max(s.atol, 1e-8)
    backends = []
    if s.jax_forward_mode:
        backends.append(("jax", jvp_jax))
    if s.torch_forward_mode:
        backends.append(("torch", jvp_torch))
    if not backends:
        raise NotApplicable(f"no forward mode in either backend: {_no_forward_mode(s)}")
    for attempt in range(3):
        xs, ts = s.xs(), tangents(s)
        fd, error = _finite_difference(_numpy_forward(s), xs, ts, _domain_width(s))
        smooth = _smooth_entries(fd, error, rtol, atol)
        # Within a difference step of a kink the differences judge nothing: those entries are
        # skipped, and a sample with more of them than smooth ones drawn again.
        kept, total = sum(int(m.sum()) for m in smooth), sum(m.size for m in smooth)
        if kept * 2 < total and (attempt < 2 or not kept):
            s.values = sample(s.rule, s.rng)
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


def _no_forward_mode(s: Subject) -> str:
    """Why neither backend has forward mode: each installed one's reason."""
    return "; ".join(dict.fromkeys(s.no_forward_mode[b] for b in s.backends)) or s.no_forward_mode["torch"]


def check_vjp_dot(s: Subject) -> str:
    _true_derivative(s)
    xs, ts = s.xs(), tangents(s)
    done = []
    pairs = []
    if s.jax_forward_mode:
        pairs.append(("jax", jvp_jax, vjp_jax))
    if s.torch_forward_mode:
        pairs.append(("torch", jvp_torch, vjp_torch))
    if s.torch_forward_mode and not s.jax_forward_mode and not s.absent:
        pairs.append(("jax VJP / torch JVP", jvp_torch, vjp_jax))
    if s.jax_forward_mode and not s.torch_forward_mode and not s.absent:
        pairs.append(("torch VJP / jax JVP", jvp_jax, vjp_torch))
    if not pairs:
        raise NotApplicable(f"no forward mode in either backend: {_no_forward_mode(s)}")
    for backend, jvp, vjp in pairs:
        jt = jvp(s, xs, ts)
        cs = cotangents(s, jt)
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


def check_cross_backend(s: Subject) -> str:
    _one_backend(s, "comparing the two frameworks' derivatives")
    if not s.diff:
        raise NotApplicable("no differentiable input")
    xs, ts = s.xs(), tangents(s)
    compared = []
    if s.jax_forward_mode and s.torch_forward_mode:
        tj = jvp_torch(s, xs, ts)
        for k, (a, b) in enumerate(zip(jvp_jax(s, xs, ts), tj, strict=True)):
            s.compare(f"JVP of output {s.output_name(k)}: torch vs jax", b, a, s.rtol, s.atol)
        compared.append("JVP")
    cs = cotangents(s, [to_numpy(o) for o in s.jax_f(*xs)])
    for k, (a, b) in enumerate(zip(vjp_jax(s, xs, cs), vjp_torch(s, xs, cs), strict=True)):
        s.compare(f"VJP for input {s.input_name(k)}: torch vs jax", b, a, s.rtol, s.atol)
    compared.append("VJP")
    missing = "" if len(compared) == 2 else f" (no JVP to compare: {next(iter(s.no_forward_mode.values()))})"
    return " and ".join(compared) + f" agree{missing}{s.note}"


def check_second_order(s: Subject) -> str:
    if "torch" in s.backends:
        import torch

    _true_derivative(s)
    small = smaller(s)
    if "torch" in s.backends:
        leaves = tuple(torch.from_numpy(x).clone().requires_grad_() for x in small.xs())
        try:
            torch.autograd.gradgradcheck(small.torch_f, leaves, raise_exception=True)
        except Exception as exc:
            raise CheckFailed(f"torch gradgradcheck ({s.positions()}): {brief(str(exc))}") from None
    if "jax" not in s.backends:
        return "gradgradcheck passes (jax is not installed)"
    import jax.numpy as jnp
    from jax.test_util import check_grads

    modes = ["fwd", "rev"] if s.jax_forward_mode else ["rev"]
    # The derivatives being checked are exact, so the difference step only
    # trades truncation (eps**2) for rounding (1e-16 / eps): 1e-5 of the
    # inputs' scale, inside the domain, keeps both below 1e-8 where the
    # function is gentle. One step serves every input, and near a
    # singularity (a log-density's xlogy(a - 1, x) at x = 0.012, beside
    # b = 19) truncation alone was 1.5e-4: a step a tenth as long cuts it a
    # hundredfold, and a wrong derivative fails at both.
    xs = [jnp.asarray(x) for x in small.xs()]
    scale = max(1.0, max(float(np.mean(np.abs(x))) for x in small.xs()))
    eps = min(1e-5 * scale, 1e-3 * _domain_width(s))
    for step in (eps, eps / 10):
        try:
            check_grads(small.jax_f, xs, order=2, modes=modes, eps=step)
            break
        except AssertionError as exc:
            failure = exc
    else:
        raise CheckFailed(f"jax check_grads(order=2, modes={modes}) ({s.positions()}): {brief(str(failure))}")
    if "torch" not in s.backends:
        return f"check_grads(order=2, modes={modes}) passes (torch is not installed)"
    return f"gradgradcheck and check_grads(order=2, modes={modes}) pass"


def check_points(s: Subject) -> str:
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
                v if i.static else np.asarray(v, dtype=NUMPY_DTYPES[i.dtype])
                for i, v in zip(s.rule.inputs, given, strict=True)
            ],
        )
        for name in s.backends:
            fn, convert = s.fn(name), from_numpy(name)
            if point.value is not None:
                out = fn(*[convert(v) if isinstance(v, np.ndarray) else v for v in at_point.values])
                outs = out if isinstance(out, tuple) else (out,)
                got = np.concatenate([np.ravel(to_numpy(o)) for o in outs])
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
    both = "both backends" if len(s.backends) == 2 else " and ".join(s.backends)
    return f"{len(points)} point(s) hold in {both}" + "".join(sorted(notes))


def _point_input(s: Subject, n: int, key: str, input_name: str) -> int:
    """The position of a differentiable input that a point's `grad` or `jvp` names."""
    k = next((j for j, i in enumerate(s.rule.inputs) if i.name == input_name), None)
    if k is None:
        raise CheckFailed(f"point {n}: {key} names unknown input {input_name!r}")
    if k not in s.diff:
        raise CheckFailed(f"point {n}: {key} names {input_name!r}, which is not differentiable")
    return k


def _point_grad(s: Subject, backend: str, position: int) -> np.ndarray:
    """The gradient of the sum of the differentiable outputs for one input."""
    xs = s.xs()
    if backend == "jax":
        import jax

        return to_numpy(jax.grad(sum_of(s.jax_f), position)(*xs))
    return _point_grads(s, backend)[position]


def _point_grads(s: Subject, backend: str) -> list[np.ndarray]:
    """The gradient of the sum of the differentiable outputs for each input, from one backward pass: each
    input's is the one `_point_grad` gives (a pass per input took most of the wide check's time)."""
    xs = s.xs()
    if backend == "jax":
        import jax

        return [to_numpy(g) for g in jax.grad(sum_of(s.jax_f), tuple(range(len(xs))))(*xs)]
    import torch

    leaves = [torch.from_numpy(x).requires_grad_() for x in xs]
    grads = torch.autograd.grad(sum_of(s.torch_f)(*leaves), leaves, allow_unused=True, materialize_grads=True)
    return [to_numpy(g) for g in grads]


def _point_hessian(s: Subject, backend: str, first: int, second: int) -> np.ndarray:
    """The gradient with respect to input `second` of the sum of the gradient for input `first`.

    Reverse over reverse, which every rule has in both backends (forward
    mode over a custom_vjp does not exist).
    """
    xs = s.xs()
    if backend == "jax":
        import jax
        import jax.numpy as jnp

        def summed_grad(*args: Any) -> Any:
            return jnp.sum(jax.grad(sum_of(s.jax_f), first)(*args))

        return to_numpy(jax.grad(summed_grad, second)(*xs))
    import torch

    leaves = [torch.from_numpy(x).requires_grad_() for x in xs]
    (grad,) = torch.autograd.grad(sum_of(s.torch_f)(*leaves), leaves[first], create_graph=True)
    (hessian,) = torch.autograd.grad(grad.sum(), leaves[second], allow_unused=True, materialize_grads=True)
    return to_numpy(hessian)


def _point_jvp(s: Subject, backend: str, tangents: Sequence[np.ndarray]) -> tuple[np.ndarray, str]:
    """The differentiable outputs' tangents, raveled and concatenated, and a note when reverse mode gave them.

    A backend without forward mode still has its derivative checked: the
    JVP is then the Jacobian from reverse mode applied to the tangents.
    """
    xs = s.xs()
    forward_mode = s.jax_forward_mode if backend == "jax" else s.torch_forward_mode
    if forward_mode:
        found = (jvp_jax if backend == "jax" else jvp_torch)(s, xs, tangents)
        return np.concatenate([np.ravel(t) for t in found]), ""
    outs = [to_numpy(o) for o in s.jax_f(*xs)]
    found = []
    for o, out in enumerate(outs):
        rows = []
        for e in range(out.size):
            cotangents = [np.zeros_like(c) for c in outs]
            cotangents[o].flat[e] = 1.0
            row = (vjp_jax if backend == "jax" else vjp_torch)(s, xs, cotangents)
            rows.append(sum(float(np.sum(g * t)) for g, t in zip(row, tangents, strict=True)))
        found.append(np.array(rows))
    return np.concatenate(found), f" ({backend} JVP by reverse mode: {s.no_forward_mode[backend]})"
