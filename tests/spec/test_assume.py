"""`domain` is only where checks sample; `assume` is what a rule vouches for.

An assumption read off the sample domain once changed the function itself:
`atan2(y, x)` with `x` sampled in [0.5, 3] was generated as `atan(y / x)`.
"""

from __future__ import annotations

import pytest

from rulegen.spec.errors import SpecErrors
from rulegen.spec.rules import read_rule_file


def _one_rule(tmp_path, inputs: str, name: str = "probe") -> tuple:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\ninputs:\n{inputs}\nforward: atan2(y, x) + sqrt(x**2) + log(Abs(y))\n")
    return read_rule_file(path)


def test_an_assumption_sets_the_default_sample_domain(tmp_path):
    (rule,) = _one_rule(tmp_path, "  x: {assume: positive}\n  y: {assume: [nonpositive, nonzero]}")
    x, y = rule.inputs
    assert x.domain[0] > 0 and x.assume == ("positive",)
    assert y.domain[1] <= 0 and y.assume == ("nonpositive", "nonzero")


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ("  x: {assume: positive, domain: [-1, 2]}\n  y: {}", "`assume: positive` fails"),
        ("  x: {assume: real_and_happy}\n  y: {}", "'positive', 'nonnegative'"),
    ],
)
def test_a_bad_assumption_is_located(tmp_path, inputs, message):
    with pytest.raises(SpecErrors) as caught:
        _one_rule(tmp_path, inputs)
    text = str(caught.value)
    assert message in text
    assert "probe.yaml:3:" in text


def test_every_assumption_reads_as_a_condition_in_the_docstring():
    from typing import get_args

    from rulegen.spec.rules import ASSUMPTION_CONDITIONS, ASSUMPTION_DOMAINS, Assumption

    assert set(ASSUMPTION_CONDITIONS) == set(get_args(Assumption)) == set(ASSUMPTION_DOMAINS)
