"""The conformance matrix, built: every registered function against a 40-digit mpmath reference and special values.

Every function a rule may call, built as a rule of its own, against a
40-digit mpmath reference on points across its whole domain (the registry's
`domain`), |x| up to 1e4 and the negative axis included:

    function x {array, static Python number, integer array, complex where holomorphic}
             x {value, first and second derivative, jvp} x {JAX, torch} x {float32, float64}

A static Python number and an integer array are values only (neither is
differentiated); the integer array's result is in the default float dtype.
A new registry entry is in the matrix by being registered: it passes, or
the registry says where its framework implementation is wrong.

The special values (`test_special_values`) run each function of one or two
inputs, and `x**y` and `x**(1/3)`, at nan, ±0, ±the smallest subnormal,
±the smallest normal, ±the largest float and ±inf of each dtype (every pair
for two inputs), value, first derivative (reverse and forward mode) and
second, JAX eager and under `jax.jit` and torch: nan in gives nan out, elsewhere the exact value where it
is defined (the section's comment says what is right at signed zeros, infinities, ties and flushed subnormals).
"""

from __future__ import annotations

import functools
import importlib
import math
import signal
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
import sympy as sp
import torch

from rulegen.derive import functions as fn
from tests.conftest import shared_package
from tests.derive.test_conformance import (
    CALLS,
    DTYPES,
    ORDERS,
    Call,
    cells,
    fixed,
    reference,
)
from tests.reference_cache import NO_VALUE, KeptReference, identity_of

jax.config.update("jax_enable_x64", True)


INTEGERS = (-10000, -117, -30, -3, 0, 2, 25, 117, 10000)
COMPLEX = (0.5 + 0.3j, -1.5 + 0.7j, 0.3 - 2.1j, -0.2 - 0.4j)


def rules_text() -> str:
    lines = ["rules:"]
    for name, call in CALLS.items():
        names = [f"x{k}" for k in range(call.arity)]
        lines.append(f"  - {{name: c_{name.lower()}, inputs: [{', '.join(names)}], forward: '{call.text(names)}'}}")
        statics = ", ".join(f"s{k}: {{static: true}}" for k in range(call.arity))
        static_call = call.text([f"s{k}" for k in range(call.arity)])
        lines.append(f"  - {{name: s_{name.lower()}, inputs: {{x: {{}}, {statics}}}, forward: 'x * {static_call}'}}")
        if call.function.holomorphic:
            lines.append(
                f"  - {{name: z_{name.lower()}, inputs: {{z: {{dtype: complex}}}}, forward: '{call.text(['z'])}'}}"
            )
    for name, (text, arity) in POWERS.items():
        names = ", ".join(f"x{k}" for k in range(arity))
        lines.append(f"  - {{name: p_{name}, inputs: [{names}], forward: '{text}'}}")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="session")
def package(tmp_path_factory):
    with shared_package(tmp_path_factory, rules_text(), "rg_conformance"):
        yield importlib.import_module("rg_conformance.jax"), importlib.import_module("rg_conformance.torch")


# -------------------------------------------------------------------- the reference


def exact_values(f: Callable[..., object], columns: list[np.ndarray]) -> list[complex | None]:
    """The reference at each point, at the points as the dtype holds them; None where it is undefined (a pole)."""
    found: list[complex | None] = []
    with mpmath.workdps(40):
        for row in zip(*columns, strict=True):
            args = [mpmath.mpc(complex(v)) if np.iscomplexobj(v) else mpmath.mpf(float(v)) for v in row]
            try:
                value = complex(f(*args))
            except (ValueError, ZeroDivisionError, OverflowError):
                found.append(None)
                continue
            found.append(value if not (math.isnan(value.real) or math.isnan(value.imag)) else None)
    return found


#: How far from the exact value a cell may be, in eps of its dtype (relative): 1,024 in float64, 128 in float32.
#: Every cell but the known ones is within 275 and 64 (stop 42); 1e-8 and 2e-4 before, 4.5e7 and 1,700 eps,
#: let erfcx's second derivative (2.5e15 eps) and torch's trigamma (5e-10 relative) through.
TOLERANCE_EPS = {"float64": 1024, "float32": 128}


def agrees(got: complex, exact: complex, dtype: np.dtype) -> bool:
    """Within `TOLERANCE_EPS` roundings of `dtype` of the exact value, relative to it, or 16 relative to 1.

    Relative to 1 as well: a second derivative such as sigmoid(u) * (1 - sigmoid(u))
    at u = 25 is 2.5e-11, which float32 computes as 0, as the frameworks' own do.
    Past the largest float, an infinity of the sign; below the smallest, about 0.
    """
    info = np.finfo(dtype)
    tolerance = TOLERANCE_EPS["float32" if info.eps > 1e-10 else "float64"] * float(info.eps)
    if abs(exact) > float(info.max):
        return math.isinf(abs(got)) and (exact.imag != 0 or np.sign(got.real) == np.sign(exact.real))
    return abs(got - exact) <= tolerance * abs(exact) + 16 * float(info.eps)


def mismatches(got: np.ndarray, columns: list[np.ndarray], f: Callable[..., object], dtype: np.dtype) -> list[str]:
    exact = exact_values(f, columns)
    got = np.broadcast_to(np.asarray(got), (len(exact),))
    return [
        f"at {tuple(c[k].item() for c in columns)}: {got[k]!r}, exact {e!r}"
        for k, e in enumerate(exact)
        if e is not None and not agrees(complex(got[k]), e, dtype)
    ]


# -------------------------------------------------------------------- each backend's derivatives


def jax_orders(
    f: Callable[..., jax.Array], args: list[jax.Array], varied: int, *, jit: bool = False
) -> Iterator[tuple[str, jax.Array]]:
    """Each order of f at `args` in argument `varied`; with `jit`, each order compiled whole by `jax.jit`."""

    def along(g: Callable[..., jax.Array]) -> Callable[..., jax.Array]:
        # Elementwise: the gradient of the sum is the derivative at each point.
        return jax.grad(lambda *a: jnp.sum(g(*a)), argnums=varied)

    def jvp(*a: jax.Array) -> jax.Array:
        return jax.jvp(held(f, list(a), varied), (a[varied],), (jnp.ones_like(a[varied]),))[1]

    for order, g in (("value", f), ("first", along(f)), ("second", along(along(f))), ("jvp", jvp)):
        yield order, (jax.jit(g) if jit else g)(*args)


def held(f: Callable, args: list, varied: int) -> Callable:
    """f of argument `varied` alone, the others held constant: the partial derivative's jvp.

    A held input has no tangent (JAX's symbolic zero, torch's efficient zero tensor), and a generated
    jvp adds no term for it.  A zero tangent passed in is a number like any other: its product with a
    partial that is inf (atan2's in x at (0, 5e-324)) is nan, in the frameworks' own jvp as in a
    generated one (JAX's jvp must stay linear in its tangents, which it transposes for reverse mode).
    """
    return lambda a: f(*args[:varied], a, *args[varied + 1 :])


def torch_orders(
    f: Callable[..., torch.Tensor], args: list[torch.Tensor], varied: int
) -> Iterator[tuple[str, torch.Tensor]]:
    def along(g: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        return torch.func.grad(lambda *a: g(*a).sum(), argnums=varied)

    yield "value", f(*args)
    yield "first", along(f)(*args)
    yield "second", along(along(f))(*args)
    yield "jvp", torch.func.jvp(held(f, args, varied), (args[varied],), (torch.ones_like(args[varied]),))[1]


def compiled_torch_orders(
    f: Callable[..., torch.Tensor], args: list[torch.Tensor], varied: int
) -> Iterator[tuple[str, torch.Tensor]]:
    """The value and first derivative of `torch.compile(f)`: inductor's code, AOTAutograd's backward."""
    compiled = torch.compile(f)
    leaves = [a.clone().requires_grad_(k == varied) for k, a in enumerate(args)]
    out = compiled(*leaves)
    yield "value", out.detach()
    yield "first", torch.autograd.grad(out.sum(), leaves[varied])[0]


def to_numpy(value: object) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().numpy(force=True)
    return np.asarray(value)


# -------------------------------------------------------------------- the matrix


def run_cell(package: tuple, name: str, kind: str, backend: str, dtype: str) -> list[str]:
    call = CALLS[name]
    jax_pkg, torch_pkg = package
    module = jax_pkg if backend == "jax" else torch_pkg
    if kind == "array":
        return array_cell(getattr(module, f"c_{name.lower()}"), call, backend, np.dtype(dtype))
    if kind == "complex":
        return complex_cell(getattr(module, f"z_{name.lower()}"), call, backend, np.dtype(dtype))
    if kind == "static":
        return static_cell(getattr(module, f"s_{name.lower()}"), call, backend, np.dtype(dtype))
    return integer_cell(getattr(module, f"c_{name.lower()}"), call, backend)


def as_arrays(columns: list[np.ndarray], backend: str) -> list:
    return [jnp.asarray(c) if backend == "jax" else torch.from_numpy(c.copy()) for c in columns]


def array_cell(f: Callable, call: Call, backend: str, dtype: np.dtype) -> list[str]:
    failures = []
    for varied in range(call.arity):
        columns = [np.asarray(c, dtype=dtype) for c in call.grid(varied)]
        orders = jax_orders if backend == "jax" else torch_orders
        for order, got in orders(f, as_arrays(columns, backend), varied):
            failures += [
                f"{order} in x{varied} {m}"
                for m in mismatches(to_numpy(got), columns, reference(call, order, varied), dtype)
            ]
    return failures


def complex_cell(f: Callable, call: Call, backend: str, dtype: np.dtype) -> list[str]:
    complex_dtype = np.dtype(np.complex64 if dtype == np.float32 else np.complex128)
    z = np.asarray([p for p in COMPLEX], dtype=complex_dtype)
    (arg,) = as_arrays([z], backend)
    failures = []
    values = {"value": f(arg)}
    if backend == "jax":
        values["jvp"] = jax.jvp(f, (arg,), (jnp.ones_like(arg),))[1]
        values["first"] = jax.vmap(jax.grad(f, holomorphic=True))(arg)
        values["second"] = jax.vmap(jax.grad(jax.grad(f, holomorphic=True), holomorphic=True))(arg)
    else:

        def derivative(g: Callable) -> Callable:
            return lambda a: torch.func.jvp(g, (a,), (torch.ones_like(a),))[1]

        def gradient(g: Callable) -> Callable:
            # torch's gradient of a holomorphic g is conj(g'(z)) times the cotangent (its convention).
            return lambda a: torch.func.vjp(g, a)[1](torch.ones_like(a))[0].conj()

        values["jvp"] = derivative(f)(arg)
        values["first"] = gradient(f)(arg)
        values["second"] = derivative(gradient(f))(arg)  # forward over reverse, as torch.func.hessian
    for order in ORDERS:
        failures += [
            f"{order} {m}"
            for m in mismatches(to_numpy(values[order]), [z], reference(call, order, 0, real=False), complex_dtype)
        ]
    return failures


def static_cell(f: Callable, call: Call, backend: str, dtype: np.dtype) -> list[str]:
    failures = []
    ones = np.ones(1, dtype=dtype)
    (x,) = as_arrays([ones], backend)
    for varied in range(call.arity):
        columns = call.grid(varied)
        got = [to_numpy(f(x, *(float(c[k]) for c in columns))).item() for k in range(len(columns[0]))]
        if any(np.asarray(to_numpy(f(x, *(float(c[0]) for c in columns)))).dtype != dtype for _ in [0]):
            failures.append(f"static in x{varied}: result not {dtype}")
        # A static is a Python number, computed as one (math.sin(s)) or as an array of the rule's
        # dtype (MathFunction.numbers_alone), or partly each (a replacement's Python arithmetic around
        # the framework's call): exact at the number, or at the dtype's rounding of it.
        at_number, at_rounding = (
            mismatches(np.asarray(got), [np.asarray(c, dtype=d) for c in columns], reference(call, "value", 0), dtype)
            for d in (np.float64, dtype)
        )
        failures += [f"static in x{varied} {m}" for m in at_number if at_rounding]
    return failures


def integer_cell(f: Callable, call: Call, backend: str) -> list[str]:
    failures = []
    for varied in range(call.arity):
        column = [p for p in INTEGERS if call.domain(varied)[0] < p < call.domain(varied)[1]]
        if not column:
            continue
        columns = [
            np.asarray(column if k == varied else [round(fixed(call.domain(k))) or 1] * len(column), dtype=np.int64)
            for k in range(call.arity)
        ]
        if any(not (call.domain(k)[0] < c[0] < call.domain(k)[1]) for k, c in enumerate(columns)):
            continue
        got = to_numpy(f(*as_arrays(columns, backend)))
        if got.dtype.kind != "f":
            failures.append(f"integer in x{varied}: result {got.dtype}, not a float")
        failures += [
            f"integer in x{varied} {m}" for m in mismatches(got, columns, reference(call, "value", 0), got.dtype)
        ]
    return failures


# The cells known to fail, by (function, kind, backend, dtype): what the framework gets wrong, to be fixed
# in the registry (issue 25). A cell listed here that passes fails the test (strict), so the list only shrinks.
KNOWN_WRONG: dict[tuple[str, str, str, str], str] = {}


def marked(cell: tuple[str, str, str, str]) -> object:
    # float64 in the fast lane; float32, its twin, in the slow one.
    return pytest.param(*cell, marks=pytest.mark.slow) if cell[3] == "float32" else cell


@pytest.mark.parametrize(("name", "kind", "backend", "dtype"), [marked(c) for c in cells()])
def test_conformance(package, name, kind, backend, dtype):
    known = KNOWN_WRONG.get((name, kind, backend, dtype))
    try:
        failures = run_cell(package, name, kind, backend, dtype)
    except Exception as exc:
        failures = [f"raised {type(exc).__name__}: {exc}"]
    if known:
        assert failures, f"{name} {kind} {backend} {dtype} now passes: remove it from KNOWN_WRONG ({known})"
        pytest.xfail(known)
    assert not failures, "\n".join(failures[:12])


# -------------------------------------------------------------------- special values
#
# Each function at the special points of each dtype (nan, ±0, ±smallest subnormal, ±smallest normal, ±largest,
# ±inf, and for two-input functions every pair of them), plus points where a power under- or overflows while its
# derivative is a normal float: the value, the first derivative in each input (reverse and forward mode) and the
# second (reverse over reverse), JAX eager and under `jax.jit`, and torch.  Powers (`x**y`, `x**(1/3)`) are
# rules' arithmetic, not registry entries, and are in the matrix beside them.
#
# Expected: the framework's own where it is right, the exact value where it is not.  What is right:
# - the exact value (mpmath, 40 digits) wherever it is defined, and at a signed zero its one-sided limit
#   (mpmath has no -0);
# - IEEE 754's (C99 Annex F, as numpy's C library computes it) where the value at a signed zero or an infinity is
#   specified there (`IEEE_VALUES`): atan2(+0, -0) = pi, pow(inf, -0) = 1, where mpmath's limit differs;
# - nan wherever an input is nan, but for a derivative that does not read that input (xlogy's in x is log(y) at
#   every x) and the values IEEE gives (`IEEE_BEYOND_NAN`);
# - at a tie of Max or Min (infinite ones included), 1/2 for each input's derivative (`TIES`);
# - in JAX, each reading of the point with some of its subnormal inputs flushed to a zero of their sign, as XLA on
#   the CPU computes (denormals-are-zero), and nan where such a reading is undefined (0/0);
# - a jvp along one input with the others held constant (`held`): a held input has no tangent, and no term.

#: Arithmetic a rule writes without a registry function, with what the frameworks do wrong at the float edges.
POWERS = {"pow": ("x0**x1", 2), "cbrt": ("x0**(1/3)", 1)}


def special_points(dtype: np.dtype) -> list[float]:
    info = np.finfo(dtype)
    edges = [float(info.smallest_subnormal), float(info.tiny), float(info.max), math.inf]
    return [math.nan, 0.0, -0.0, *(s * e for e in edges for s in (1.0, -1.0))]


#: Where `x**y` under- or overflows while `y x**(y-1)` is a normal float, and where XLA's i1e ~ x/2 is flushed.
EDGES = {"float32": (1e-30, 3.64e-31, 1.29e20, 1.5e-38), "float64": (1e-300, 1e200)}
EXPONENTS = (0.5, 1.5, 2.0, -1.0)


@dataclass(frozen=True)
class Special:
    """One function of the special-value matrix: its rule in the conformance package and its sympy expression."""

    name: str
    rule: str
    arity: int
    build: Callable[[list[sp.Symbol]], sp.Expr]
    domains: tuple[tuple[float, float], ...] = ()

    def inside(self, row: tuple[float, ...]) -> bool:
        """Whether `row` is in the function's domain (its boundary included), where it has a real value."""
        return all(v != v or lo <= v <= hi for (lo, hi), v in zip(self.domains, row, strict=False))

    def expr(self) -> tuple[sp.Expr, list[sp.Symbol]]:
        symbols = [sp.Symbol(f"x{k}", real=True) for k in range(self.arity)]
        return self.build(symbols), symbols

    def columns(self, dtype: np.dtype) -> list[np.ndarray]:
        specials = special_points(dtype)
        edges = EDGES[dtype.name]
        if self.arity == 1:
            column = specials + [s * e for e in edges for s in (1.0, -1.0)]
            return [np.asarray(column, dtype=dtype)]
        pairs = [(a, b) for a in specials for b in specials]
        pairs += [(e, p) for e in edges for p in EXPONENTS] + [(p, e) for e in edges for p in EXPONENTS]
        return [np.asarray([p[k] for p in pairs], dtype=dtype) for k in range(2)]


def _specials() -> dict[str, Special]:
    found = {
        name: Special(
            name,
            f"c_{name.lower()}",
            call.arity,
            lambda s, call=call: call.expr(real=True)[0].xreplace(dict(zip(call.expr(real=True)[1], s, strict=True))),
            tuple(call.domain(k) for k in range(call.arity)),
        )
        for name, call in CALLS.items()
        if call.arity <= 2
    }
    for name, (text, arity) in POWERS.items():
        found[name] = Special(
            name,
            f"p_{name}",
            arity,
            lambda s, text=text: sp.sympify(text, locals={f"x{k}": v for k, v in enumerate(s)}),
        )
    return found


SPECIALS = _specials()


@functools.cache
def special_reference(special: Special, order: str, varied: int) -> tuple[Callable[..., object], sp.Expr]:
    """The exact reference of `special`'s `order` in input `varied` (an mpmath function) and its sympy expression,
    made once per process: a cell asks for it per order and, for the second, per point (`_complex_first`), and
    sympy's derivative and lambdify took half the CPU of a cheap function's cell."""
    expr, symbols = special.expr()
    for _ in range({"value": 0, "first": 1, "jvp": 1, "second": 2}[order]):
        expr = sp.diff(expr, symbols[varied])
        expr = expr.replace(
            lambda e: isinstance(e, sp.Derivative) and isinstance(e.expr, (sp.floor, sp.ceiling)), lambda _: sp.S.Zero
        )
        expr = expr.replace(lambda e: isinstance(e, fn.VANISHING), lambda _: sp.S.Zero)
    if (special.name, order) in OWN_REFERENCES:
        return OWN_REFERENCES[special.name, order](varied), expr
    return sp.lambdify(symbols, expr, modules=[dict(fn.MPMATH_IMPLEMENTATIONS), "mpmath"]), expr


def _beta_curvature(a: mpmath.mpf, b: mpmath.mpf) -> mpmath.mpf:
    """d^2/da^2 beta(a, b) = beta(a, b) (d**2 + t), d = psi(a) - psi(a + b), t = psi1(a) - psi1(a + b), at the
    working precision and the digits that span a's and b's scales (as the registry's beta references): its limit
    -psi2(a) at b = 0, and d and t by their expansions in b, -b psi1(a + b/2) and -b psi2(a + b/2), where b is
    below the precision of a + b (a one-sided limit's stand-in for 0, 1e-900).  None (ValueError) at a pole b < 0
    of Gamma, where beta has no value: mpmath's beta there is an unsigned inf, and its product with d**2 + t, which
    is 0 at b = -1 (d = 1 / (a - 1), t = -d**2), was an infinity of the sign of that 0's rounding error (-inf at
    (1e-30, -1), inf at (3.64e-31, -1))."""
    if b < 0 and b == mpmath.floor(b):
        raise ValueError("beta has no value at a pole of Gamma in b")
    with fn._spanning_precision(a, b):
        # Polygammas by the registry's reference: mpmath's sums |x| terms at a negative x.
        psi = fn._mp_polygamma
        if b == 0:
            return -psi(2, a)
        if fn._mp_pole(a) or fn._mp_pole(a + b):
            raise ValueError("polygamma pole")  # as the digammas' difference says; b's expansion has a value there
        if abs(b) < abs(a) * mpmath.mpf(10) ** (-mpmath.mp.dps // 2):
            middle = a + b / 2
            d, t = -b * psi(1, middle), -b * psi(2, middle)
        else:
            d, t = psi(0, a) - psi(0, a + b), psi(1, a) - psi(1, a + b)
        return +(mpmath.beta(a, b) * (d * d + t))


def _beta_second(varied: int) -> Callable[..., mpmath.mpf]:
    """beta's second derivative in input `varied`: d^2/db^2 beta(a, b) is d^2/da^2 beta(b, a) (beta is
    symmetric)."""
    return _beta_curvature if varied == 0 else lambda a, b: _beta_curvature(b, a)


#: The references computed by a function of their own, by (function, order), from the input varied: sympy's
#: product of beta's partial and the digamma difference plus beta times the trigamma difference, lambdified, is
#: taken at the working precision alone, where a + 1e-900 rounds to a beside a tiny input (347 digits at
#: (2.2e-308, 0)): both differences cancel to 0 and the product with them, where the limit -psi2(a) is 1.8e923
#: (inf in float64).
OWN_REFERENCES: dict[tuple[str, str], Callable[[int], Callable[..., object]]] = {("beta", "second"): _beta_second}


class _TooLong(Exception):
    pass


def _too_long(*_: object) -> None:
    raise _TooLong


def _digits(row: tuple[object, ...]) -> int:
    """40 digits, and as many more as the smallest nonzero float argument has leading zeros (at most 324): a
    derivative whose terms cancel to the size of its argument (sigmoid'' = s (1 - s)**2 - s**2 (1 - s), -x / 8
    at x = 1e-300) keeps 40 digits of the difference, where at 40 digits alone it is 0.  The one-sided limits'
    stand-ins for zero (mpf 1e-450, 1e-900) add none: polygamma at 940 digits is slow enough as it is."""
    tiny = [abs(v) for v in row if isinstance(v, float) and v != 0 and math.isfinite(v)]
    smallest = min(tiny, default=1.0)
    return 40 + (max(0, int(-math.log10(smallest))) if smallest < 1 else 0)


#: The points where mpmath's reference does not return, by (function, dtype): (order, input varied, the point's
#: reprs), its one-sided limits' stand-ins for zero included.  beta's partials at -max: digamma there, a pole mpmath
#: does not see (every float past 2**53 is an integer), never returns; zeta at inf.  `_exact` gives these up
#: without asking mpmath, and asks it at every other point, so that the points checked are the same in every run,
#: whatever the load (a limit on wall time gave up on 9 points more or fewer from run to run).  Found by asking for
#: every point of the special-value cells with one second of CPU each: every point that did not return within it.
#: A point that takes `_GUARD_SECONDS` of CPU fails its cell (list it here); a listed point that the JAX cells no
#: longer ask for fails them too (`_given_up_unasked`).
GIVEN_UP: dict[tuple[str, str], frozenset[tuple[str, int, tuple[str, ...]]]] = {
    ("beta", "float32"): frozenset(
        {
            ("first", 0, ("-3.4028234663852886e+38", "-0.0")),
            ("first", 0, ("-3.4028234663852886e+38", "0.0")),
            ("first", 0, ("-3.4028234663852886e+38", "mpf('-1.0e-990')")),
            ("first", 0, ("-3.4028234663852886e+38", "mpf('-9.9999999999999993e-501')")),
            ("first", 0, ("-3.4028234663852886e+38", "mpf('1.0e-990')")),
            ("first", 0, ("-3.4028234663852886e+38", "mpf('9.9999999999999993e-501')")),
            ("first", 1, ("-0.0", "-3.4028234663852886e+38")),
            ("first", 1, ("0.0", "-3.4028234663852886e+38")),
            ("first", 1, ("mpf('-1.0000000000000001e-450')", "-3.4028234663852886e+38")),
            ("first", 1, ("mpf('-9.9999999999999998e-901')", "-3.4028234663852886e+38")),
            ("first", 1, ("mpf('1.0000000000000001e-450')", "-3.4028234663852886e+38")),
            ("first", 1, ("mpf('9.9999999999999998e-901')", "-3.4028234663852886e+38")),
            ("jvp", 0, ("-3.4028234663852886e+38", "-0.0")),
            ("jvp", 0, ("-3.4028234663852886e+38", "0.0")),
            ("jvp", 0, ("-3.4028234663852886e+38", "mpf('-1.0e-990')")),
            ("jvp", 0, ("-3.4028234663852886e+38", "mpf('-9.9999999999999993e-501')")),
            ("jvp", 0, ("-3.4028234663852886e+38", "mpf('1.0e-990')")),
            ("jvp", 0, ("-3.4028234663852886e+38", "mpf('9.9999999999999993e-501')")),
            ("jvp", 1, ("-0.0", "-3.4028234663852886e+38")),
            ("jvp", 1, ("0.0", "-3.4028234663852886e+38")),
            ("jvp", 1, ("mpf('-1.0000000000000001e-450')", "-3.4028234663852886e+38")),
            ("jvp", 1, ("mpf('-9.9999999999999998e-901')", "-3.4028234663852886e+38")),
            ("jvp", 1, ("mpf('1.0000000000000001e-450')", "-3.4028234663852886e+38")),
            ("jvp", 1, ("mpf('9.9999999999999998e-901')", "-3.4028234663852886e+38")),
            ("second", 0, ("-1.1754943508222875e-38", "-3.4028234663852886e+38")),
            ("second", 0, ("-1.401298464324817e-45", "-3.4028234663852886e+38")),
            ("second", 0, ("-3.4028234663852886e+38", "-0.0")),
            ("second", 0, ("-3.4028234663852886e+38", "0.0")),
            ("second", 0, ("-3.4028234663852886e+38", "mpf('-1.0e-990')")),
            ("second", 0, ("-3.4028234663852886e+38", "mpf('-9.9999999999999993e-501')")),
            ("second", 0, ("-3.4028234663852886e+38", "mpf('1.0e-990')")),
            ("second", 0, ("-3.4028234663852886e+38", "mpf('9.9999999999999993e-501')")),
            ("second", 0, ("1.1754943508222875e-38", "-3.4028234663852886e+38")),
            ("second", 0, ("1.401298464324817e-45", "-3.4028234663852886e+38")),
            ("second", 0, ("mpf('-1.0000000000000001e-450')", "-3.4028234663852886e+38")),
            ("second", 0, ("mpf('1.0000000000000001e-450')", "-3.4028234663852886e+38")),
            ("second", 1, ("-0.0", "-3.4028234663852886e+38")),
            ("second", 1, ("-3.4028234663852886e+38", "-1.1754943508222875e-38")),
            ("second", 1, ("-3.4028234663852886e+38", "-1.401298464324817e-45")),
            ("second", 1, ("-3.4028234663852886e+38", "1.1754943508222875e-38")),
            ("second", 1, ("-3.4028234663852886e+38", "1.401298464324817e-45")),
            ("second", 1, ("-3.4028234663852886e+38", "mpf('-9.9999999999999993e-501')")),
            ("second", 1, ("-3.4028234663852886e+38", "mpf('9.9999999999999993e-501')")),
            ("second", 1, ("0.0", "-3.4028234663852886e+38")),
            ("second", 1, ("mpf('-1.0000000000000001e-450')", "-3.4028234663852886e+38")),
            ("second", 1, ("mpf('-9.9999999999999998e-901')", "-3.4028234663852886e+38")),
            ("second", 1, ("mpf('1.0000000000000001e-450')", "-3.4028234663852886e+38")),
            ("second", 1, ("mpf('9.9999999999999998e-901')", "-3.4028234663852886e+38")),
        }
    ),
    ("beta", "float64"): frozenset(
        {
            ("first", 0, ("-1.7976931348623157e+308", "-0.0")),
            ("first", 0, ("-1.7976931348623157e+308", "-2.2250738585072014e-308")),
            ("first", 0, ("-1.7976931348623157e+308", "-5e-324")),
            ("first", 0, ("-1.7976931348623157e+308", "0.0")),
            ("first", 0, ("-1.7976931348623157e+308", "2.2250738585072014e-308")),
            ("first", 0, ("-1.7976931348623157e+308", "5e-324")),
            ("first", 0, ("-1.7976931348623157e+308", "mpf('-1.0e-990')")),
            ("first", 0, ("-1.7976931348623157e+308", "mpf('-9.9999999999999993e-501')")),
            ("first", 0, ("-1.7976931348623157e+308", "mpf('1.0e-990')")),
            ("first", 0, ("-1.7976931348623157e+308", "mpf('9.9999999999999993e-501')")),
            ("first", 1, ("-0.0", "-1.7976931348623157e+308")),
            ("first", 1, ("-2.2250738585072014e-308", "-1.7976931348623157e+308")),
            ("first", 1, ("-5e-324", "-1.7976931348623157e+308")),
            ("first", 1, ("0.0", "-1.7976931348623157e+308")),
            ("first", 1, ("2.2250738585072014e-308", "-1.7976931348623157e+308")),
            ("first", 1, ("5e-324", "-1.7976931348623157e+308")),
            ("first", 1, ("mpf('-1.0000000000000001e-450')", "-1.7976931348623157e+308")),
            ("first", 1, ("mpf('-9.9999999999999998e-901')", "-1.7976931348623157e+308")),
            ("first", 1, ("mpf('1.0000000000000001e-450')", "-1.7976931348623157e+308")),
            ("first", 1, ("mpf('9.9999999999999998e-901')", "-1.7976931348623157e+308")),
            ("jvp", 0, ("-1.7976931348623157e+308", "-0.0")),
            ("jvp", 0, ("-1.7976931348623157e+308", "-2.2250738585072014e-308")),
            ("jvp", 0, ("-1.7976931348623157e+308", "-5e-324")),
            ("jvp", 0, ("-1.7976931348623157e+308", "0.0")),
            ("jvp", 0, ("-1.7976931348623157e+308", "2.2250738585072014e-308")),
            ("jvp", 0, ("-1.7976931348623157e+308", "5e-324")),
            ("jvp", 0, ("-1.7976931348623157e+308", "mpf('-1.0e-990')")),
            ("jvp", 0, ("-1.7976931348623157e+308", "mpf('-9.9999999999999993e-501')")),
            ("jvp", 0, ("-1.7976931348623157e+308", "mpf('1.0e-990')")),
            ("jvp", 0, ("-1.7976931348623157e+308", "mpf('9.9999999999999993e-501')")),
            ("jvp", 1, ("-0.0", "-1.7976931348623157e+308")),
            ("jvp", 1, ("-2.2250738585072014e-308", "-1.7976931348623157e+308")),
            ("jvp", 1, ("-5e-324", "-1.7976931348623157e+308")),
            ("jvp", 1, ("0.0", "-1.7976931348623157e+308")),
            ("jvp", 1, ("2.2250738585072014e-308", "-1.7976931348623157e+308")),
            ("jvp", 1, ("5e-324", "-1.7976931348623157e+308")),
            ("jvp", 1, ("mpf('-1.0000000000000001e-450')", "-1.7976931348623157e+308")),
            ("jvp", 1, ("mpf('-9.9999999999999998e-901')", "-1.7976931348623157e+308")),
            ("jvp", 1, ("mpf('1.0000000000000001e-450')", "-1.7976931348623157e+308")),
            ("jvp", 1, ("mpf('9.9999999999999998e-901')", "-1.7976931348623157e+308")),
            ("second", 0, ("-1.7976931348623157e+308", "-0.0")),
            ("second", 0, ("-1.7976931348623157e+308", "-2.2250738585072014e-308")),
            ("second", 0, ("-1.7976931348623157e+308", "-5e-324")),
            ("second", 0, ("-1.7976931348623157e+308", "0.0")),
            ("second", 0, ("-1.7976931348623157e+308", "2.2250738585072014e-308")),
            ("second", 0, ("-1.7976931348623157e+308", "5e-324")),
            ("second", 0, ("-1.7976931348623157e+308", "mpf('-1.0e-990')")),
            ("second", 0, ("-1.7976931348623157e+308", "mpf('-9.9999999999999993e-501')")),
            ("second", 0, ("-1.7976931348623157e+308", "mpf('1.0e-990')")),
            ("second", 0, ("-1.7976931348623157e+308", "mpf('9.9999999999999993e-501')")),
            ("second", 0, ("-2.2250738585072014e-308", "-1.7976931348623157e+308")),
            ("second", 0, ("-5e-324", "-1.7976931348623157e+308")),
            ("second", 0, ("2.2250738585072014e-308", "-1.7976931348623157e+308")),
            ("second", 0, ("5e-324", "-1.7976931348623157e+308")),
            ("second", 0, ("mpf('-1.0000000000000001e-450')", "-1.7976931348623157e+308")),
            ("second", 0, ("mpf('1.0000000000000001e-450')", "-1.7976931348623157e+308")),
            ("second", 1, ("-0.0", "-1.7976931348623157e+308")),
            ("second", 1, ("-1.7976931348623157e+308", "-2.2250738585072014e-308")),
            ("second", 1, ("-1.7976931348623157e+308", "-5e-324")),
            ("second", 1, ("-1.7976931348623157e+308", "2.2250738585072014e-308")),
            ("second", 1, ("-1.7976931348623157e+308", "5e-324")),
            ("second", 1, ("-2.2250738585072014e-308", "-1.7976931348623157e+308")),
            ("second", 1, ("-5e-324", "-1.7976931348623157e+308")),
            ("second", 1, ("0.0", "-1.7976931348623157e+308")),
            ("second", 1, ("2.2250738585072014e-308", "-1.7976931348623157e+308")),
            ("second", 1, ("5e-324", "-1.7976931348623157e+308")),
            ("second", 1, ("mpf('-1.0000000000000001e-450')", "-1.7976931348623157e+308")),
            ("second", 1, ("mpf('-9.9999999999999998e-901')", "-1.7976931348623157e+308")),
            ("second", 1, ("mpf('1.0000000000000001e-450')", "-1.7976931348623157e+308")),
            ("second", 1, ("mpf('9.9999999999999998e-901')", "-1.7976931348623157e+308")),
        }
    ),
    ("zeta", "float32"): frozenset(
        {
            ("first", 0, ("inf",)),
            ("jvp", 0, ("inf",)),
            ("second", 0, ("inf",)),
            ("value", 0, ("inf",)),
        }
    ),
    ("zeta", "float64"): frozenset(
        {
            ("first", 0, ("inf",)),
            ("jvp", 0, ("inf",)),
            ("second", 0, ("inf",)),
            ("value", 0, ("inf",)),
        }
    ),
}

#: The CPU time after which `_exact` fails instead of waiting: every point not in `GIVEN_UP` takes under one second.
_GUARD_SECONDS = 30.0


@dataclass
class _Reference:
    """A reference function of a special-value cell, with the points it gives up (`GIVEN_UP`) and those asked."""

    f: Callable[..., object]
    given_up: frozenset[tuple[str, ...]] = frozenset()
    asked: set[tuple[str, ...]] = field(default_factory=set)

    def __call__(self, *args: object) -> object:
        return self.f(*args)


def _point(row: tuple[object, ...]) -> tuple[str, ...]:
    """`row` as `GIVEN_UP` writes it: each value's repr (an mpf's at mpmath's default precision)."""
    with mpmath.workprec(53):
        return tuple(repr(v) for v in row)


def _exact(f: Callable[..., object], row: tuple[object, ...]) -> float | None:
    """f at `row` to 40 significant digits (`_digits`); None where it is undefined, or where `GIVEN_UP` lists it."""
    if isinstance(f, _Reference) and f.given_up:
        point = _point(row)
        if point in f.given_up:
            f.asked.add(point)
            return None
    previous = signal.signal(signal.SIGPROF, _too_long)
    signal.setitimer(signal.ITIMER_PROF, _GUARD_SECONDS)
    try:
        with mpmath.workdps(_digits(row)):
            found = f(*(mpmath.mpf(v) for v in row))
            if _complex(found):
                return None
            value = complex(found)
    except (ValueError, ZeroDivisionError, OverflowError, TypeError):
        return None
    except _TooLong:
        raise AssertionError(
            f"mpmath takes more than {_GUARD_SECONDS} s of CPU at {row}: list the point in GIVEN_UP"
        ) from None
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)
    if value.imag != 0 or math.isnan(value.real):
        return None
    return value.real


def _complex(value: object) -> bool:
    """Whether mpmath's `value` is complex, its imaginary part more than a rounding's of the real one: a value
    whose parts are below the floats (cbrt'' at -1e200, 1e-335 (-1 - 1.7i)) is complex there too, not the real
    -0.0 that Python's complex() reads it as."""
    if not isinstance(value, mpmath.mpc) or value.imag == 0:
        return False
    return abs(value.imag) > abs(value.real) * mpmath.mpf(2) ** -100


def test_a_complex_value_below_the_floats_is_no_real_value():
    # x**(1/3)'' = -2/9 x**(-5/3) at x = -1e200: 1e-335 times a complex unit, undefined on the reals.
    def second(x: mpmath.mpf) -> mpmath.mpc:
        return -mpmath.mpf(2) / 9 * x ** (-mpmath.mpf(5) / 3)

    assert complex(second(mpmath.mpf(-1e200))) == 0 and _exact(second, (-1e200,)) is None
    assert _exact(second, (1e200,)) is not None


def test_no_second_derivative_is_taken_in_an_input_where_the_first_is_complex():
    # x**y's in y at (-1, 1e200) is i pi, its second -pi**2 (real): no value of (-1)**y, real at integers alone.
    float64 = np.dtype("float64")
    assert _complex_first(SPECIALS["pow"], 1, (-1.0, 1e200), float64)
    assert not _complex_first(SPECIALS["pow"], 1, (2.0, 1.5), float64)
    assert not _complex_first(SPECIALS["pow"], 0, (-1.0, 1e200), float64)  # in x: 1e200 (-1)**(1e200 - 1), real


def test_a_point_mpmath_does_not_return_at_fails_unless_it_is_given_up(monkeypatch):
    def hangs(x: object) -> object:
        while True:
            pass

    monkeypatch.setattr(sys.modules[__name__], "_GUARD_SECONDS", 0.2)
    with pytest.raises(AssertionError, match="list the point in GIVEN_UP"):
        _exact(hangs, (1.0,))
    given_up = _Reference(hangs, frozenset({_point((1.0,))}))
    assert _exact(given_up, (1.0,)) is None and given_up.asked == {("1.0",)}


def _one_sided(row: tuple[float, ...], depth: int, order: tuple[int, ...]) -> tuple[object, ...]:
    """`row` with each zero a number of its sign 10**-depth or so, far below every float (mpmath has no -0), the
    zeros of `row` in the order of `order`'s magnitudes."""
    step = max(50, depth // 10)
    return tuple(
        _tiny_power(math.copysign(1, v) < 0, depth + step * order[k], mpmath.mp.prec) if v == 0 else v
        for k, v in enumerate(row)
    )


@functools.cache
def _tiny_power(negative: bool, exponent: int, prec: int) -> mpmath.mpf:
    """(-)10**-exponent as mpmath reads the decimal at `prec` bits, made once: the stand-ins' exponents run past
    1e300 (10**-(1000 / 5e-324)), whose decimal mpmath raises 10 to the power of, for each ladder of each cell."""
    with mpmath.workprec(prec):
        return mpmath.mpf(f"{'-' if negative else ''}1e-{exponent}")


def _ladder(f: Callable[..., object], row: tuple[float, ...], depth: int, order: tuple[int, ...]) -> float | None:
    """f's limit at `row`'s zeros as its values at 10**-depth and 10**-(2 depth) say: the value where both give
    it, ±inf where it grows with the same sign (sqrt'(+0), loggamma(+0)) or, at one zero beside a nonzero
    input, both are past the floats, else None."""
    near, nearer = _exact(f, _one_sided(row, depth, order)), _exact(f, _one_sided(row, 2 * depth, order))
    if near is None or nearer is None:
        return None
    if abs(near - nearer) <= 1e-30 * max(1.0, abs(near)):
        return round(near, 12) if abs(near) < 1e300 else near
    if np.sign(near) == np.sign(nearer) and abs(nearer) > 1.5 * abs(near) and abs(near) > 100:
        return math.copysign(math.inf, near)
    if (
        math.isinf(near)
        and near == nearer
        and sum(v == 0 for v in row) == 1
        and any(0 < abs(v) < math.inf for v in row)
    ):
        # Both past the floats, about another finite input (x / y at y = 1e-450, x = 1e-38): of one zero only,
        # a direction; not a pole of one input (gamma, digamma at 0, whose value there is the frameworks' own),
        # nor inf * 0 (x log1p(y) at (inf, 0)).
        return near
    return None


def _limit(f: Callable[..., object], row: tuple[float, ...]) -> float | None:
    """f's limit at `row`'s zeros from their sides (`_ladder` at 10**-450); of two zeros, only where the limit is
    the same whichever is the smaller (not atan2's at (0, 0), nor x**y's derivatives).

    A growth is checked again past the scale of the row's tiniest other input t, at 10**-(1000 / t): x**y log(x)
    at y = 5e-324 is -1036 at 1e-450 and -2072 at 1e-900, and 0 in the limit, once x**y is small."""
    found = set()
    tiny = min((abs(v) for v in row if v != 0 and math.isfinite(v)), default=1.0)
    for order in {(0,) * len(row), tuple(range(len(row))), tuple(reversed(range(len(row))))}:
        limit = _ladder(f, row, 450, order)
        if limit is not None and math.isinf(limit) and tiny < 1e-3:
            limit = _ladder(f, row, int(mpmath.mpf(1000) / tiny), order)
        if limit is None:
            return None
        found.add(limit)
    return found.pop() if len(found) == 1 else None


def test_a_limit_is_taken_past_the_scale_of_a_tiny_input():
    # x**y log(x) at (+0, 5e-324): -1036 at x = 1e-450 and -2072 at 1e-900, a growth it is not: 0 once x**y is small.
    assert _limit(lambda x, y: x**y * mpmath.log(x), (0.0, 5e-324)) == 0
    # y / x at x -> +0 beside y = 1e-38: past the floats at 1e-450 and at 1e-900 alike, inf.
    assert _limit(lambda x, y: y / x, (0.0, 1.1754943508222875e-38)) == math.inf
    # A pole of a lone input is not: its value there is the frameworks' own (IEEE's, or nan).
    assert _limit(lambda x: mpmath.gamma(x), (-0.0,)) is None


def _flushed(row: tuple[float, ...], dtype: np.dtype) -> list[tuple[float, ...]]:
    """`row` as XLA on CPU may read it: each subnormal operand a zero of its sign (denormals-are-zero), or not.

    XLA flushes an operation's subnormal operands, and a framework function is many operations: atan2 of
    (5e-324, 5e-324) reads one of them as 0 (pi/2), so every subset of them is a reading.
    """
    subnormal = [k for k, v in enumerate(row) if 0 < abs(v) < float(np.finfo(dtype).tiny)]
    readings = []
    for mask in range(1, 2 ** len(subnormal)):
        flushed = {k for j, k in enumerate(subnormal) if mask >> j & 1}
        readings.append(tuple(math.copysign(0.0, v) if k in flushed else v for k, v in enumerate(row)))
    return readings


#: The values IEEE 754 and C99's Annex F give at signed zeros and infinities, as numpy's C library computes them:
#: the framework's own there is right where mpmath, which has no signed zero and reads x**y at (inf, -0) as a
#: limit, differs (atan2(+0, -0) = pi, pow(x, ±0) = 1).
IEEE_VALUES: dict[str, Callable[..., object]] = {"atan2": np.arctan2, "hypot": np.hypot, "pow": np.power}

#: Max and Min at a tie, infinite ones included: each input's derivative is 1/2 (both frameworks' own
#: convention, the mean of the two one-sided derivatives), the second 0; mpmath's Heaviside of inf - inf is not
#: a tie.  A nan input gives a nan derivative, as everywhere.
TIES = {"first": 0.5, "jvp": 0.5, "second": 0.0}


def special_expected(
    special: Special, order: str, f: Callable[..., object], row: tuple[float, ...], backend: str, dtype: np.dtype
) -> list[float]:
    """The exact values a cell may give at `row`: at it, at its zeros' one-sided limits, IEEE's where the value
    at a signed zero or an infinity is IEEE's, and (JAX) at each of its flushed readings, or nan where a reading
    is undefined (atan2's partial at (0, 5e-324) read as (0, 0))."""
    if special.name in ("Max", "Min") and order in TIES and row[0] == row[1]:
        return [TIES[order]]
    found = []
    for k, r in enumerate([row, *_flushed(row, dtype)] if backend == "jax" else [row]):
        at = [e for e in (_exact(f, r), _limit(f, r) if 0 in r else None) if e is not None]
        if not at and not k:
            return []  # undefined at the point itself: no value to expect (a negative base's root)
        found += at or [math.nan]
        # IEEE's at a reading's signed zeros too: XLA's flushed (5e-324, -0) is (+0, -0), whose atan2 is pi.
        if order == "value" and special.name in IEEE_VALUES and any(v == 0 or math.isinf(v) for v in r):
            with np.errstate(all="ignore"):
                found.append(float(IEEE_VALUES[special.name](*np.asarray(r, dtype=dtype))))
    return found


#: Where IEEE 754 (C's Annex F, and both frameworks) gives a number for a nan input: the value is the same for
#: every other input there.
IEEE_BEYOND_NAN: dict[str, Callable[[tuple[float, ...]], bool]] = {
    "hypot": lambda row: any(math.isinf(v) for v in row),  # hypot(±inf, nan) = inf
    "pow": lambda row: row[1] == 0 or row[0] == 1,  # pow(nan, ±0) = 1, pow(1, nan) = 1
}


def special_agrees(got: float, exact: float, dtype: np.dtype) -> bool:
    """Within `TOLERANCE_EPS` roundings of the exact value, relative to it; below the smallest normal, about it.

    No absolute tolerance relative to 1 here: the values at these points are the tiny and the huge ones.
    """
    info = np.finfo(dtype)
    tolerance = TOLERANCE_EPS[dtype.name] * float(info.eps)
    if math.isnan(exact):
        return math.isnan(got)
    if abs(exact) > float(info.max):
        return math.isinf(got) and np.sign(got) == np.sign(exact)
    if math.isinf(exact) or not math.isfinite(got):
        return got == exact
    return abs(got - exact) <= tolerance * abs(exact) + 2 * float(info.tiny)


#: Each special reference with its values kept on disk (tests/reference_cache.py), by (function, order, input varied):
#: the backends of a dtype ask for the same exact values, float32's for many of float64's, and some take mpmath most
#: of a second (beta's partials, digamma at hundreds of digits).  `special_cell` saves them as it ends.
_KEPT_REFERENCES: dict[tuple[str, str, int], KeptReference] = {}


def _remembered(special: Special, order: str, varied: int) -> KeptReference:
    """`special_reference`'s mpmath function, each value (or what `_exact` reads as no value) computed once and kept.

    Its values are decided by its sympy expression, or, for a reference of this module's own (`OWN_REFERENCES`), by
    this module's source."""
    key = (special.name, order, varied)
    if key not in _KEPT_REFERENCES:
        reference, expr = special_reference(special, order, varied)
        decided = Path(__file__).read_text() if (special.name, order) in OWN_REFERENCES else sp.srepr(expr)
        identity = identity_of("special-value reference", special.name, order, str(varied), decided)
        _KEPT_REFERENCES[key] = KeptReference(identity, reference)
    return _KEPT_REFERENCES[key]


class _Counted:
    """An mpmath reference that counts its calls: psi(1, x), with no value at the pole x = 0 (ZeroDivisionError)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, x: mpmath.mpf) -> mpmath.mpf:
        self.calls += 1
        return mpmath.psi(1, x)


def _kept_at(identity: str, f: Callable[..., object], points: list[float], prec: int) -> list[object]:
    kept = KeptReference(identity, f)
    found: list[object] = []
    with mpmath.workprec(prec):
        for x in points:
            try:
                found.append(kept(mpmath.mpf(x)))
            except NO_VALUE as exc:
                found.append(type(exc))
    kept.save()
    return found


def test_a_kept_reference_is_read_back_as_computed_in_another_process(tmp_path, monkeypatch):
    monkeypatch.setenv("RULEGEN_TESTS_REFERENCE_CACHE", str(tmp_path))
    identity = identity_of("trigamma")
    first, again = _Counted(), _Counted()
    points = [1e-300, 0.5, 0.0, -2.5]
    computed = _kept_at(identity, first, points, 1100)
    read = _kept_at(identity, again, points, 1100)
    assert first.calls == 4 and again.calls == 0
    assert read == computed and computed[2] is ZeroDivisionError  # the pole's "no value" too
    digits = [[mpmath.nstr(v, 300) for k, v in enumerate(values) if k != 2] for values in (read, computed)]
    assert digits[0] == digits[1]  # every digit at the precision computed, not a float's


def test_a_kept_value_is_computed_again_at_another_precision_or_reference(tmp_path, monkeypatch):
    monkeypatch.setenv("RULEGEN_TESTS_REFERENCE_CACHE", str(tmp_path))
    first = _Counted()
    _kept_at(identity_of("trigamma"), first, [0.5], 200)
    for identity, prec in ((identity_of("trigamma"), 300), (identity_of("trigamma, changed"), 200)):
        again = _Counted()
        _kept_at(identity, again, [0.5], prec)
        assert again.calls == 1, (identity, prec)


def test_a_special_reference_s_values_are_kept_under_its_expression_and_the_deriving_code(monkeypatch):
    import rulegen.derive.stored

    def identity(special: Special, order: str, varied: int) -> str:
        monkeypatch.setattr(sys.modules[__name__], "_KEPT_REFERENCES", {})
        kept = _remembered(special, order, varied)
        assert kept.path is not None
        return kept.path.name

    beta, lgamma = SPECIALS["beta"], SPECIALS["loggamma"]
    ids = {identity(beta, "first", 0), identity(beta, "first", 1), identity(beta, "second", 0)}
    assert len(ids) == 3 and identity(beta, "first", 0) != identity(lgamma, "first", 0)
    # A rule's expression changed: its derivative's expression, and the file, change with it.
    monkeypatch.setattr(
        sys.modules[__name__],
        "special_reference",
        functools.cache(lambda special, order, varied: (mpmath.psi, sp.Symbol("x0") + 1)),
    )
    changed = identity(beta, "first", 0)
    assert changed not in ids
    # The code that evaluates it (the registry's mpmath implementations, mpmath itself) changed.
    monkeypatch.setattr(rulegen.derive.stored, "deriving_fingerprint", lambda: "another rulegen")
    assert identity(beta, "first", 0) not in {changed, *ids}


def test_two_workers_kept_values_are_merged(tmp_path, monkeypatch):
    monkeypatch.setenv("RULEGEN_TESTS_REFERENCE_CACHE", str(tmp_path))
    identity = identity_of("trigamma")
    one, other = KeptReference(identity, _Counted()), KeptReference(identity, _Counted())
    with mpmath.workprec(100):
        one(mpmath.mpf(0.5)), other(mpmath.mpf(1.5))  # both read the file before either saves
        one.save(), other.save()
        third = _Counted()
        _kept_at(identity, third, [0.5, 1.5], 100)
    assert third.calls == 0


def test_no_reference_is_kept_where_the_cache_is_off(tmp_path, monkeypatch):
    monkeypatch.setenv("RULEGEN_TESTS_REFERENCE_CACHE", "off")
    monkeypatch.chdir(tmp_path)
    counted = _Counted()
    _kept_at(identity_of("trigamma"), counted, [0.5], 100)
    _kept_at(identity_of("trigamma"), counted, [0.5], 100)
    assert counted.calls == 2 and not list(tmp_path.iterdir())


def special_mismatches(
    special: Special,
    order: str,
    varied: int,
    got: np.ndarray,
    columns: list[np.ndarray],
    backend: str,
    asked: set[tuple[str, int, tuple[str, ...]]] | None = None,
) -> list[str]:
    """The points where `got` is not the exact value; `asked` gathers the points of `GIVEN_UP` asked for."""
    dtype = columns[0].dtype
    expr = special_reference(special, order, varied)[1]
    given_up = GIVEN_UP.get((special.name, dtype.name), frozenset())
    f = _Reference(
        _remembered(special, order, varied),
        frozenset(point for o, v, point in given_up if (o, v) == (order, varied)),
    )
    got = np.broadcast_to(np.asarray(got, dtype=np.float64), columns[0].shape)
    found = []
    symbols = special.expr()[1]
    for k in range(len(got)):
        row = tuple(float(c[k]) for c in columns)
        nan_free = expr.free_symbols.isdisjoint(s for s, v in zip(symbols, row, strict=True) if v != v)
        if not nan_free:
            # nan in, nan out; a derivative that is a constant (a step's) is that constant everywhere, and one
            # that does not read the nan input (xlogy's in x, log(y)) is its value at the others.
            ok = math.isnan(got[k]) or (expr.is_number and got[k] == float(expr))
            ok = ok or (order == "value" and IEEE_BEYOND_NAN.get(special.name, lambda _: False)(row))
            if not ok:
                found.append(f"{order} in x{varied} at {row}: {got[k]!r}, exact nan")
            continue
        if not special.inside(row) or (order == "second" and _complex_first(special, varied, row, dtype)):
            continue
        expected = special_expected(special, order, f, row, backend, dtype)
        if expected and not any(special_agrees(float(got[k]), e, dtype) for e in expected):
            found.append(f"{order} in x{varied} at {row}: {got[k]!r}, exact {expected[0]!r}")
    if asked is not None:
        asked.update((order, varied, point) for point in f.asked)
    return found


def _complex_first(special: Special, varied: int, row: tuple[float, ...], dtype: np.dtype) -> bool:
    """Whether the first derivative in input `varied` at `row` is complex: the real function has no derivative in
    that input there, and the second is no value of it where its imaginary parts cancel (x**y's in y at
    (-1, 1e200): i pi, then -pi**2, where both frameworks' own are nan; (-1)**y is real at integers y alone)."""
    given_up = GIVEN_UP.get((special.name, dtype.name), frozenset())
    if ("first", varied, _point(row)) in given_up:
        return False
    first = _remembered(special, "first", varied)
    try:
        with mpmath.workdps(_digits(row)):
            return _complex(first(*(mpmath.mpf(v) for v in row)))
    except (ValueError, ZeroDivisionError, OverflowError, TypeError):
        return False


def _given_up_unasked(name: str, dtype: str, asked: set[tuple[str, int, tuple[str, ...]]]) -> list[str]:
    """The points `GIVEN_UP` lists for (name, dtype) that a JAX cell did not ask for (JAX's cells ask for every point
    torch's do, and the flushed readings too): a list that no longer says which points are checked."""
    return [
        f"GIVEN_UP lists {point}, which is not asked for" for point in GIVEN_UP.get((name, dtype), frozenset()) - asked
    ]


def special_cell(package: tuple, name: str, backend: str, dtype: str) -> list[str]:
    special = SPECIALS[name]
    jax_pkg, torch_pkg = package
    framework = backend.split(".")[0]
    f = getattr(torch_pkg if framework == "torch" else jax_pkg, special.rule)
    columns = special.columns(np.dtype(dtype))
    orders = {
        "jax": jax_orders,
        "jax.jit": functools.partial(jax_orders, jit=True),
        "torch": torch_orders,
        "torch.compile": compiled_torch_orders,
    }[backend]
    failures = []
    asked: set[tuple[str, int, tuple[str, ...]]] = set()
    for varied in range(special.arity):
        try:
            results = list(orders(f, as_arrays(columns, framework), varied))
        except Exception as exc:
            return [f"raised {type(exc).__name__}: {exc}"]
        for order, got in results:
            if varied and order == "value":
                continue
            failures += special_mismatches(special, order, varied, to_numpy(got), columns, framework, asked)
    if framework == "jax":
        failures += _given_up_unasked(name, dtype, asked)
    for kept in _KEPT_REFERENCES.values():
        kept.save()
    return failures


def special_cells() -> list[tuple[str, str, str]]:
    return [(name, backend, dtype) for name in SPECIALS for backend in SPECIAL_BACKENDS for dtype in DTYPES]


#: JAX eager and under `jax.jit` (XLA compiles each order whole, and may fuse and reorder what eager
#: dispatch computes op by op), and torch.
SPECIAL_BACKENDS = ("jax", "jax.jit", "torch")


# Measured with this module's special values on the bundled registry: why each fails, and the first point.
SPECIAL_KNOWN: dict[tuple[str, str], tuple[tuple[tuple[str, str], ...], str, str]] = {}


#: The special-value cells known to fail, by (function, backend, dtype, order): why, and a point that shows it.
#: Each is a defect of the generated code or of the framework function it calls that no mechanism of rulegen's
#: mends yet, not a limit of the test.  An order listed here that passes fails the test (strict).
SPECIAL_KNOWN_WRONG: dict[tuple[str, str, str, str], str] = {
    (name, backend, dtype, order): f"{why} (e.g. {example})"
    for (name, order), (cells, why, example) in SPECIAL_KNOWN.items()
    for backend, dtype in cells
}


def _shares_references(name: str, dtype: str) -> pytest.MarkDecorator:
    """The cells of one function and dtype run in one process (`--dist loadgroup`): their backends ask mpmath for
    the same values, which `_KEPT_REFERENCES` keeps (beta's float64 cells took 35 s of CPU each on two workers)."""
    return pytest.mark.xdist_group(f"special-{name}-{dtype}")


@pytest.mark.parametrize(
    ("name", "backend", "dtype"),
    [
        pytest.param(*c, marks=[_shares_references(c[0], c[2]), *([pytest.mark.slow] if c[2] == "float32" else [])])
        for c in special_cells()
    ],
)
def test_special_values(package, name, backend, dtype):
    failures = special_cell(package, name, backend, dtype)
    known = {o: why for (n, b, d, o), why in SPECIAL_KNOWN_WRONG.items() if (n, b, d) == (name, backend, dtype)}
    for order in known:
        assert any(f.startswith(f"{order} ") for f in failures), (
            f"{name} {backend} {dtype} {order} now passes: remove it from SPECIAL_KNOWN ({known[order]})"
        )
    left = [f for f in failures if f.split()[0] not in known]
    assert not left, f"{len(left)} points wrong:\n" + "\n".join(left[:16])
    if known:
        pytest.xfail("; ".join(f"{o}: {why}" for o, why in known.items()))


#: A sample of the special-value functions under torch.compile, value and first derivative: inductor compiles
#: each for some seconds, too long for the whole matrix in every run.
COMPILED_SAMPLE = ("atan", "erf", "Abs", "Max", "xlogy", "digamma", "cbrt")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "dtype"),
    [pytest.param(n, d, marks=_shares_references(n, d), id=f"{n}-{d}") for n in COMPILED_SAMPLE for d in DTYPES],
)
def test_special_values_under_torch_compile(package, name, dtype):
    failures = special_cell(package, name, "torch.compile", dtype)
    known = COMPILED_KNOWN.get((name, dtype))
    if known:
        assert failures, f"{name} {dtype} under torch.compile now passes: remove it from COMPILED_KNOWN ({known})"
        pytest.xfail(known)
    assert not failures, f"{len(failures)} points wrong:\n" + "\n".join(failures[:16])


#: The sample's cells known to fail under torch.compile, with why (strict, as SPECIAL_KNOWN).
COMPILED_KNOWN = {
    ("erf", "float32"): (
        "inductor's float32 erf is 0 at |x| = 1e-30 and 3.6e-31, where it is 1.13 x (eager torch's is right): "
        "its own lowering of erf, which the generated code calls as torch.special.erf"
    ),
}


@pytest.mark.slow
def test_beta_forward_and_backward_under_torch_compile_match_eager(package):
    # beta's torch code is a chain of cases (Stirling's difference, reflection, the overflow edges) and its
    # partials the runtime's beta_slope: inductor fuses and reorders them, which eager dispatch does not.
    # One point in each case: both positive, one large, one negative (reflected), beta's over- and underflow.
    _, torch_pkg = package
    a = torch.tensor([0.7, 2.5, 30.0, 1e4, -2.5, -30.7, 1e200, 0.5, 171.0], dtype=torch.float64)
    b = torch.tensor([1.7, 0.3, 25.1, 0.7, 0.7, 1.7, 0.5, 1e-300, 200.0], dtype=torch.float64)
    weights = torch.linspace(0.5, 1.5, a.numel(), dtype=torch.float64)

    def loss(a, b):
        return (torch_pkg.c_beta(a, b) * weights).sum()

    results = []
    for f in (torch.compile(loss), loss):
        leaves = (a.clone().requires_grad_(), b.clone().requires_grad_())
        value = f(*leaves)
        results.append((value.detach(), *torch.autograd.grad(value, leaves)))
    (compiled, *compiled_partials), (eager, *eager_partials) = results
    torch.testing.assert_close(compiled, eager, rtol=1e-13, atol=0)
    for got, want in zip(compiled_partials, eager_partials, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-13, atol=0)
    assert torch.isfinite(eager_partials[0]).all() and eager_partials[1][7] == -math.inf
