"""The README's benchmark command runs and prints every table whole (its ratios are for people, not asserts)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RATIO = r"\d+\.\d\d \[\d+\.\d\d, \d+\.\d\d\]"
MS = r"\d+\.\d\d"


@pytest.mark.slow
def test_quick_benchmarks_print_a_ratio_for_every_case():
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick"], cwd=ROOT, capture_output=True, text=True, timeout=900
    )
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    torch_cases = [
        "mish",
        "gelu (erf)",
        "gelu (tanh)",
        "swish",
        "softplus",
        "log1pexp",
        "sin(x)*exp(-x^2)*y",
        "softplus(beta x)/beta",
    ]
    for case in torch_cases:
        # four ratio columns, saved MB for the generated, autodiff, hand-written and fused Functions,
        # then the floor, generated and fused milliseconds, and fused / floor
        row = rf"^{re.escape(case)} +{RATIO} +{RATIO} +{RATIO} +{RATIO} +\d+/\d+/\d+/\d+ +{MS}/{MS}/{MS} +\d+\.\dx$"
        assert re.search(row, out, re.M), case
    assert re.search(rf"minimal torch.func-style Function/autodiff {RATIO}, generated/autodiff {RATIO}$", out, re.M)
    for case in torch_cases:  # torch.compile: gen/composite, the two median times, graphs made of each step
        assert re.search(rf"^{re.escape(case)} +{RATIO} +\d+\.\d\d +\d+\.\d\d +\d+/\d+$", out, re.M), case
    for case in ["log1pexp", "sin_mul", "gelu"]:
        assert re.search(rf"^{case} +{RATIO} +{RATIO} +{RATIO} +{RATIO}$", out, re.M), case
    error = r"(inf|[\d.e+-]+)"
    for case in ["log1pexp", "gelu"]:  # float32 error of value and derivative: generated, hand-written, composite
        assert re.search(rf"^{case}(?: +{error}, {error}){{3}}$", out, re.M), case
    for case in ["softmax", "logsumexp"]:  # hand-written custom_vjps: no forward mode
        assert re.search(rf"^{case} +{RATIO} +{RATIO} +n/a +{RATIO}$", out, re.M), case
    for case in torch_cases:  # bf16 and f16: 8 error pairs, then 8 speed ratios (eager, f32 body, compiled, JAX)
        assert re.search(rf"^{re.escape(case)}(?: +{error}, {error}){{8}}$", out, re.M), case
        assert re.search(rf"^{re.escape(case)}(?: +{RATIO}){{8}}$", out, re.M), case
    for count in (10, 100):
        assert re.search(rf"^ +{count} +\d+\.\d\d +\d+\.\d +\d\.\d{{3}}$", out, re.M), count
    for row in ["torch eager step", "torch compile step", "jax jit step"]:  # time ratio, then peak memory
        assert re.search(rf"^{row} +{RATIO} +(n/a|\d+\.\d / \d+\.\d MiB)$", out, re.M), row
    for row in ["torch jacfwd (input slice)", "torch hvp (fwd over rev)", "jax jacfwd (input slice)"]:
        assert re.search(rf"^{re.escape(row)} +{RATIO}$", out, re.M), row
    assert re.search(r"^least squares: cold = \d+\.\d\d s \+ \d+\.\d ms x rules$", out, re.M)
    bits = r"\d+\.\d/\d+\.\d"  # generated/autodiff mean bits of error
    for suite in ("rules/", "FPBench hamming-ch3"):
        for kind in ("gradient", "value"):
            pairs = ", ".join(rf"float(?:64|32) (?:jax|torch) {bits}" for _ in range(4))
            assert re.search(rf"^{re.escape(suite)} mean bits, {kind} generated/autodiff: {pairs}$", out, re.M)
        summary = rf"^{re.escape(suite)} summary: \d+ of \d+ rules within 1 bit \(gradient\), \d+ worse than autodiff"
        assert re.search(summary, out, re.M), suite
    for rule in ("log1pexp", "nmse_example_3_1", "nmse_problem_3_4_6"):
        assert re.search(rf"^{rule} +(?:{bits} +){{7}}{bits}$", out, re.M), rule
