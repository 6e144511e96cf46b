"""Every bundled rule, shared example and right rule passes every check of `rulegen test`.

The sweeps of whole rule folders, apart from tests/test_check.py (which checks the checks on wrong rules),
so that the fast lane's two workers (`--dist loadfile`) each take one file's package builds and sweeps.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rulegen.check import CHECKS, CheckSession, check_rule, run_checks
from rulegen.spec.rules import read_rules, rule_files
from tests.conftest import RULES, SHARED_EXAMPLES

# Right rules that once broke the generated code; each says how in a comment.
RIGHT = Path(__file__).resolve().parent / "right_rules"


def _bundled_outcomes(package: str, seed: int):
    paths = [p for p in rule_files([RULES]) if p.name != "functions.yaml"]
    return run_checks(read_rules(paths), package, seed=seed)


@pytest.fixture(scope="module")
def seed_0_outcomes(bundled):
    """Every check of the bundled rules (but the function table's) at seed 0: several tests read them."""
    return _bundled_outcomes(bundled, 0)


def test_bundled_rules_pass_every_check(seed_0_outcomes):
    failures = [f"{o.rule}/{o.check}: {o.detail}" for o in seed_0_outcomes if o.status == "fail"]
    assert not failures, "\n".join(failures)
    assert {o.check for o in seed_0_outcomes if o.status == "pass"} >= set(CHECKS) - {"compile", "durability"}


def test_the_structured_rules_pass_the_structures_check(seed_0_outcomes):
    passed = {o.rule for o in seed_0_outcomes if o.check == "structures" and o.status == "pass"}
    structured = {r.name for r in read_rules([RULES / "structures.yaml"])}
    assert (
        passed
        >= structured
        == {
            "point_jvp",
            "point_vjp",
            "sincos",
            "hypot_pair",
            "gaussian_logpdf",
            "to_polar",
            "moments",
            "affine_state",
        }
    )


def test_the_complex_rules_pass_the_checks_of_values_and_derivatives(seed_0_outcomes):
    complex_rules = {r.name for r in read_rules([RULES / "complex.yaml"])}
    passed = {o.check for o in seed_0_outcomes if o.rule in complex_rules and o.status == "pass"}
    assert {"forward", "mpmath", "jvp_fd", "vjp_dot", "cross_backend", "second_order", "float32"} <= passed
    assert {"transforms_jax", "transforms_torch", "dtype", "broadcast"} <= passed


# The slow lane's sweeps are cut into this many parts, each a test of its own, so that the two xdist
# workers share a sweep (whole, one took a worker for up to two minutes).
SWEEP_PARTS = 3


def _outcomes_of_part(rules: list, part: int, package: str, seed: int):
    """`run_checks(rules, package, seed=seed)`'s outcomes for every `SWEEP_PARTS`-th rule from the `part`-th.

    A rule's outcomes are those of the whole sweep: its points come from the seed and its name, and each
    rule knows every other rule of the sweep (rules calling each other), as in one `CheckSession`.
    """
    names = [r.name for r in rules]
    with CheckSession(rules, package) as session:
        jax_pkg, torch_pkg = session.modules
        part_rules = rules[part::SWEEP_PARTS]
        return [o for rule in part_rules for o in check_rule(rule, jax_pkg, torch_pkg, seed, False, names)]


# Seed 0 in the fast lane (above); another, and the function table's 60 rules, in the slow one.
# Twenty seeds are run outside CI to count false alarms: `python -m benchmarks.false_alarms --seeds 20`.
@pytest.mark.costly
@pytest.mark.slow
@pytest.mark.parametrize("part", range(SWEEP_PARTS))
def test_bundled_rules_pass_at_another_seed(bundled, part):
    paths = [p for p in rule_files([RULES]) if p.name != "functions.yaml"]
    outcomes = _outcomes_of_part(read_rules(paths), part, bundled, 1)
    assert outcomes
    failures = [f"{o.rule}/{o.check}: {o.detail}" for o in outcomes if o.status == "fail"]
    assert not failures, "\n".join(failures)


@pytest.mark.skipif(not SHARED_EXAMPLES.exists(), reason="../shared/examples is not beside this checkout")
def test_every_shared_example_passes():
    outcomes = run_checks(read_rules(sorted(SHARED_EXAMPLES.glob("*.yaml"))), seed=4)
    assert len({o.rule for o in outcomes}) == 8
    failures = [f"{o.rule}/{o.check}: {o.detail}" for o in outcomes if o.status == "fail"]
    assert not failures, "\n".join(failures)


@pytest.mark.costly
@pytest.mark.slow
@pytest.mark.parametrize("part", range(SWEEP_PARTS))
def test_function_rules_pass_every_check(bundled, part):
    outcomes = _outcomes_of_part(read_rules([RULES / "functions.yaml"]), part, bundled, 3)
    assert outcomes
    failures = [f"{o.rule}/{o.check}: {o.detail}" for o in outcomes if o.status == "fail"]
    assert not failures, "\n".join(failures)


def test_right_rules_that_once_broke_the_generated_code_pass_every_check():
    rules = read_rules(rule_files([RIGHT]))
    outcomes = run_checks(rules, jobs=1)
    failed = [(o.rule, o.check, o.detail[:300]) for o in outcomes if o.status == "fail"]
    assert not failed, failed
    assert {o.rule for o in outcomes} == {r.name for r in rules}
    assert {Path(r.loc.file).name for r in rules} == {p.name for p in RIGHT.glob("*.yaml")}
