"""A partial that reads what the forward computes: the cost credit for it, the clamp that keeps it, and the
order of a product's integer that needs no clamp at all.

A derivative that computes the forward's function again at a clamped input (the whole input held within
+-1e4) costs a second `exp` or `sigmoid` where autodiff reads the forward's; clamping only the factors that
overflow (and multiplying an integer last) keeps the forward's function, and the cost model credits the read.
"""

from __future__ import annotations

import numpy as np
import sympy as sp

from rulegen.derive.functions import sigmoid
from rulegen.derive.stabilise import BUDGET, Sampling, stabilise
from rulegen.derive.stabilise.cost import BACKENDS, Free, cost, reused
from rulegen.derive.stabilise.points import _DTYPES, _measure, _numpy_function, _sample
from rulegen.derive.stabilise.policy import finite_as
from rulegen.derive.stabilise.saturation import _saturated
from rulegen.spec.rules import Domain

x = sp.Symbol("x", real=True)
LINE = Sampling(((x, Domain()),))
HELD = sp.Min(sp.Float(1e4), sp.Max(sp.Float(-1e4), x))
# The tanh-approximated GELU as x sigmoid(u), and its derivative in the form derived from that.
U = 2 * sp.sqrt(2) * (sp.Float(0.044715) * x**3 + x) / sp.sqrt(sp.pi)
GELU = x * sigmoid(U)
GELU_SLOPE = sp.diff(GELU, x)


def _finite_far_out(expr: sp.Expr) -> bool:
    """Whether numpy's value of `expr` (as the generated code computes it) is finite at +-1e20 in float32 and
    +-1e200 in float64, where the exact values here are finite."""
    fn = _numpy_function(expr, (x,))
    assert fn is not None
    with np.errstate(all="ignore"):
        return all(
            np.isfinite(np.asarray(fn(np.array([v, -v], dtype=dtype)))).all()
            for v, dtype in ((1e20, np.float32), (1e200, np.float64))
        )


def test_what_the_forward_computes_costs_nothing_to_read():
    free = reused([sp.exp(-(x**2))])
    reading, clamped = -2 * x * sp.exp(-(x**2)), (-2 * HELD * sp.exp(-(HELD**2)))
    for backend in BACKENDS:
        assert cost(reading, backend, free) < cost(reading, backend)
        assert cost(reading, backend, free) < cost(clamped, backend, free)
        # A clamped input's exp is another exp: no credit.
        assert cost(clamped, backend, free) == cost(clamped, backend)
    # Arithmetic alone is as cheap to compute again as to keep: only what calls a function is read.
    assert reused([x**2 + 1]) == frozenset()
    assert reused([GELU]) >= {GELU, sigmoid(U)}


def test_a_factor_that_overflows_is_clamped_alone():
    # x (1 - s) (0.268 x**2 + 2) s + s, s = sigmoid(u): 0 * inf = nan past x**2's overflow.  Clamping x in the
    # whole form computes sigmoid of a clamped argument, which the forward does not; clamping it in the factors
    # that call no function keeps the forward's sigmoid(u).
    search = [_sample(GELU_SLOPE, LINE, BUDGET.search_points, 1, dtype) for dtype in _DTYPES]
    derived = _measure(GELU_SLOPE, "as derived", (x,), search)
    assert derived is not None
    assert not _finite_far_out(GELU_SLOPE)
    assert not any(e.has(sigmoid(U)) for e in (m.expr for m in _saturated([derived], LINE, search)))
    # Under `fast` alone: the clamped factor's derivative is 0, the forward's sigmoid's is not, and a second
    # derivative may overflow where a clamp of the whole input is 0 at every order.
    found = [m.expr for m in _saturated([derived], LINE, search, frozenset())]
    kept = [e for e in found if e.has(sigmoid(U)) and e.has(sp.Min)]
    assert kept
    assert all(_finite_far_out(e) for e in kept)


def test_fast_keeps_the_partial_that_reads_the_forward():
    free = Free(reused([GELU]), reused([GELU]))
    chosen = stabilise(GELU_SLOPE, LINE, policy="fast", free=free).chosen
    assert chosen.has(sigmoid(U))
    assert _finite_far_out(chosen)
    assert finite_as(chosen, GELU_SLOPE, GELU_SLOPE, LINE, 0)


def test_an_integer_multiplied_last_needs_no_clamp():
    # -2 x exp(-x**2) multiplies -2 last (rulegen.computation.quotients.scaled_product): finite everywhere,
    # and it reads the forward's exp, so `fast` keeps it where it kept a clamped x before.
    slope = sp.diff(sp.exp(-(x**2)), x)
    assert _finite_far_out(slope)
    chosen = stabilise(slope, LINE, policy="fast", free=Free(*[reused([sp.exp(-(x**2))])] * 2)).chosen
    assert not chosen.has(sp.Min, sp.Max)
    assert chosen.has(sp.exp(-(x**2)))
