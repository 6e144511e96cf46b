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


def test_every_intermediate_of_an_untaken_branch_is_finite_at_the_special_floats():
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


def test_a_stand_in_keeps_a_negative_power_outside_its_selection():
    # A Bernoulli KL's partial in q, -p/q + (1 - p)/(1 - q), split on |q| > 2 with q fed 1 past it: once evaluated
    # (the planners' cse), sympy's Piecewise took the power inside, -p * where(|q| > 2, 1, 1/q), and 1/q is inf at
    # a subnormal float32 q in the branch taken (-inf where -p/q is -1.1e12).
    from rulegen.derive.stabilise.regimes import _fed, _stand_in

    p, q = sp.symbols("p q", real=True)
    fed = _fed(-p / q, q, _stand_in(q, sp.Abs(q) > 2, sp.Float(1.0), where_taken=True))
    replacements, (evaluated,) = sp.cse(fed)
    evaluated = evaluated.xreplace(dict(reversed(replacements)))
    point = [np.asarray([1.7134817e-29], np.float32), np.asarray([1.558384e-41], np.float32)]
    with np.errstate(all="ignore"):
        value = np.asarray(_numpy_function(evaluated, (p, q))(*point), np.float32)
    assert np.isfinite(value).all() and abs(float(value[0]) + 1.0995246e12) < 1e7, evaluated


def test_the_best_split_is_the_first_least_of_a_scan_over_every_split():
    # The splits are scored as the rows of one array per dtype; a scan scoring each alone by its own masks and
    # keeping the first strictly lower must find the same split and the same score, to the bit.
    from rulegen.derive.stabilise.points import _Measured, _Points
    from rulegen.derive.stabilise.regimes import _best_split, _regions, _Split, _splits

    a, b = sp.symbols("a b", real=True)
    rng = np.random.default_rng(7)
    for trial in range(20):
        points = []
        for dtype, n in ((np.float64, 40), (np.float32, 24)):
            magnitudes = 10.0 ** rng.uniform(-40, 40, size=(2, n))
            signs = rng.choice([-1.0, 1.0], size=(2, n)) if trial % 2 else 1.0
            columns = tuple((signs * magnitudes).astype(dtype))
            points.append(_Points(dtype, columns, np.zeros(n)))
        # Bits in eighths, so that ties between splits are common.
        outer = _Measured(a, "outer", tuple(rng.integers(0, 9, len(p)) / 8 for p in points))
        inner = _Measured(a, "inner", tuple(rng.integers(0, 9, len(p)) / 8 for p in points))
        found = _best_split(outer, inner, (a, b), points, [(0, 1)])
        scan: tuple[float, _Split] | None = None
        for split in _splits((a, b), points, [(0, 1)]):
            score = sum(
                float(np.mean(np.where(m, i, o)))
                for m, i, o in zip(_regions(split, points), inner.bits, outer.bits, strict=True)
            )
            if scan is None or score < scan[0]:
                scan = (score, split)
        assert scan is not None and scan == found
