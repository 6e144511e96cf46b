"""The search measures each form as numpy (and torch) computes it and as XLA does, which flushes subnormals.

XLA on the CPU flushes a subnormal result to zero and reads a subnormal operand as zero, in float32 and float64
alike.  The search once chose cbrt's derivative as nth_root(1/x, 3)**2 / 3 over 1/nth_root(x, 3)**2 / 3 (0.48 eps
against 0.50, float32 mean, measured in numpy): 1/x is subnormal at the largest floats, and JAX's derivative of
cbrt was 0 there (float32 3.4e38: 6.84e-27 exact), in every dtype, eagerly and under `jit`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
import scipy.special
import sympy as sp

from rulegen.derive.partials import derive_rule
from rulegen.derive.stabilise.flushed import flushed_call
from tests.conftest import rules_from

jax.config.update("jax_enable_x64", True)

TINY64 = float(np.finfo(np.float64).tiny)


def test_a_subnormal_result_is_a_zero_of_its_sign():
    halves = flushed_call(lambda a: a / 2, [np.asarray([2.2e-308, -2.2e-308, 6e-308])], np.float64)
    assert halves.tolist() == [0.0, 0.0, 3e-308]
    assert np.signbit(halves).tolist() == [False, True, False]


def test_a_subnormal_input_or_constant_is_read_as_zero():
    # numpy: 1e-310 * 2**60 = 1.15e-292; XLA reads the operand as 0.
    assert flushed_call(lambda a: a * 2.0**60, [np.asarray([1e-310])], np.float64).tolist() == [0.0]
    # 1e-39 is subnormal in float32: a float32 computation reads the constant as 0.
    assert flushed_call(lambda a: a * 1e-39, [np.asarray([100.0], np.float32)], np.float32).tolist() == [0.0]


def test_a_wider_intermediate_is_flushed_at_the_dtype_computed_in():
    # scipy's polygamma of float32 is float64: 4.2e-39 is normal there and subnormal in float32, which XLA flushes.
    x = np.asarray([2.38e38], np.float32)
    assert scipy.special.polygamma(1, x).dtype == np.float64
    assert flushed_call(lambda a: scipy.special.polygamma(1, a) * 1, [x], np.float32).tolist() == [0.0]


def test_numpy_functions_keep_flushing():
    got = flushed_call(lambda a: np.where(a > 0, a, -a) / 4, [np.asarray([-5e-308, 1e-300])], np.float64)
    assert got.tolist() == [0.0, 2.5e-301]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_flushed_evaluation_computes_as_jax_does(dtype):
    info = np.finfo(dtype)
    values = np.asarray(
        [info.max, info.max / 3, info.tiny, info.tiny * 3, info.smallest_subnormal, 1e-20, 3.0, -info.tiny * 1.5],
        dtype,
    )
    forms = (
        lambda m, a: 1 / a,
        lambda m, a: a / 4,
        lambda m, a: (1 / a) * (1 / a) * a,
        lambda m, a: a * a,
        lambda m, a: m.where(a > 1, 1 / a, a) / 2,
        lambda m, a: m.sqrt(m.abs(a)) * a,
    )
    for form in forms:
        with np.errstate(all="ignore"):
            ours = flushed_call(lambda a, form=form: form(np, a), [values], dtype)
        theirs = np.asarray(form(jnp, jnp.asarray(values)))
        np.testing.assert_array_equal(ours, theirs)


def test_cbrt_s_derivative_is_right_where_xla_flushes_a_reciprocal(tmp_path):
    (rule,) = rules_from(tmp_path, "name: f_cbrt\ninputs: {x: {domain: [0.1, 4]}}\nforward: x**(1/3)\n", "r.yaml")
    d = derive_rule(rule, [rule.name])
    (partial,) = [c for c in d.choices if c.quantity == "dout/dx"]
    fn = sp.lambdify([d.symbols["x"]], partial.chosen, modules="jax")
    for dtype in (np.float32, np.float64):
        largest = np.finfo(dtype).max
        got = float(fn(jnp.asarray(largest, dtype)))
        exact = float(mpmath.cbrt(mpmath.mpf(float(largest))) ** -2 / 3)
        # Within pow's rounding of the exponent 2/3 (JAX's x**(2/3) here, 14 ulps in float32): not 0, nor inf.
        assert got == pytest.approx(exact, rel=1e-5, abs=0), (dtype, partial.chosen)


def test_a_form_is_not_judged_where_xla_reads_a_subnormal_input_as_zero(search_cache_off):
    # sqrt(x**2 + eps**2) - eps, eps > 0, as its conjugate on inputs scaled by a power of two: where eps and x are
    # subnormal XLA computes it at (0, 0), 0 * (0/0) = nan, where no form computes eps's value.  Judged there, the
    # gate refused it and kept hypot(x, eps) - eps, which cancels for |x| << eps (15 bits at eps = 1e-4).
    from rulegen.derive.functions import binade
    from rulegen.derive.stabilise import Sampling, stabilise
    from rulegen.spec.rules import Domain

    x, eps = sp.Symbol("x", real=True), sp.Symbol("eps", positive=True)
    choice = stabilise(sp.sqrt(x**2 + eps**2) - eps, Sampling(((x, Domain()), (eps, Domain(gt=0)))))
    assert choice.chosen.has(binade), choice.chosen
    assert choice.bits_after[0] < 8 < choice.bits_before[0]


def test_a_condition_holding_an_if_then_else_is_evaluated_as_it_stands(monkeypatch):
    # sympy's numpy printer simplified such a condition first (`simplify_logic`, exponential in its atoms: half a
    # minute of a Beta KL's search); printed as numpy's where of booleans it is the same test.
    import sympy.logic.boolalg

    from rulegen.derive.stabilise.points import _numpy_function

    def refused(*args, **kwargs):
        raise AssertionError("simplify_logic")

    monkeypatch.setattr(sympy.logic.boolalg, "simplify_logic", refused)
    x, y = sp.symbols("x y")
    form = sp.Piecewise((x, sp.ITE(x > 0, y > 0, y < 1)), (y, True))
    fn = _numpy_function(form, (x, y))
    assert fn is not None
    xs, ys = np.asarray([-1.0, -1.0, 1.0, 1.0]), np.asarray([0.5, 2.0, 0.5, -1.0])
    assert fn(xs, ys).tolist() == [-1.0, 2.0, 1.0, -1.0]
    assert flushed_call(fn, [xs, ys], np.float32).tolist() == [-1.0, 2.0, 1.0, -1.0]
