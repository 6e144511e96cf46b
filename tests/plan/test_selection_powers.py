"""A branch fed a stand-in where it is not taken keeps the stand-in inside its powers, as printed.

The stabilising search joins two forms by `where` and feeds each a point of its own region where it is not taken
(the double-`where`), so that a derivative of the whole is not inf * 0 there.  sympy folds a power of a
`Piecewise` into its pieces whenever an expression is rebuilt (`sp.cse` rebuilds every one): the stand-in then
left the power, and asinh's second derivative at 0 was nan in both backends.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sympy as sp
import torch

import generated.jax as gj
import generated.torch as gt
from rulegen.computation.sharing import shared_subexpressions

jax.config.update("jax_enable_x64", True)

pytestmark = pytest.mark.unit


def test_a_selection_under_a_power_is_named_not_folded():
    x = sp.Symbol("x", real=True)
    taken = sp.Abs(x) < 131072
    with sp.evaluate(False):
        fed = sp.Piecewise((262144.0, taken), (x, True))
        branch = 1 / (sp.sqrt(1 + 1 / fed**2) * sp.Abs(fed))
    replacements, (reduced,) = shared_subexpressions(
        [sp.Piecewise((1 / sp.sqrt(x**2 + 1), taken), (branch, True))], sp.numbered_symbols("t")
    )
    named = dict(replacements)
    selections = [s for s, v in replacements if isinstance(v, sp.Piecewise)]
    assert len(selections) == 1 and named[selections[0]].args[1][0] == x
    # Each power reads the selection's name: none of x itself, none of a folded Piecewise.
    for value in [*named.values(), reduced]:
        for node in sp.preorder_traversal(value):
            if node.is_Pow and node.exp.is_negative:
                assert not isinstance(node.base, sp.Piecewise), value
    assert [str(s) for s, _ in replacements] == [f"t{k}" for k in range(len(replacements))]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_asinh_second_derivative_at_zero(dtype):
    x = np.asarray([0.0, -0.0, 1e-30, 3e5, -3e5], dtype=dtype)
    exact = [-float(v) / (1 + float(v) ** 2) ** 1.5 for v in x]  # asinh'' = -x / (1 + x**2)**(3/2)
    jax_second = jax.vmap(jax.grad(jax.grad(gj.f_asinh)))(jnp.asarray(x))
    xt = torch.from_numpy(x)
    torch_second = torch.vmap(torch.func.grad(torch.func.grad(gt.f_asinh)))(xt)
    for got in (np.asarray(jax_second), torch_second.numpy()):
        assert np.isfinite(got).all(), got
        np.testing.assert_allclose(got, exact, rtol=64 * float(np.finfo(dtype).eps), atol=0)
    assert not math.isnan(float(jax_second[0]))
