"""The conformance matrix of the function layer, generated from the registry (rulegen.derive.functions.REGISTRY).

Every function a rule may call, built as a rule of its own, against a
40-digit mpmath reference on points across its whole domain (the registry's
`domain`), |x| up to 1e4 and the negative axis included:

    function x {array, static Python number, integer array, complex where holomorphic}
             x {value, first and second derivative, jvp} x {JAX, torch} x {float32, float64}

A static Python number and an integer array are values only (neither is
differentiated); the integer array's result is in the default float dtype.
A new registry entry is in the matrix by being registered: it passes, or
the registry says where its framework implementation is wrong.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
import sympy as sp
import torch

from rulegen.derive import functions as fn
from tests.conftest import built_package

jax.config.update("jax_enable_x64", True)

# Rule functions that build others (Piecewise from where's condition, Min and Max from clip), or
# take a condition: no function of numbers of their own.
COMPOSITIONS = frozenset({"Piecewise", "where", "clip"})
FUNCTIONS = [f for f in fn.REGISTRY if not f.internal and f.name not in COMPOSITIONS]

# Across the real line, the negative axis and |x| up to 1e4 included; no point an integer (poles of gamma).
LINE = (-10000.3, -117.3, -30.7, -2.5, -0.7, 0.3, 1.7, 25.1, 117.3, 10000.3)
INTEGERS = (-10000, -117, -30, -3, 0, 2, 25, 117, 10000)
COMPLEX = (0.5 + 0.3j, -1.5 + 0.7j, 0.3 - 2.1j, -0.2 - 0.4j)
# Where the other arguments sit while one is varied: inside every domain.
FIXED = 0.7
DTYPES = ("float32", "float64")
ORDERS = ("value", "first", "second", "jvp")


def points(interval: tuple[float, float]) -> list[float]:
    lo, hi = interval
    found = [p for p in LINE if lo < p < hi]
    if math.isfinite(lo) and math.isfinite(hi):
        found += [lo + (hi - lo) * k for k in (0.02, 0.25, 0.6, 0.97)]
    elif math.isfinite(lo):
        found += [lo + 1e-3, lo + 0.4]
    return sorted(set(found))


def fixed(interval: tuple[float, float]) -> float:
    lo, hi = interval
    return FIXED if lo < FIXED < hi else (lo + hi) / 2


@dataclass(frozen=True)
class Call:
    """One registered function as a rule calls it: its orders as literals, then its arguments."""

    function: fn.MathFunction

    @property
    def orders(self) -> tuple[int, ...]:
        return tuple(int(self.function.argument_domain(k)[0]) for k in range(self.function.orders))

    @property
    def arity(self) -> int:
        return self.function.argument_counts[0] - self.function.orders

    def text(self, arguments: list[str]) -> str:
        return f"{self.function.name}({', '.join([*map(str, self.orders), *arguments])})"

    def domain(self, k: int) -> tuple[float, float]:
        return self.function.argument_domain(self.function.orders + k)

    def grid(self, varied: int) -> list[list[float]]:
        """Columns of arguments: argument `varied` across its domain, the others fixed."""
        column = points(self.domain(varied))
        return [column if k == varied else [fixed(self.domain(k))] * len(column) for k in range(self.arity)]

    def expr(self, *, real: bool) -> tuple[sp.Expr, list[sp.Symbol]]:
        # Real, as a real rule's inputs are: d/dx Abs(x) is sign(x) only then.
        symbols = [sp.Symbol(f"x{k}", real=real or None) for k in range(self.arity)]
        return self.function.sympy(*self.orders, *symbols), symbols


CALLS = {f.name: Call(f) for f in FUNCTIONS}


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
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    with built_package(tmp_path_factory.mktemp("conformance"), rules_text(), "rg_conformance"):
        yield importlib.import_module("rg_conformance.jax"), importlib.import_module("rg_conformance.torch")


# -------------------------------------------------------------------- the reference


def reference(call: Call, order: str, varied: int, *, real: bool = True) -> Callable[..., mpmath.mpf]:
    expr, symbols = call.expr(real=real)
    for _ in range({"value": 0, "first": 1, "jvp": 1, "second": 2}[order]):
        expr = sp.diff(expr, symbols[varied])
        # Steps and kinks differentiate to 0 almost everywhere, as in the frameworks (and rulegen.derive.partials).
        expr = expr.replace(
            lambda e: isinstance(e, sp.Derivative) and isinstance(e.expr, (sp.floor, sp.ceiling)), lambda _: sp.S.Zero
        )
        expr = expr.replace(lambda e: isinstance(e, fn.VANISHING), lambda _: sp.S.Zero)
    return sp.lambdify(symbols, expr, modules=[dict(fn.MPMATH_IMPLEMENTATIONS), "mpmath"])


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


def jax_orders(f: Callable[..., jax.Array], args: list[jax.Array], varied: int) -> Iterator[tuple[str, jax.Array]]:
    def along(g: Callable[..., jax.Array]) -> Callable[..., jax.Array]:
        # Elementwise: the gradient of the sum is the derivative at each point.
        return jax.grad(lambda *a: jnp.sum(g(*a)), argnums=varied)

    yield "value", f(*args)
    yield "first", along(f)(*args)
    yield "second", along(along(f))(*args)
    tangents = [jnp.ones_like(a) if k == varied else jnp.zeros_like(a) for k, a in enumerate(args)]
    yield "jvp", jax.jvp(f, tuple(args), tuple(tangents))[1]


def torch_orders(
    f: Callable[..., torch.Tensor], args: list[torch.Tensor], varied: int
) -> Iterator[tuple[str, torch.Tensor]]:
    def along(g: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        return torch.func.grad(lambda *a: g(*a).sum(), argnums=varied)

    yield "value", f(*args)
    yield "first", along(f)(*args)
    yield "second", along(along(f))(*args)
    tangents = tuple(torch.ones_like(a) if k == varied else torch.zeros_like(a) for k, a in enumerate(args))
    yield "jvp", torch.func.jvp(f, tuple(args), tangents)[1]


def to_numpy(value: object) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().numpy(force=True)
    return np.asarray(value)


# -------------------------------------------------------------------- the matrix


def cells() -> list[tuple[str, str, str, str]]:
    """(function, kind, backend, dtype): each runs every order it has."""
    found = []
    for name, call in CALLS.items():
        kinds = ["array", "static", "integer"] + (["complex"] if call.function.holomorphic else [])
        found += [(name, kind, backend, dtype) for kind in kinds for backend in ("jax", "torch") for dtype in DTYPES]
    return found


def cell_count() -> int:
    """Cells of the matrix: function x kind x order x backend x dtype (values only for statics and integers)."""
    return sum(len(ORDERS) if kind in ("array", "complex") else 1 for _, kind, _, _ in cells())


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
def _every(names: tuple[str, ...], kind: str, reason: str) -> dict[tuple[str, str, str, str], str]:
    return {(n, kind, b, d): reason for n in names for b in ("jax", "torch") for d in DTYPES}


KNOWN_WRONG: dict[tuple[str, str, str, str], str] = {
    **_every(
        ("beta",),
        "array",
        "derivatives where a + b is a pole of Gamma (a = -30.7, b = 0.7): beta is 0 there, its derivative "
        "beta * (digamma(a) - digamma(a + b)) is 0 * inf, nan, where the limit is finite",
    ),
    **_every(
        ("beta",),
        "integer",
        "beta of a non-positive integer is a ratio of two poles of Gamma, nan, where its limit is finite",
    ),
    **_every(
        ("bessel_i0", "bessel_i1"),
        "array",
        "derivatives past the float range: I0 - I1/x of two infinities is nan where the derivative is inf "
        "(|x| = 1e4; float32 from |x| = 117)",
    ),
    **{
        ("beta", "static", backend, "float64"): "beta(-10000.3, 0.7) as Python numbers, from log|Gamma| of a and "
        "a + b (about -8.2e4 each) differenced: 1.6e4 eps"
        for backend in ("jax", "torch")
    },
}


@pytest.mark.unit
def test_the_matrix_has_every_registered_function():
    assert {name for name, _, _, _ in cells()} == {f.name for f in FUNCTIONS}
    assert cell_count() > 1000


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
