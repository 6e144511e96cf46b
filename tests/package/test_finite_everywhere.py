"""Every rule known to be right is finite wherever its exact value is a finite float, over the whole float line.

The `admissible` check's sweep (`inadmissible_results`) at WHOLE_LINE_POINTS points per dtype (1,024 in CI;
`RULEGEN_WHOLE_LINE_POINTS=4096` for the full sweep, about 11 minutes of CPU), each input's
probes, special floats and mixed magnitudes on top, in both backends: the generated code is evaluated at
every point, mpmath only where a value or partial is not finite.  A rule with a true finding not mended yet
says so in its `checks: skip: admissible:`, and is left out.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rulegen.check import CheckSession
from rulegen.check.accuracy import inadmissible_results
from rulegen.check.points import flat_call
from rulegen.spec.rules import Rule, read_rules, rule_files
from tests.conftest import RIGHT, RULES, SHARED_EXAMPLES

WHOLE_LINE_POINTS = int(os.environ.get("RULEGEN_WHOLE_LINE_POINTS", "1024"))


def _inadmissible(rules: list[Rule], jax_pkg: object, torch_pkg: object, names: list[str]) -> list[str]:
    """Each rule's `inadmissible_results` at WHOLE_LINE_POINTS, named; `names`: every rule the package holds."""
    found = []
    for rule in rules:
        if "admissible" in rule.checks.skip or not hasattr(jax_pkg, rule.name):
            continue
        generated = {
            "jax": flat_call(rule, getattr(jax_pkg, rule.name)),
            "torch": flat_call(rule, getattr(torch_pkg, rule.name)),
        }
        found += [
            f"{rule.name}: {message}"
            for message in inadmissible_results(rule, generated, points=WHOLE_LINE_POINTS, known=names)
        ]
    return found


BUNDLED_FILES = rule_files([RULES])
#: rules/functions.yaml holds most of the sweep's cost (bessel_i0 alone a third): its rules are shared out in
#: parts, so that the slow lane's two workers split it.
PARTS = 4


def _part(path: Path, part: int) -> list[Rule]:
    rules = read_rules([path])
    return rules[part::PARTS] if path.name == "functions.yaml" else rules


@pytest.mark.costly
@pytest.mark.slow
@pytest.mark.parametrize(
    ("path", "part"),
    [(p, k) for p in BUNDLED_FILES for k in range(PARTS if p.name == "functions.yaml" else 1)],
    ids=lambda v: v.stem if isinstance(v, Path) else str(v),
)
def test_the_bundled_rules_are_finite_wherever_the_exact_value_is(built, path, part):
    jax_pkg, torch_pkg, bundled_rules = built
    found = _inadmissible(_part(path, part), jax_pkg, torch_pkg, list(bundled_rules))
    assert not found, "\n".join(found)


@pytest.mark.slow
@pytest.mark.parametrize(
    "folder",
    [RIGHT, pytest.param(SHARED_EXAMPLES, marks=pytest.mark.skipif(not SHARED_EXAMPLES.exists(), reason=""))],
    ids=["right_rules", "shared_examples"],
)
def test_the_right_rules_are_finite_wherever_the_exact_value_is(request, folder):
    rules = read_rules(rule_files([folder]))
    # tests/right_rules/ as built for test_right_rules.py's sweep, once per worker (the shared examples: here).
    package = request.getfixturevalue("right_package") if folder == RIGHT else None
    with CheckSession(rules, package) as session:
        jax_pkg, torch_pkg = session.modules
        found = _inadmissible(rules, jax_pkg, torch_pkg, [r.name for r in rules])
    assert not found, "\n".join(found)


def test_an_affine_sum_is_finite_where_its_product_alone_overflows():
    # b + w*x in float32 at x = 2.7e38, w = 1.52, b = -3.2e38: w*x is past the range, the sum is 8.8e37.  It was
    # inf in both backends; its sum is computed scaled where it is not finite (the search's sum-scaled repair).
    import jax.numpy as jnp
    import numpy as np
    import torch

    from generated.jax import affine_state as jax_affine
    from generated.torch import affine_state as torch_affine

    x, w, b = np.float32(2.7378294e38), np.float32(1.5202333), np.float32(-3.2307288e38)
    exact = float(b) + float(w) * float(x)
    params = {"layer.weight": w, "layer.bias": b}
    got_torch = torch_affine(torch.tensor([x]), {k: torch.tensor([v]) for k, v in params.items()})
    got_jax = jax_affine(jnp.asarray([x]), {k: jnp.asarray([v]) for k, v in params.items()})
    for got in (float(got_torch[0]), float(np.asarray(got_jax)[0])):
        assert got == pytest.approx(exact, rel=1e-6)
