"""Forms that overflow at wide magnitudes, rewritten to stable ones before deriving (rulegen.derive.forms, issue 25).

`log(2**x + 2**y)/log(2)` (logaddexp2) overflows once 2**x does (x = 1024
in float64, 128 in float32), `gamma(x + 3)/gamma(x)` (poch) once gamma(x)
does (x = 171.6, 35 in float32), `log(erfcx(x))` once erfcx(x) ~
2*exp(x**2) does (x = -26.6, -9.3 in float32), and `log(abs(gamma(x)))`
once |Gamma(x)| under- or overflows (x = -184.5, 171.7).  Each is compared, value and
first and second derivative, in both backends and dtypes, with a 40-digit
mpmath reference there and at ordinary points.
"""

from __future__ import annotations

import importlib

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
import sympy as sp
import torch

from rulegen.derive.forms import canonical
from rulegen.derive.functions import erfcx, logaddexp
from tests.conftest import built_package

jax.config.update("jax_enable_x64", True)

RULES = """
rules:
  - {name: logaddexp2_written_out, inputs: [x, y], forward: 'log(2**x + 2**y) / log(2)'}
  - {name: poch_written_out, inputs: [x], forward: 'gamma(x + 3) / gamma(x)'}
  - {name: log_erfcx, inputs: [x], forward: 'log(erfcx(x))'}
  - {name: log_abs_gamma, inputs: [x], forward: 'log(abs(gamma(x)))'}
  - {name: abs_loggamma, inputs: [x], forward: 'abs(loggamma(x))'}
"""

Y = 0.5  # logaddexp2's second argument


def _mp_erfcx(x):
    return mpmath.exp(x**2) * mpmath.erfc(x)


REFERENCES = {
    "logaddexp2_written_out": lambda x: mpmath.log(2**x + 2 ** mpmath.mpf(Y)) / mpmath.log(2),
    "poch_written_out": lambda x: mpmath.rf(x, 3),
    "log_erfcx": lambda x: mpmath.log(_mp_erfcx(x)),
    "log_abs_gamma": lambda x: mpmath.log(abs(mpmath.gamma(x))),
    "abs_loggamma": lambda x: abs(mpmath.log(abs(mpmath.gamma(x)))),
}
# Points by dtype: past where the written form overflows, and ordinary ones (poch's negative ones by its sign).
# Not log_erfcx at 1e4: its second derivative there is erfcx's own cancellation (a conformance xfail).
POINTS = {
    "logaddexp2_written_out": {"float32": [-3.0, 0.7, 60.0, 200.0], "float64": [-3.0, 0.7, 200.0, 2000.0]},
    "poch_written_out": {"float32": [-2.5, -0.7, 0.3, 7.5, 40.0, 100.0], "float64": [-2.5, -0.7, 0.3, 180.0, 1e4]},
    # 9.27 and 26.6: where JAX's own erfcx is 0 (float32 [9.195, 9.419], float64 [26.544, 26.641]), and its log -inf.
    "log_erfcx": {
        "float32": [-12.0, -3.0, 0.5, 9.27, 30.0],
        "float64": [-30.0, -12.0, -3.0, 0.5, 26.6, 30.0, 100.0],
    },
    # Where |Gamma| underflows (below -184 in float64, -10000.3 the issue's point) and overflows (past 171.6); float32's
    # negative points exact in it, where psi(x) moves by 15 x's rounding.
    "log_abs_gamma": {
        "float32": [-10000.25, -117.25, -2.5, 0.3, 25.1, 200.0],
        "float64": [-10000.3, -184.5, -117.3, -2.5, 0.3, 171.7, 1e4],
    },
    # loggamma's sign changes at 1 and 2: its abs's derivative is sign(loggamma) digamma, without real parts.
    "abs_loggamma": {"float32": [-10000.25, -2.5, 0.3, 1.5, 25.1], "float64": [-10000.3, -2.5, 0.3, 1.5, 25.1]},
}
TOLERANCE = {"float32": 2e-4, "float64": 1e-9}


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    with built_package(tmp_path_factory.mktemp("wide"), RULES, "rg_wide"):
        yield importlib.import_module("rg_wide.jax"), importlib.import_module("rg_wide.torch")


def exact(name: str, points: list[float]) -> list[np.ndarray]:
    with mpmath.workdps(40):
        return [np.array([float(mpmath.diff(REFERENCES[name], mpmath.mpf(p), n)) for p in points]) for n in range(3)]


def orders(backend: str, f, x):
    """Value, first and second derivative of an elementwise f at x."""
    if backend == "jax":
        grad = jax.grad(lambda a: jnp.sum(f(a)))
        return [np.asarray(v) for v in (f(x), grad(x), jax.grad(lambda a: jnp.sum(grad(a)))(x))]
    grad = torch.func.grad(lambda a: f(a).sum())
    return [v.numpy() for v in (f(x), grad(x), torch.func.grad(lambda a: grad(a).sum())(x))]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("backend", ["jax", "torch"])
@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_a_wide_form_is_finite_and_right_to_second_order(package, name, backend, dtype):
    points = POINTS[name][dtype]
    module = package[0] if backend == "jax" else package[1]
    rule = getattr(module, name)
    if backend == "jax":
        x = jnp.asarray(points, dtype=dtype)
        y = jnp.full_like(x, Y)
    else:
        x = torch.tensor(points, dtype=getattr(torch, dtype))
        y = torch.full_like(x, Y)
    f = (lambda a: rule(a, y)) if name == "logaddexp2_written_out" else rule
    for order, (got, want) in enumerate(zip(orders(backend, f, x), exact(name, points), strict=True)):
        # Relative to the value or to 1: a derivative that is 0 to the dtype's precision is right as 0.
        np.testing.assert_allclose(got, want, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype], err_msg=f"order {order}")


def test_the_forms_hold_on_the_real_line_only():
    x, y = sp.symbols("x y", real=True)
    assert canonical(sp.log(2**x + 2**y) / sp.log(2)) == logaddexp(x * sp.log(2), y * sp.log(2)) / sp.log(2)
    assert canonical(sp.log(sp.exp(x) + sp.exp(2 * y))) == logaddexp(x, 2 * y)
    assert not canonical(sp.gamma(x + 3) / sp.gamma(x)).has(sp.gamma)
    assert canonical(sp.log(erfcx(x))).has(sp.erfc)
    assert canonical(sp.log(sp.Abs(sp.gamma(x + 1)))) == sp.loggamma(x + 1)
    # A lone gamma, a sum with a number, and a complex rule keep what they are.
    assert canonical(sp.gamma(x) * y) == sp.gamma(x) * y
    assert canonical(sp.log(2 + 2**x)) == sp.log(2 + 2**x)
    z = sp.Symbol("z")
    assert not canonical(sp.log(sp.exp(z) + sp.exp(2 * z)), complex_rule=True).has(logaddexp)
    assert canonical(sp.log(sp.Abs(sp.gamma(z))), complex_rule=True) == sp.log(sp.Abs(sp.gamma(z)))
