"""`rulegen test RULE --against ...`: hand-written implementations audited against a rule file.

rulegen's own code of `log1pexp` is built once for the module; each test holds
an implementation of `tests/implementations/` to it with the few checks it
is about.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rulegen.check.against import (
    AgainstError,
    Audit,
    audit_outcomes,
    chosen_audit_checks,
    generated_code,
    load_callable,
    parse_against,
)
from rulegen.check.outcome import Outcome
from rulegen.cli import app
from rulegen.spec.rules import read_rule_file

pytest_plugins = ["pytester"]

HERE = Path(__file__).resolve().parents[1]
IMPLEMENTATIONS = HERE / "implementations"
EXAMPLES = HERE.parent.parent / "shared" / "examples"
LOG1PEXP = EXAMPLES / "log1pexp.yaml"


@pytest.fixture(scope="module")
def importable() -> Iterator[None]:
    sys.path.insert(0, str(IMPLEMENTATIONS))
    yield
    sys.path.remove(str(IMPLEMENTATIONS))


@pytest.fixture(scope="module")
def rulegen_log1pexp(importable: None) -> Iterator[dict[str, Any]]:
    """rulegen's generated log1pexp in each framework, built once."""
    (rule,) = read_rule_file(LOG1PEXP)
    with generated_code([rule]) as modules:
        yield {backend: module.log1pexp for backend, module in modules.items()}


def audited(generated: dict[str, Any], checks: list[str], **targets: str) -> dict[str, Outcome]:
    """The named checks' outcomes on the implementations `targets` names (backend=MODULE:ATTR)."""
    (rule,) = read_rule_file(LOG1PEXP)
    implementations = {backend: load_callable(target) for backend, target in targets.items()}
    audit = Audit(rule, dict(targets), implementations, generated, (rule.name,))
    return {o.check: o for o in audit_outcomes(audit, checks=chosen_audit_checks(checks))}


def test_against_is_parsed_and_refused_with_the_reason() -> None:
    assert parse_against(["jax=pkg.mod:f", "torch=pkg.mod:F.apply"]) == {"jax": "pkg.mod:f", "torch": "pkg.mod:F.apply"}
    for bad in (["numpy=m:f"], ["jax=m"], ["jax=m:f", "jax=m:g"], []):
        with pytest.raises(AgainstError):
            parse_against(bad)
    with pytest.raises(AgainstError, match="cannot import no_such_module_here: ModuleNotFoundError"):
        load_callable("no_such_module_here:f")
    with pytest.raises(AgainstError, match="has no attribute 'nothing'"):
        load_callable("json:nothing")


def test_cli_exits_2_for_a_module_that_does_not_import() -> None:
    result = CliRunner().invoke(app, ["test", str(LOG1PEXP), "--against", "jax=no_such_module_here:log1pexp"])
    assert result.exit_code == 2, result.output
    assert "cannot import no_such_module_here" in result.output


def test_right_implementations_pass_the_audit_checks(rulegen_log1pexp: dict[str, Any]) -> None:
    found = audited(
        rulegen_log1pexp,
        ["jvp_fd", "cross_backend", "generated", "grad_dtype", "saved", "scalars"],
        jax="right_log1pexp:log1pexp",
        torch="right_log1pexp:log1pexp_torch",
    )
    assert {c: o.status for c, o in found.items() if o.check != "scalars"} == dict.fromkeys(
        ["jvp_fd", "cross_backend", "generated", "grad_dtype", "saved"], "pass"
    ), found
    assert found["scalars"].status == "n/a"
    assert "rulegen's generated functions take them" in found["scalars"].detail


def test_naive_log1pexp_is_flagged_where_float32_overflows(rulegen_log1pexp: dict[str, Any]) -> None:
    found = audited(rulegen_log1pexp, ["generated"], jax="wrong_log1pexp_naive:log1pexp")["generated"]
    assert found.status == "fail"
    # Where, what it gives there, and what rulegen's own rule gives.
    assert "in float32 at x=" in found.detail and " is inf; rulegen's log1pexp gives " in found.detail, found.detail


@pytest.mark.parametrize(
    ("target", "check", "says"),
    [
        ("jax=wrong_log1pexp_dtype_leak_jax:log1pexp", "grad_dtype", "is float64 for float32 inputs"),
        ("torch=wrong_log1pexp_dtype_leak_torch:log1pexp", "grad_dtype", "Log1pExp.backward's gradient 0 is float64"),
        ("torch=wrong_log1pexp_ctx_attribute:log1pexp", "saved", "keeps ctx.x as an attribute of ctx"),
        ("torch=wrong_log1pexp_inplace:log1pexp", "saved", "changes its input x in place"),
        ("jax=wrong_log1pexp_dropped_tangent:log1pexp", "jvp_fd", "jax JVP of output out vs finite differences"),
    ],
)
def test_each_bug_fails_the_check_it_names(
    rulegen_log1pexp: dict[str, Any], target: str, check: str, says: str
) -> None:
    backend, _, where = target.partition("=")
    found = audited(rulegen_log1pexp, [check], **{backend: where})[check]
    assert found.status == "fail" and says in found.detail, found


def test_forward_mode_of_a_custom_vjp_is_na_with_what_rulegen_generates(rulegen_log1pexp: dict[str, Any]) -> None:
    (rule,) = read_rule_file(LOG1PEXP)
    target = "wrong_log1pexp_dtype_leak_jax:log1pexp"
    audit = Audit(rule, {"jax": target}, {"jax": load_callable(target)}, rulegen_log1pexp, (rule.name,))
    why = audit.subject(0).no_forward_mode["jax"]
    assert "JAX refuses forward mode of a custom_vjp" in why and "rulegen generates a custom_jvp" in why


def test_one_framework_installed(rulegen_log1pexp: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """torch not importable: a JAX audit runs what needs JAX alone, and the rest is n/a for the reason."""
    # The corpus keeps each rule's JAX and torch versions in one module: imported before torch goes, as a
    # JAX-only user's module imports without it.
    import importlib

    for module in ("right_log1pexp", "wrong_log1pexp_dropped_tangent", "wrong_log1pexp_naive"):
        importlib.import_module(module)
    monkeypatch.setitem(sys.modules, "torch", None)
    only_jax = {"jax": rulegen_log1pexp["jax"]}
    checks = ["forward", "mpmath", "wide", "jvp_fd", "vjp_dot", "transforms_torch", "float32", "points", "dtype"]
    right = audited(only_jax, [*checks, "generated"], jax="right_log1pexp:log1pexp")
    assert {c: o.status for c, o in right.items()} == {
        "forward": "n/a",
        "mpmath": "pass",
        "wide": "pass",
        "jvp_fd": "pass",
        "vjp_dot": "pass",
        "transforms_torch": "n/a",
        "float32": "pass",
        "points": "pass",
        "dtype": "pass",
        "generated": "pass",
    }, right
    assert right["dtype"].detail == "float64 throughout (jax; torch is not installed)"
    wrong = audited(only_jax, ["jvp_fd"], jax="wrong_log1pexp_dropped_tangent:log1pexp")
    assert wrong["jvp_fd"].status == "fail"
    naive = audited(only_jax, ["wide"], jax="wrong_log1pexp_naive:log1pexp")
    assert naive["wide"].status == "fail" and "jax float32 value is not finite" in naive["wide"].detail


def test_a_check_that_never_ends_fails(rulegen_log1pexp: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from rulegen.check import against

    never = threading.Event()
    slow = against.Check("generated", "ge", lambda s: str(never.wait(5)))
    monkeypatch.setattr(against, "AUDIT_CHECKS", (slow,))
    (rule,) = read_rule_file(LOG1PEXP)
    audit = Audit(rule, {}, {}, rulegen_log1pexp, (rule.name,))
    (found,) = audit_outcomes(audit, checks=(slow,), timeout=0.2)
    never.set()
    assert found.status == "fail" and "did not finish in 0 s" in found.detail


def test_pytest_marker_audits_after_the_test(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    # In a process of its own: an in-process run puts back sys.modules as it was, so torch modules first imported
    # there are imported again later, and torch refuses the libraries they register a second time (the checks of
    # the next test on this worker failed with "Only a single TORCH_LIBRARY can be used to register ...").
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(IMPLEMENTATIONS), str(HERE.parent)]))
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(
        test_audit=f"""
        import pytest

        @pytest.mark.rulegen_against({str(LOG1PEXP)!r}, jax="wrong_log1pexp_dropped_tangent:log1pexp",
                                     checks=["jvp_fd", "points"])
        def test_wrong():
            pass

        @pytest.mark.rulegen_against({str(LOG1PEXP)!r}, jax="right_log1pexp:log1pexp", checks=["jvp_fd"])
        def test_right():
            pass
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:hypothesispytest", "-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*check jvp_fd failed: jax JVP of output out vs finite differences*"])


class _TwoOutputs:
    """log1pexp as MyCube is written: the Function also returns its derivative, which the wrapper drops."""

    @staticmethod
    def function() -> Any:
        import torch

        class Log1pExpAndSigmoid(torch.autograd.Function):
            @staticmethod
            def forward(x: Any) -> Any:
                return torch.logaddexp(torch.zeros_like(x), x), torch.sigmoid(x)

            @staticmethod
            def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
                ctx.save_for_backward(inputs[0], output[1])

            @staticmethod
            def backward(ctx: Any, grad_out: Any, grad_sigmoid: Any) -> Any:
                _, sigmoid = ctx.saved_tensors
                # grad_sigmoid is None unless torch materializes it: the wrapper drops that output.
                return grad_out * sigmoid + grad_sigmoid * sigmoid * (1 - sigmoid)

        return lambda x: Log1pExpAndSigmoid.apply(x)[0]


def test_grad_dtype_calls_backwards_as_torch_does(rulegen_log1pexp: dict[str, Any]) -> None:
    """A Function with an output the caller drops gets zeros for its gradient, as from torch's engine."""
    (rule,) = read_rule_file(LOG1PEXP)
    audit = Audit(rule, {"torch": "two:outputs"}, {"torch": _TwoOutputs.function()}, rulegen_log1pexp, (rule.name,))
    (found,) = audit_outcomes(audit, checks=chosen_audit_checks(["grad_dtype"]))
    assert found.status == "pass", found


def test_no_accuracy_is_asked_of_a_forward_mode_the_framework_refuses(rulegen_log1pexp: dict[str, Any]) -> None:
    """A torch Function without jvp has no JVP to measure: accuracy judges its VJP, not a nan JVP."""
    found = audited(rulegen_log1pexp, ["accuracy"], torch="right_log1pexp:log1pexp_torch")["accuracy"]
    assert found.status == "pass", found


def test_a_host_function_that_refuses_bfloat16_is_na_for_low_precision(rulegen_log1pexp: dict[str, Any]) -> None:
    import numpy as np
    import torch

    def on_the_host(x: Any) -> Any:  # NumPy has no bfloat16: x.numpy() raises for it
        return torch.from_numpy(np.logaddexp(0.0, x.detach().numpy()))

    (rule,) = read_rule_file(LOG1PEXP)
    audit = Audit(rule, {"torch": "host:f"}, {"torch": on_the_host}, rulegen_log1pexp, (rule.name,))
    (found,) = audit_outcomes(audit, checks=chosen_audit_checks(["low_precision"]))
    assert found.status == "n/a" and "refuses bfloat16 or float16 inputs (TypeError" in found.detail, found


def test_a_custom_op_passes_opcheck_and_its_silent_zero_jvp_fails(rulegen_log1pexp: dict[str, Any]) -> None:
    found = audited(rulegen_log1pexp, ["jvp_fd", "opcheck"], torch="wrong_log1pexp_custom_op:log1pexp")
    assert found["opcheck"].status == "pass", found
    assert found["jvp_fd"].status == "fail" and "got 0" in found["jvp_fd"].detail, found
    function = audited(rulegen_log1pexp, ["opcheck"], torch="right_log1pexp:log1pexp_torch")["opcheck"]
    assert function.status == "n/a" and "no torch.library custom op" in function.detail


def _declaring(tmp_path: Path, jax: str, torch: str) -> Path:
    """shared/examples/log1pexp.yaml with `checks.against` naming the two implementations."""
    path = tmp_path / "log1pexp.yaml"
    path.write_text(LOG1PEXP.read_text() + f"  against:\n    jax: {jax}\n    torch: {torch}\n")
    return path


def test_rulegen_test_audits_what_a_rule_file_declares(tmp_path: Path, importable: None) -> None:
    path = _declaring(tmp_path, "right_log1pexp:log1pexp", "wrong_log1pexp_dtype_leak_torch:log1pexp")
    result = CliRunner().invoke(app, ["test", str(path), "-c", "jvp_fd", "-c", "grad_dtype", "--json"])
    assert result.exit_code == 1, result.output
    found = {(o["rule"], o["check"]): o["status"] for o in json.loads(result.output)}
    audited = "jax=right_log1pexp:log1pexp, torch=wrong_log1pexp_dtype_leak_torch:log1pexp vs log1pexp"
    # rulegen's own code of the rule, then the implementations the file declares, each held to it.
    assert found == {
        ("log1pexp", "jvp_fd"): "pass",
        (audited, "jvp_fd"): "pass",
        (audited, "grad_dtype"): "fail",
    }, found
    missing = _declaring(tmp_path, "no_such_module_here:log1pexp", "right_log1pexp:log1pexp_torch")
    result = CliRunner().invoke(app, ["test", str(missing), "-c", "jvp_fd"])
    assert result.exit_code == 2 and "cannot import no_such_module_here" in result.output, result.output


def test_the_pytest_plugin_audits_what_a_rule_file_declares(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # In a process of its own, as the marker's test is (torch registers an op library once per process).
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(IMPLEMENTATIONS), str(HERE.parent)]))
    pytester.makeini("[pytest]\n")
    path = _declaring(pytester.path, "right_log1pexp:log1pexp", "wrong_log1pexp_dtype_leak_torch:log1pexp")
    result = pytester.runpytest_subprocess(
        str(path),
        "-p",
        "no:hypothesispytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "-k",
        "against and (jvp_fd or grad_dtype)",
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*log1pexp: check grad_dtype failed: torch=wrong_log1pexp_dtype_leak_torch*float64*"])


@pytest.mark.slow
def test_compile_and_durability_run_on_hand_written_code_with_compile(rulegen_log1pexp: dict[str, Any]) -> None:
    """`--compile` holds the user's code to torch.compile, export and shard_map as it does rulegen's own."""
    (rule,) = read_rule_file(LOG1PEXP)
    targets = {"jax": "right_log1pexp:log1pexp", "torch": "right_log1pexp:log1pexp_torch"}
    implementations = {backend: load_callable(target) for backend, target in targets.items()}
    audit = Audit(rule, targets, implementations, rulegen_log1pexp, (rule.name,))
    checks = chosen_audit_checks(["compile", "durability"])
    without = {o.check: o for o in audit_outcomes(audit, checks=checks)}
    assert {o.status for o in without.values()} == {"n/a"}, without
    found = {o.check: o for o in audit_outcomes(audit, checks=checks, include_compile=True)}
    assert found["compile"].status == "pass", found["compile"]
    assert found["durability"].status in ("pass", "n/a"), found["durability"]
    assert found["durability"].status == "pass" or "shard_map" in found["durability"].detail, found["durability"]
