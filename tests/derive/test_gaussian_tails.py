"""A normal log-CDF as SciPy writes it, `log(erfc(-z / sqrt 2) / 2)`: finite and accurate in both tails.

Its forward was -inf from z = -38 in float64 (erfc underflows where the log is -z**2/2 and more), and the
screening that decides whether to search at all skipped the points where float64 is infinite, so the log_ndtr
form was never measured; its partials divided a Gaussian by its own tail, 0 / 0 from there.
"""

from __future__ import annotations

from pathlib import Path

import sympy as sp

from rulegen.derive.functions import erfcx, log_ndtr, ndtr
from rulegen.derive.partials import derive_rule
from rulegen.derive.stabilise.families import _identities
from tests.conftest import rules_from

x = sp.Symbol("x", real=True)
loc = sp.Symbol("loc", real=True)
scale = sp.Symbol("scale", positive=True)


def test_the_log_of_a_tail_times_a_constant_is_a_log_ndtr() -> None:
    assert _identities(sp.log(sp.erfc(x) / 2)) == log_ndtr(-sp.sqrt(2) * x)
    assert _identities(sp.log(3 * ndtr(x))) == sp.log(3) + log_ndtr(x)
    # A negative constant has no real log to take out.
    assert not _identities(sp.log(-sp.erfc(x))).has(log_ndtr)


def test_a_gaussian_over_its_own_tail_is_an_erfcx() -> None:
    assert _identities(sp.exp(-(x**2)) / sp.erfc(x)) == 1 / erfcx(x)
    assert _identities(x * sp.exp(-(x**2) / 2) / ndtr(x)) == 2 * x / erfcx(-x / sp.sqrt(2))
    # Another exponent is no Gaussian of that tail.
    assert not _identities(sp.exp(-(x**2) / 2) / sp.erfc(x)).has(erfcx)


def test_the_normal_log_cdf_is_searched_where_float64_is_infinite(tmp_path: Path) -> None:
    (rule,) = rules_from(
        tmp_path,
        "name: normal_log_cdf\n"
        "inputs: {x: {}, loc: {}, scale: {assume: positive, domain: {gt: 0}}}\n"
        "forward: log(erfc(-(x - loc) / (scale * sqrt(2))) / 2)\n",
        "normal_log_cdf.yaml",
    )
    d = derive_rule(rule)
    (forward,) = (expr for name, expr in d.forward if name == "out")
    assert forward.has(log_ndtr), forward
    choices = {c.quantity: c for c in d.choices}
    assert choices["out"].bits_after[0] < 1 < choices["out"].bits_before[0], choices["out"]
    for partial in ("dout/dx", "dout/dloc", "dout/dscale"):
        assert choices[partial].chosen.has(erfcx) and not choices[partial].chosen.has(sp.erfc), choices[partial]
