"""A static input (a Python number) gives what the same input given as an array gives, where Python's math raises.

Static-only arithmetic is Python's: `math.log(0.0)`, `math.exp(1000.0)`,
`1 / 0.0`, `1e200 ** 2` and `math.sqrt(-1.0)` raise, where the frameworks'
arrays give -inf, inf, inf, inf and nan.  Generated code computes it through
the runtime's `_numbers` (rulegen/runtime/*/_numbers.py).  Each expression
here is built twice, once with `s` static and once with `s` an array, and
both are called at the points where Python raises.
"""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest

from rulegen.render.build import build

EXPRESSIONS = {
    "log": "x * log(s)",
    "div": "x * sin(1 / s) + x",
    "pow": "x * s**2 + x / s**3",
    "sqrt": "x * sqrt(s) + x * sqrt(1 - s**2)",
    "exp": "tanh(x * exp(s)) + x * exp(s)",
    "sinh_cosh": "x * sinh(s) + x * cosh(s) + expm1(s)",
    "inverse": "x * asin(s) + x * acos(s) + acosh(s) + atanh(s)",
    "periodic": "x * sin(s) + cos(s) * tan(s)",
    "gamma": "x * gamma(s) + loggamma(s)",
    "log1p": "x * log1p(s)",
    "floor": "x * floor(s) + ceiling(s)",
}
POINTS = [0.0, -0.0, -1.0, 1.0, -3.0, 1e200, -1e200, 1000.0, -1000.0, math.inf, -math.inf, math.nan]


def _rules() -> str:
    text = "rules:\n"
    for name, forward in EXPRESSIONS.items():
        text += (
            f"  - name: static_{name}\n    inputs:\n      x: {{}}\n      s: {{static: true, default: 1.0}}\n"
            f"    forward: {forward}\n    stabilise: false\n"
            f"  - name: array_{name}\n    inputs: [x, s]\n    forward: {forward}\n    stabilise: false\n"
        )
    return text


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    import sys

    root = tmp_path_factory.mktemp("static_numbers")
    (root / "rules.yaml").write_text(_rules())
    build([root / "rules.yaml"], root / "rg_static_numbers", jobs=2)
    sys.path.insert(0, str(root))
    try:
        yield importlib.import_module("rg_static_numbers.jax"), importlib.import_module("rg_static_numbers.torch")
    finally:
        sys.path.remove(str(root))


@pytest.mark.parametrize("name", EXPRESSIONS)
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_a_static_gives_what_an_array_gives_where_python_raises(packages, name, backend):
    import jax
    import torch

    jax_pkg, torch_pkg = packages
    x = np.array([0.5, -2.0])
    mismatched = []
    static_f = getattr(jax_pkg if backend == "jax" else torch_pkg, f"static_{name}")
    for s in POINTS:
        if backend == "torch" and name == "gamma" and s == 0 and math.copysign(1, s) < 0:
            # torch's gamma of arrays (exp(gammaln) times Gamma's sign) is +inf at -0.0, where JAX's
            # arrays and C's tgamma give -inf; the static gives JAX's.
            continue
        if backend == "jax":
            module, as_array = jax_pkg, jax.numpy.asarray
            static = getattr(module, f"static_{name}")(as_array(x), s)
            array = getattr(module, f"array_{name}")(as_array(x), as_array(np.full_like(x, s)))
            gradient = jax.grad(lambda t, s=s: static_f(t, s).sum())(as_array(x))
        else:
            module = torch_pkg
            static = getattr(module, f"static_{name}")(torch.from_numpy(x.copy()), s)
            array = getattr(module, f"array_{name}")(torch.from_numpy(x.copy()), torch.from_numpy(np.full_like(x, s)))
            t = torch.from_numpy(x.copy()).requires_grad_()
            getattr(module, f"static_{name}")(t, s).sum().backward()
            gradient = t.grad
        static, array = np.asarray(static), np.asarray(array)
        if not np.allclose(static, array, rtol=1e-12, atol=0, equal_nan=True):
            mismatched.append(f"s={s}: static {static}, array {array}")
        assert np.asarray(gradient).shape == x.shape  # the derivative's static arithmetic raises nothing either
    assert not mismatched, "\n".join(mismatched)
