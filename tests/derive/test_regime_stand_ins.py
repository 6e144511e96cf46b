"""A regime's branch is fed its own region's input wherever an intermediate value of it is not finite untaken."""

import numpy as np
import sympy as sp

from rulegen.derive.stabilise import Sampling, stabilise
from rulegen.derive.stabilise.points import _numpy_function
from rulegen.spec.rules import Domain

x = sp.Symbol("x", real=True)


def _intermediates(expr: sp.Expr) -> list[sp.Expr]:
    """The values reverse mode differentiates through: every subexpression but the conditions of a selection."""
    if isinstance(expr, sp.Piecewise):
        return [expr, *(n for branch, _ in expr.args for n in _intermediates(branch))]
    if expr.is_Atom or not expr.free_symbols:
        return []
    return [expr, *(n for arg in expr.args for n in _intermediates(arg))]


def test_every_intermediate_of_an_untaken_branch_is_finite_at_the_special_floats(search_cache_off):
    # acosh's derivative 1/(sqrt(x - 1) sqrt(x + 1)), joined with its series past x = 128: at x = inf the first
    # branch is 0, and its sympy derivative finite, but reverse mode multiplies the where's zero cotangent by
    # sqrt(inf) in the product's partial: the second derivative was nan at inf in both frameworks.
    choice = stabilise(1 / (sp.sqrt(x - 1) * sp.sqrt(x + 1)), Sampling(((x, Domain()),)))
    assert isinstance(choice.chosen, sp.Piecewise), choice
    for dtype in (np.float64, np.float32):
        info = np.finfo(dtype)
        points = np.asarray([1.0, 2.0, 1e4, float(info.max), np.inf], dtype=dtype)
        for branch, condition in choice.chosen.args:
            taken = _numpy_function(condition, (x,))(points) if condition is not sp.true else np.ones(5, bool)
            for node in _intermediates(branch):
                with np.errstate(all="ignore"):
                    values = np.broadcast_to(np.asarray(_numpy_function(node, (x,))(points), dtype=dtype), (5,))
                assert np.isfinite(values[~np.asarray(taken, bool)]).all(), (node, dtype)
