"""`rulegen test` on built packages: every wrong rule caught by its check, every bundled rule passing on several seeds.

tests/wrong_rules/ holds deliberately wrong rules, each naming in a comment
the check that must catch it ("Caught by <check>"); every bundled rule must
pass on several seeds.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from rulegen.check import CHECKS, REGISTRY, run_checks, summary
from rulegen.cli import app
from rulegen.spec.rules import read_rules, rule_files
from tests.check.test_check import WRONG, WRONG_FILES
from tests.conftest import RULES, SHARED_EXAMPLES, outcomes_of_part, swept_checks

# Right rules that once broke the generated code; each says how in a comment.
RIGHT = Path(__file__).resolve().parents[1] / "right_rules"


def _expected_catchers(path: Path) -> set[str]:
    found = re.search(r"Caught by ([a-z_0-9]+)", path.read_text())
    assert found, f"{path.name} says in a comment which check catches it"
    return {found.group(1)}


# Rules whose every outcome the tests below read; the others run only the check that must catch them.
EVERY_CHECK_OF = {"wrong_second_partial", "float32_nan_vjp", "derivative_loses_bits"}


@pytest.fixture(scope="module")
def wrong_outcomes(tmp_path_factory):
    """Each wrong rule's outcomes of the check its comment names (of every check for `EVERY_CHECK_OF`)."""
    from rulegen.render.build import build

    root = tmp_path_factory.mktemp("wrong")
    build(WRONG_FILES, root / "rg_wrong")
    sys.path.insert(0, str(root))
    try:
        outcomes = []
        for path in WRONG_FILES:
            (rule,) = read_rules([path])
            only = None if rule.name in EVERY_CHECK_OF else _expected_catchers(path)
            outcomes += run_checks([rule], "rg_wrong", only=only)
        return outcomes
    finally:
        sys.path.remove(str(root))


@pytest.mark.parametrize("path", WRONG_FILES, ids=[p.stem for p in WRONG_FILES])
def test_every_wrong_rule_is_caught_by_the_check_it_names(wrong_outcomes, path):
    name = read_rules([path])[0].name
    failed = {o.check for o in wrong_outcomes if o.rule == name and o.status == "fail"}
    assert _expected_catchers(path) <= failed, f"{name} was caught by {failed or 'no check'}"
    if name not in EVERY_CHECK_OF:  # run_checks(only=...) ran that check alone
        assert {o.check for o in wrong_outcomes if o.rule == name} == _expected_catchers(path)


def test_the_accuracy_check_alone_catches_a_derivative_that_loses_every_bit_autodiff_keeps(wrong_outcomes):
    """1 - 1/(1 + e^x) is softplus' derivative, and 0 below x = -37 where autodiff's sigmoid is e^x: within
    every other check's tolerance at the points it samples, caught by its bits of error alone."""
    outcomes = {o.check: o for o in wrong_outcomes if o.rule == "derivative_loses_bits"}
    assert {check for check, o in outcomes.items() if o.status == "fail"} == {"accuracy"}
    said = (
        r"dout/dx in float(64|32) \((jax|torch)\): [0-9.]+ bits of error at x=\S+, autodiff of the forward as written"
    )
    assert re.search(said, outcomes["accuracy"].detail)


def test_an_unknown_check_is_refused_before_anything_is_built():
    with pytest.raises(ValueError, match="no check named 'jvp'; the checks are forward, mpmath"):
        run_checks(read_rules([RULES / "gelu.yaml"]), only=["jvp"])
    result = CliRunner().invoke(app, ["test", str(RULES / "gelu.yaml"), "--check", "jvp", "--check", "wide"])
    assert result.exit_code == 2
    assert "no check named 'jvp'" in result.output


def _bundled_outcomes(package: str, seed: int):
    paths = [p for p in rule_files([RULES]) if p.name != "functions.yaml"]
    return run_checks(read_rules(paths), package, seed=seed, only=swept_checks())


@pytest.fixture(scope="module")
def seed_0_outcomes(bundled):
    """Every check of the bundled rules (but the function table's) at seed 0: several tests read them."""
    return _bundled_outcomes(bundled, 0)


def test_bundled_rules_pass_every_check(seed_0_outcomes):
    failures = [f"{o.rule}/{o.check}: {o.detail}" for o in seed_0_outcomes if o.status == "fail"]
    assert not failures, "\n".join(failures)
    assert {o.check for o in seed_0_outcomes if o.status == "pass"} >= set(swept_checks()) - {"compile", "durability"}


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
# workers share a sweep.  A part's rules are every sixth, and a rule's cost varies tenfold (beta's cases): in
# three parts the function table's split 214 s against 135 s of a worker; in six, the costly tests handed out
# one at a time (tests/conftest.py) even out on two workers.
SWEEP_PARTS = 6


# Seed 0 in the fast lane (above); another, and the function table's 60 rules, in the slow one.
# Twenty seeds are run outside CI to count false alarms: `python -m benchmarks.false_alarms --seeds 20`.
@pytest.mark.costly
@pytest.mark.slow
@pytest.mark.parametrize("part", range(SWEEP_PARTS))
def test_bundled_rules_pass_at_another_seed(bundled, part):
    paths = [p for p in rule_files([RULES]) if p.name != "functions.yaml"]
    outcomes = outcomes_of_part(read_rules(paths), part, SWEEP_PARTS, bundled, 1)
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
    outcomes = outcomes_of_part(read_rules([RULES / "functions.yaml"]), part, SWEEP_PARTS, bundled, 3)
    assert outcomes
    failures = [f"{o.rule}/{o.check}: {o.detail}" for o in outcomes if o.status == "fail"]
    assert not failures, "\n".join(failures)


def test_every_outcome_says_why_when_it_does_not_pass(wrong_outcomes):
    for outcome in wrong_outcomes:
        if outcome.status != "pass":
            assert outcome.detail, outcome


def test_rule_can_skip_a_check_with_a_reason(tmp_path):
    path = tmp_path / "skipper.yaml"
    path.write_text(
        "name: skipper\ninputs: [x]\nforward: sin(x)\nchecks:\n  skip:\n    float32: not meant for float32\n"
    )
    outcomes = {o.check: o for o in run_checks(read_rules([path]), only=("float32", "jvp_fd"))}
    assert outcomes["float32"].status == "n/a"
    assert "not meant for float32" in outcomes["float32"].detail
    assert outcomes["jvp_fd"].status == "pass"


def test_true_derivative_false_keeps_cross_backend_and_points(tmp_path):
    path = tmp_path / "scaled.yaml"
    path.write_text(
        "name: scaled\ninputs: [x]\nforward: x\nderivatives:\n  x: 2\n"
        "checks:\n  true_derivative: false\n  points:\n    - at: {x: 1.0}\n      grad: {x: 2.0}\n"
    )
    outcomes = {o.check: o for o in run_checks(read_rules([path]), only=("jvp_fd", "cross_backend", "points"))}
    assert outcomes["jvp_fd"].status == "n/a"
    assert outcomes["cross_backend"].status == "pass"
    assert outcomes["points"].status == "pass"


def test_rulegen_test_cli_exits_1_on_a_wrong_rule_and_prints_json():
    runner = CliRunner()
    result = runner.invoke(app, ["test", str(WRONG / "wrong_sign.yaml"), "--json", "--jobs", "1"])
    assert result.exit_code == 1
    outcomes = json.loads(result.stdout)
    assert {"rule": "wrong_sign", "check": "jvp_fd"}.items() <= next(
        o for o in outcomes if o["check"] == "jvp_fd"
    ).items()
    result = runner.invoke(app, ["test", str(RULES / "log1pexp.yaml"), "--wide"])
    assert result.exit_code == 0, result.output
    assert "1 rules:" in result.output
    # --wide, not a terminal: the table is printed whole, not cut to 80 columns.
    header = next(line for line in result.output.splitlines() if "forward" in line and "compile" in line)
    assert all(check in header for check in CHECKS), header
    assert re.search(r"log1pexp\s*│\s*pass\s*│", result.output), result.output


@pytest.mark.parametrize("width", [80, 100])
def test_rulegen_test_output_fits_the_console_and_names_every_failing_check(wrong_outcomes, monkeypatch, width):
    from rich.console import Console

    from rulegen import check, cli

    # The wrong corpus's outcomes, computed once for the module: long names, long multi-line failures.
    monkeypatch.setattr(check, "run_checks", lambda *args, **kwargs: wrong_outcomes)
    monkeypatch.setattr(cli, "out_console", Console(highlight=False, soft_wrap=True, width=width))
    result = CliRunner().invoke(app, ["test", str(WRONG)])
    assert result.exit_code == 1, result.output
    lines = result.stdout.splitlines()
    too_long = [line for line in lines if len(line) > width]
    assert not too_long, "\n".join(too_long)
    failures = [o for o in wrong_outcomes if o.status == "fail"]
    for failure in failures:
        assert f"FAIL {failure.rule} / {failure.check}:" in result.stdout
    assert result.stdout.count("✗") == len(failures) + 1  # a mark in the table for each, and the legend's
    words = " ".join(result.stdout.split())
    assert all(f"{c.code} {c.name}" in words for c in REGISTRY)  # the legend names every check


def test_failures_name_inputs_and_partials_never_positions(wrong_outcomes):
    by_check = {(o.rule, o.check): o.detail for o in wrong_outcomes if o.status == "fail"}
    # x * exp(y) with the partial for y wrong: the point and the partial by name.
    wide = by_check["wrong_second_partial", "wide"]
    assert re.match(r"at x=117\.1, y=[0-9.]+: jax gradient dout/dy vs 40 digits", wide), wide
    assert re.search(
        r"JVP of output out vs finite differences: at x=[-0-9.e]+, y=[-0-9.e]+ \(index",
        by_check["wrong_second_partial", "jvp_fd"],
    )
    assert "float32 gradient dout/dx is not finite where float64 is at x=" in by_check["float32_nan_vjp", "float32"]
    # A framework's own check numbers outputs and inputs; the message says which is which.
    assert "input 0 = x, input 1 = y" in by_check["wrong_second_partial", "transforms_torch"]
    positional = re.compile(r"\b(output|input|gradient|result|block) \d")
    for (rule, check), detail in by_check.items():
        assert not positional.search(detail) or "input 0 = " in detail, (rule, check, detail)


def test_summary_counts_outcomes(wrong_outcomes):
    text = summary(wrong_outcomes)
    assert f"{len(WRONG_FILES)} rules" in text


# Small rules, checked once for the tests below: a wrong and a right `jvp`
# point (the right one on a rule without forward mode in JAX, whose JVP
# at the point comes from reverse mode), and a snippet VJP that leaves the
# summing back over broadcast axes to the generated code.
SMALL_RULES = """\
rules:
  - name: polar_wrong_point
    inputs:
      x: {domain: [0.5, 3]}
      y: {}
    outputs: [r, theta]
    forward:
      r: hypot(x, y)
      theta: atan2(y, x)
    checks:
      points:
        - at: {x: 3.0, y: 4.0}
          jvp: {tangents: {x: 1.0}, value: [0.6, -0.15]}
  - name: cube_vjp_only
    inputs: [x]
    forward: x**3
    mode: vjp
    vjp: 3 * x**2 * out_bar
    checks:
      points:
        - at: {x: [1.0, 2.0]}
          jvp: {tangents: {x: [1.0, 0.5]}, value: [3.0, 6.0]}
  - name: mul_sin
    inputs: [x, y]
    forward:
      python: return x * xp.sin(y)
    jvp:
      python: return x_dot * xp.sin(y) + x * xp.cos(y) * y_dot
    vjp:
      python: return out_bar * xp.sin(y), out_bar * x * xp.cos(y)
"""


@pytest.fixture(scope="module")
def small_rules(tmp_path_factory):
    path = tmp_path_factory.mktemp("small") / "small.yaml"
    path.write_text(SMALL_RULES)
    rules = read_rules([path])
    return rules, {(o.rule, o.check): o for o in run_checks(rules, jobs=1)}


def test_a_right_jvp_point_passes_and_a_wrong_one_fails(small_rules):
    _, outcomes = small_rules
    right = outcomes["cube_vjp_only", "points"]
    assert right.status == "pass", right.detail
    assert "jax JVP by reverse mode" in right.detail
    wrong = outcomes["polar_wrong_point", "points"]
    assert wrong.status == "fail"
    assert "jvp: at index (1,) expected -0.14999999999999999, got -0.16" in wrong.detail


def test_snippet_vjp_need_not_sum_back_over_broadcast_axes(small_rules):
    _, outcomes = small_rules
    broadcast = outcomes["mul_sin", "broadcast"]
    assert broadcast.status == "pass", broadcast.detail
    assert "(3, 1), (1, 4)" in broadcast.detail


@pytest.mark.slow
def test_two_jobs_give_the_outcomes_of_one(small_rules):
    rules, serial = small_rules
    parallel = run_checks(rules, jobs=2)
    assert [(o.rule, o.check) for o in parallel] == list(serial)
    assert {(o.rule, o.check): o.status for o in parallel} == {key: o.status for key, o in serial.items()}


def test_integer_and_boolean_outputs_have_their_dtype_in_both_backends(tmp_path):
    import importlib
    import sys

    import jax.numpy as jnp
    import numpy as np
    import torch

    from rulegen.render.build import build

    build([RIGHT / "integer_output.yaml", RIGHT / "boolean_output.yaml"], tmp_path / "rg_dtypes")
    sys.path.insert(0, str(tmp_path))
    try:
        jax_pkg, torch_pkg = importlib.import_module("rg_dtypes.jax"), importlib.import_module("rg_dtypes.torch")
    finally:
        sys.path.remove(str(tmp_path))
    x = np.array([-2.5, 0.5, 2.0])
    assert np.issubdtype(jax_pkg.abs_sign(jnp.asarray(x))[1].dtype, np.integer)
    assert jax_pkg.relu_mask(jnp.asarray(x))[1].dtype == jnp.bool_
    assert torch_pkg.abs_sign(torch.from_numpy(x))[1].dtype == torch.int64
    assert torch_pkg.relu_mask(torch.from_numpy(x))[1].dtype == torch.bool


def test_hessian_points_pin_second_derivatives(tmp_path):
    path = tmp_path / "hessians.yaml"
    path.write_text(
        "rules:\n"
        "  - name: cubic_right\n    inputs: [x, y]\n    forward: x**3 * y\n"
        "    checks: {points: [{at: {x: 2.0, y: 3.0}, hessian: {x: {x: 36.0, y: 12.0}, y: {y: 0.0}}}]}\n"
        "  - name: cubic_wrong\n    inputs: [x, y]\n    forward: x**3 * y\n"
        "    checks: {points: [{at: {x: 2.0, y: 3.0}, hessian: {x: {y: 13.0}}}]}\n"
    )
    outcomes = {o.rule: o for o in run_checks(read_rules([path]), only=("points",))}
    assert outcomes["cubic_right"].status == "pass", outcomes["cubic_right"].detail
    assert outcomes["cubic_wrong"].status == "fail"
    assert "hessian x, y: at index () expected 13, got 12" in outcomes["cubic_wrong"].detail


HUBER = RIGHT / "huber_loss.yaml"
# A Huber loss whose quadratic piece's derivative is 1% off: wrong everywhere inside delta.
WRONG_HUBER = (
    HUBER.read_text()
    .replace("huber_loss", "huber_loss_wrong")
    .replace(
        "forward:",
        "derivatives:\n  x: Piecewise((1.01*(x - t), Abs(x - t) < delta), (delta*sign(x - t), True))\n"
        "  t: Piecewise((t - x, Abs(x - t) < delta), (-delta*sign(x - t), True))\n"
        "  delta: Piecewise((0, Abs(x - t) < delta), (Abs(x - t) - delta, True))\nforward:",
    )
)


@pytest.mark.parametrize("seed", [180, pytest.param(195, marks=pytest.mark.slow)])
def test_jvp_fd_skips_the_entries_a_kink_lies_within_the_difference_step_of(tmp_path, seed):
    """At these seeds one point of a right Huber loss lies within the step of |x - t| = delta: it failed jvp_fd."""
    (tmp_path / "wrong.yaml").write_text(WRONG_HUBER.split("checks:")[0])
    # The check read alone: its outcome is the one of a run of every check (each check has its own copy of the
    # rule's one subject, drawn from the seed), without the others' cost.
    outcomes = run_checks(read_rules([HUBER, tmp_path / "wrong.yaml"]), seed=seed, only=("jvp_fd",))
    right, wrong = (
        next(o for o in outcomes if o.rule == rule and o.check == "jvp_fd")
        for rule in ("huber_loss", "huber_loss_wrong")
    )
    assert right.status == "pass", right.detail
    assert "1 of 12 entries skipped: a kink lies within the difference step" in right.detail, right.detail
    assert wrong.status == "fail" and "vs finite differences" in wrong.detail, wrong.detail


def test_a_rule_s_subject_is_built_once_and_every_check_gets_it_as_built(monkeypatch):
    import generated.jax as gj
    import generated.torch as gt
    from rulegen.check import Check, subject_of
    from rulegen.check import run as running

    built = []
    monkeypatch.setattr(running, "subject_of", lambda *args: built.append(args) or subject_of(*args))
    seen = []

    def drawing(s):
        seen.append((s.values[0].copy(), s.rng.standard_normal()))
        s.values[0][...] = 0.0  # changed in place, and a number drawn: neither may reach the next check
        return "drew"

    monkeypatch.setattr(running, "REGISTRY", (Check("one", "on", drawing), Check("two", "tw", drawing)))
    rule = next(r for r in read_rules([RULES / "log1pexp.yaml"]) if r.name == "log1pexp")
    outcomes = list(running.check_rule(rule, gj, gt, 0, False))
    assert [(o.check, o.status) for o in outcomes] == [("one", "pass"), ("two", "pass")]
    assert len(built) == 1
    # Each check starts where a subject built for it alone would: the same sample, the same next draw.
    alone = subject_of(rule, gj, gt, 0)
    for values, drawn in seen:
        assert np.array_equal(values, alone.values[0]) and not np.all(values == 0)
        assert drawn == alone.fresh().rng.standard_normal()


def test_wide_takes_an_input_with_a_domain_inside_it(tmp_path, monkeypatch):
    """A label in [0, 1] is never -11370 (the focal loss's wide failure named one); a positive scale is reflected
    into its half-line; an input without a domain still goes out to ±1e4."""
    from rulegen.check import numerical

    seen = []
    compare_point = numerical._wide_compare

    def spy(point, refs, grads, scales):
        seen.append({i.name: float(np.ravel(v)[0]) for i, v in zip(point.rule.inputs, point.values, strict=True)})
        return compare_point(point, refs, grads, scales)

    monkeypatch.setattr(numerical, "_wide_compare", spy)
    path = tmp_path / "label.yaml"
    path.write_text(
        "name: weighted_softplus\n"
        "inputs: {z: {}, y: {domain: [0, 1]}, s: {domain: {gt: 0}}}\n"
        "forward: y * log(1 + exp(z)) + s\n"
    )
    (outcome,) = run_checks(read_rules([path]), only={"wide"})
    assert outcome.status == "pass", outcome.detail
    assert len(seen) == 8
    assert all(0 <= p["y"] <= 1 and p["s"] > 0 for p in seen), seen
    assert len({p["y"] for p in seen}) == 8 and max(abs(p["z"]) for p in seen) > 1e4


@pytest.mark.parametrize("name", ["f_hypot", "f_atan2", "f_pow", "f_xlogy"])
def test_the_wide_check_takes_every_input_s_gradient_from_one_pass_as_a_pass_per_input_gives(bundled, name):
    # `_point_grads` differentiates in every input at once: the numbers are each input's gradient alone, JAX's
    # (argnums one input) and torch's (one leaf needing grad), at the sample and at the wide points.
    import dataclasses
    import importlib

    import jax
    import torch

    from rulegen.check.derivatives import sum_of
    from rulegen.check.numerical import WIDE_POINTS, _point_grads, wide_point
    from rulegen.check.subject import subject_of, to_numpy

    (rule,) = [r for r in read_rules([RULES / "functions.yaml"]) if r.name == name]
    jax_pkg, torch_pkg = (importlib.import_module(f"{bundled}.{backend}") for backend in ("jax", "torch"))
    s = subject_of(rule, jax_pkg, torch_pkg, 0, [name])
    assert len(s.xs()) == 2
    points = [s] + [dataclasses.replace(s, values=v) for c in WIDE_POINTS if (v := wide_point(s, c)) is not None]
    assert len(points) > 2
    for point in points:
        xs = point.xs()
        for k, got in enumerate(_point_grads(point, "jax")):
            want = to_numpy(jax.grad(sum_of(point.jax_f), k)(*xs))
            np.testing.assert_array_equal(got, want)
        for k, got in enumerate(_point_grads(point, "torch")):
            leaves = [torch.from_numpy(x).requires_grad_(j == k) for j, x in enumerate(xs)]
            (want,) = torch.autograd.grad(sum_of(point.torch_f)(*leaves), leaves[k])
            np.testing.assert_array_equal(got, to_numpy(want))
