"""The README's benchmark command runs and prints every table whole (its ratios are for people, not asserts)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.__main__ import runs

ROOT = Path(__file__).resolve().parents[2]
RATIO = r"\d+\.\d\d \[\d+\.\d\d, \d+\.\d\d\]"
MS = r"\d+\.\d\d"


TORCH_CASES = [
    "mish",
    "gelu (erf)",
    "gelu (tanh)",
    "swish",
    "softplus",
    "log1pexp",
    "sin(x)*exp(-x^2)*y",
    "softplus(beta x)/beta",
]
ERROR = r"(inf|[\d.e+-]+)"
BITS = r"\d+\.\d/\d+\.\d"  # generated/autodiff mean bits of error
POLICY = r"(?:best|balanced|fast)"  # the accuracy policy the row's rule was built under


def _torch_eager(out: str) -> None:
    for case in TORCH_CASES:
        # four ratio columns, saved MB for the generated, autodiff, hand-written and fused Functions,
        # then the floor, generated and fused milliseconds, fused / floor, and the slowest transcendental alone
        row = (
            rf"^{re.escape(case)} +{RATIO} +{RATIO} +{RATIO} +{RATIO} +\d+/\d+/\d+/\d+ +{MS}/{MS}/{MS} +\d+\.\dx"
            rf" +[a-z]+ {MS} +{POLICY}$"
        )
        assert re.search(row, out, re.M), case
    assert re.search(rf"minimal torch.func-style Function/autodiff {RATIO}, generated/autodiff {RATIO}$", out, re.M)


def _torch_compile(out: str) -> None:
    for case in TORCH_CASES:  # gen/composite, the two median times, graphs made of each step
        assert re.search(rf"^{re.escape(case)} +{RATIO} +\d+\.\d\d +\d+\.\d\d +\d+/\d+$", out, re.M), case


def _jax_jit(out: str) -> None:
    for case in ["log1pexp", "softplus", "tanh", "tanh_exact", "sin_mul", "sin_exp_mul", "gelu"]:
        assert re.search(rf"^{case} +{RATIO} +{RATIO} +{RATIO} +{RATIO} +{POLICY}$", out, re.M), case
    # float32 error of value and derivative: generated, hand-written, composite
    for case in ["log1pexp", "softplus", "tanh", "tanh_exact", "gelu"]:
        assert re.search(rf"^{case}(?: +{ERROR}, {ERROR}){{3}}$", out, re.M), case
    for case in ["softmax", "softmax_ad", "logsumexp"]:  # hand-written custom_vjps: no forward mode
        assert re.search(rf"^{case} +{RATIO} +{RATIO} +n/a +{RATIO} +{POLICY}$", out, re.M), case


def _low_precision(out: str) -> None:
    for k, case in enumerate(TORCH_CASES):  # bf16 and f16: 8 error pairs, then 8 speed ratios (eager, f32 body,
        # compiled, JAX), where --quick compiles the first case only
        compiled = RATIO if k == 0 else "-"
        assert re.search(rf"^{re.escape(case)}(?: +{ERROR}, {ERROR}){{8}}$", out, re.M), case
        speeds = rf"(?: +{RATIO}){{4}}(?: +{compiled}){{2}}(?: +{RATIO}){{2}}"
        assert re.search(rf"^{re.escape(case)}{speeds}$", out, re.M), case


def _build_speed(out: str) -> None:
    for count in (10, 30):
        assert re.search(rf"^ +{count} +\d+\.\d\d +\d+\.\d +\d\.\d{{3}}$", out, re.M), count
    # The fixed cost is a fit: on a loaded machine it came out below zero ("cold = -0.68 s + 290.4 ms x rules").
    assert re.search(r"^least squares: cold = -?\d+\.\d\d s \+ \d+\.\d ms x rules$", out, re.M)


def _import_time(out: str) -> None:
    for framework in ("jax", "torch"):  # rules, best s, median s, CPU s, gelu s, every rule s, the framework's gc s
        assert re.search(rf"^generated\.{framework} +\d+(?: +\d+\.\d{{3}}){{6}}  ", out, re.M), framework


def _model(out: str) -> None:
    for row in ["torch eager step", "torch compile step", "jax jit step"]:  # time ratio, then peak memory
        assert re.search(rf"^{row} +{RATIO} +(n/a|\d+\.\d / \d+\.\d MiB)$", out, re.M), row
    for row in ["torch jacfwd (input slice)", "torch hvp (fwd over rev)", "jax jacfwd (input slice)"]:
        assert re.search(rf"^{re.escape(row)} +{RATIO}$", out, re.M), row
    for row in ["jacfwd", "hvp"]:  # against the native model with gelu's accurate erfc form
        assert re.search(rf"^  {row}, erfc gelu +{RATIO}$", out, re.M), row
    for row in ["jacfwd", "hvp"]:  # against jax.nn.gelu with a derivative as accurate as the generated one
        assert re.search(rf"^  {row}, exact-density gelu +{RATIO}$", out, re.M), row
    steps = ["  eager step, erfc gelu", "  compile step, erfc gelu", "  jit step, exact-density gelu"]
    steps += [
        f"  {step} step, {name} alone"
        for step in ("eager", "jit")
        for name in ("gelu", "swish", "softmax", "logsumexp")
    ]
    for row in steps:  # where the steps' ratios come from: time, then peak memory
        assert re.search(rf"^{re.escape(row)} +{RATIO} +(n/a|\d+\.\d / \d+\.\d MiB)$", out, re.M), row


def _accuracy(out: str) -> None:
    for suite in ("rules/", "FPBench hamming-ch3", "distributions", "ml"):
        for kind in ("gradient", "value"):
            pairs = ", ".join(rf"float(?:64|32) (?:jax|torch) {BITS}" for _ in range(4))
            assert re.search(rf"^{re.escape(suite)} mean bits, {kind} generated/autodiff: {pairs}$", out, re.M)
        summary = (
            rf"^{re.escape(suite)} summary: (\d+) of (\d+) rules within 1 bit \(gradient; float32 alone (\d+)\), "
            r"(\d+) \(float32 (\d+)\) where JAX's points with a subnormal input, which XLA reads as 0, are left "
            r"out; \d+ worse than autodiff \(gradient\)(?:: [\w, ]+)?; \d+ inf or nan where the exact value is finite"
        )
        found = re.search(summary, out, re.M)
        assert found, suite
        within, rules, within32, read, read32 = map(int, found.groups())
        # A rule within 1 bit in every dtype is within in float32; one within at every point is within at fewer.
        assert within <= within32 <= rules and within <= read <= rules and within32 <= read32 <= rules, found[0]
    # --quick: every twelfth rule of rules/, every third of FPBench's, the first of the distributions and ML suites
    for rule in ("log1pexp", "nmse_example_3_1", "nmse_problem_3_4_5", "normal_log_prob", "ml_log_sigmoid"):
        assert re.search(rf"^{rule} +(?:{BITS} +){{7}}{BITS}$", out, re.M), rule


#: What each benchmark's table must hold, by module: every module `python -m benchmarks` runs has one.
TABLES = {
    "benchmarks.torch_eager": _torch_eager,
    "benchmarks.torch_compile": _torch_compile,
    "benchmarks.jax_jit": _jax_jit,
    "benchmarks.low_precision": _low_precision,
    "benchmarks.build_speed": _build_speed,
    "benchmarks.import_time": _import_time,
    "benchmarks.model": _model,
    "benchmarks.accuracy": _accuracy,
}


def test_every_benchmark_has_its_table_checked():
    assert [module for module, *_ in runs(quick=True)] == list(TABLES)


# One test per benchmark, as `python -m benchmarks --quick` runs each: in a process of its own,
# so that the slow lane's workers share them out.
@pytest.mark.costly
@pytest.mark.slow
@pytest.mark.parametrize("command", runs(quick=True), ids=lambda command: command[0])
def test_quick_benchmark_prints_a_ratio_for_every_case(command):
    module, *args = command
    run = subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout + run.stderr
    TABLES[module](run.stdout)


def test_a_benchmark_s_arguments_are_its_size_and_quick_or_its_usage():
    # `python -m benchmarks.torch_eager --help` ended in a ValueError traceback from int("--help").
    from benchmarks import size_and_quick

    assert size_and_quick([], 22, "usage") == (22, False)
    assert size_and_quick(["18", "--quick"], 22, "usage") == (18, True)
    for wrong in (["--help"], ["18", "19"], ["big"]):
        with pytest.raises(SystemExit) as stopped:
            size_and_quick(wrong, 22, "usage")
        assert stopped.value.code == 2


# Each benchmark times variants of one function: they must compute the same values and derivatives, or its
# ratios compare different work (the JAX model's native logsumexp once reduced over every axis).


def test_the_model_s_native_and_generated_variants_compute_the_same_loss_and_gradients():
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch

    from benchmarks import model

    size = model.QUICK
    native, generated = model._torch_models(size)
    erfc_gelu, _ = model._torch_models(size, model.TORCH_NATIVE_ERFC_GELU)
    alone = [
        model._torch_models(size, model.TORCH_NATIVE, ops)[1]
        for _, ops in model.one_generated(model.TORCH_NATIVE, model.TORCH_GENERATED)
    ]
    x, labels = model._torch_data(size)
    losses, grads = [], []
    for block in (native, generated, erfc_gelu, *alone):
        block.zero_grad()
        loss = block(x, labels)
        loss.backward()
        losses.append(loss.detach())
        grads.append(torch.cat([p.grad.flatten() for p in block.parameters()]))
    for k in range(1, len(losses)):
        torch.testing.assert_close(losses[k], losses[0], rtol=1e-5, atol=0)
        torch.testing.assert_close(grads[k], grads[0], rtol=1e-4, atol=1e-6)

    params = model._jax_params(size)
    jx = jnp.asarray(x.numpy())
    jl = jnp.asarray(labels.numpy())
    values = [
        jax.value_and_grad(model._jax_loss(ops, size))(params, jx, jl)
        for ops in (
            model.JAX_NATIVE,
            model.JAX_GENERATED,
            model.JAX_NATIVE_EXACT_DENSITY,
            *(ops for _, ops in model.one_generated(model.JAX_NATIVE, model.JAX_GENERATED)),
        )
    ]
    for value in values[1:]:
        np.testing.assert_allclose(value[0], values[0][0], rtol=1e-5)
        for name in params:
            np.testing.assert_allclose(value[1][name], values[0][1][name], rtol=1e-3, atol=1e-6)


def test_the_jax_and_torch_benchmark_cases_compute_one_function_each():
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch

    from benchmarks import jax_jit, torch_eager

    points = np.linspace(-4, 4, 2 * jax_jit.ROWS, dtype=np.float32)
    for name, arity, *variants in jax_jit.CASES:
        shape = (2, jax_jit.ROWS) if name in ("softmax", "softmax_ad", "logsumexp") else (-1,)
        args = [jnp.asarray(np.roll(points, k).reshape(shape)) for k in range(arity)]
        outs = [(f(*args), jax.grad(lambda *a, f=f: jnp.sum(jnp.sin(f(*a))))(*args)) for f in variants]
        for value, grad in outs[1:]:
            np.testing.assert_allclose(value, outs[0][0], rtol=1e-4, atol=1e-6, err_msg=name)
            np.testing.assert_allclose(grad, outs[0][1], rtol=1e-3, atol=1e-5, err_msg=name)
    for name, arity, *variants, _ in torch_eager.CASES:
        args = [torch.tensor(np.roll(points, k), dtype=torch.float64, requires_grad=True) for k in range(arity)]
        outs = [(f(*args), torch.autograd.grad(f(*args).sin().sum(), args)) for f in variants]
        for value, grad in outs[1:]:
            torch.testing.assert_close(value, outs[0][0], rtol=1e-10, atol=1e-12, msg=name)
            torch.testing.assert_close(grad, outs[0][1], rtol=1e-8, atol=1e-10, msg=name)


def test_a_benchmark_takes_an_accuracy_policy_out_of_its_arguments():
    from benchmarks import policy_argument, size_and_quick

    assert policy_argument(["18", "--accuracy", "fast", "--quick"]) == ("fast", ["18", "--quick"])
    assert policy_argument(["18"]) == (None, ["18"])
    assert size_and_quick(["--accuracy", "balanced", "18"], 22, "usage") == (18, False)
    for wrong in (["--accuracy"], ["--accuracy", "quick"]):
        with pytest.raises(SystemExit) as stopped:
            policy_argument(wrong)
        assert stopped.value.code == 2


def test_the_zoo_is_forty_forward_only_rules_its_table_names_in_order():
    from benchmarks import zoo_speed
    from rulegen.spec.rules import read_rules

    rules = read_rules([zoo_speed.ZOO])
    assert len(rules) == 40
    assert all(not (r.derivatives or r.jvp or r.vjp) for r in rules), "the compiler derives every partial"
    assert zoo_speed.layout().labels == tuple(r.name for r in rules)


def test_against_commit_imports_a_commit_s_package_beside_today_s_and_times_the_same_functions():
    # The A/B benchmark compares the generated code of two commits: HEAD's committed package must import beside
    # generated/ (its torch ops named after its own modules) and its functions compute what today's compute.
    import importlib

    import torch

    from benchmarks import against_commit

    assert against_commit.main([]) == 2 and against_commit.main(["HEAD", "big"]) == 2
    against_commit.generated_at("HEAD")
    then = importlib.import_module(f"{against_commit.PACKAGE}.torch")
    now = importlib.import_module("generated.torch")
    assert then.__file__ != now.__file__
    x, y = torch.linspace(-3, 3, 7, dtype=torch.float64), torch.linspace(0.5, 2, 7, dtype=torch.float64)
    for _, name, arity, statics in against_commit.TORCH_CASES:
        args = (x, y)[:arity]
        got = [against_commit._function(package, name, statics)(*args) for package in (then, now)]
        for a, b in zip(against_commit._outputs(got[0]), against_commit._outputs(got[1]), strict=True):
            torch.testing.assert_close(a, b)
