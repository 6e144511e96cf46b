"""Snippet forwards, built: their derivatives measured against autodiff of the forward body in float64."""

from __future__ import annotations

import importlib
import re

import jax
import numpy as np
import pytest

from rulegen.check.accuracy_snippet import against_terms, check_snippet_accuracy
from rulegen.check.outcome import CheckFailed, NotApplicable
from rulegen.check.subject import subject_of
from rulegen.spec.rules import read_rule_file
from tests.conftest import built_package

jax.config.update("jax_enable_x64", True)

# logsumexp with the gradient `exp(x - out)`, which carries the output's rounding error (ulp(out)).
OUTPUT_ROUNDING = """\
    forward:
      python: |
        m = xp.max(x, axis=-1, keepdims=True)
        return xp.squeeze(m, axis=-1) + xp.log(xp.sum(xp.exp(x - m), axis=-1))
    vjp:
      python: return out_bar[..., None] * xp.exp(x - out[..., None])
"""

SNIPPETS = f"""\
rules:
  - name: sa_output_rounding
    inputs: [x]
{OUTPUT_ROUNDING}  - name: sa_residuals
    inputs: [x]
    forward:
      python: |
        m = xp.max(x, axis=-1, keepdims=True)
        e = xp.exp(x - m)
        s = xp.sum(e, axis=-1)
        return xp.squeeze(m, axis=-1) + xp.log(s), e, s
    residuals: [e, s]
    jvp:
      python: return xp.sum(e * x_dot, axis=-1) / s
    vjp:
      python: return (out_bar / s)[..., None] * e
  # The same wrong VJP, but the rule checks its input on [0.5, 2] only: it stays there.
  - name: sa_in_domain
    inputs:
      x: {{shape: [4], domain: [0.5, 2.0]}}
{OUTPUT_ROUNDING}  # A sympy forward with a VJP written by hand:
  # the derivative loses every bit near 0, where autodiff's sinh
  # keeps them (tests/wrong_rules/derivative_loses_bits.yaml, written as a snippet).
  - name: sa_cosh_difference
    inputs: [x]
    forward: cosh(x)
    vjp:
      python: return out_bar * (xp.exp(x) - xp.exp(-x)) / 2
  # softmax's VJP as torch's _softmax_backward_data writes it: where one output rounds to 1, the entry
  # there is the difference of two nearly equal terms of the cotangent's size, right to their rounding.
  - name: sa_softmax_as_torch_writes_it
    inputs: [x]
    forward:
      python: |
        e = xp.exp(x - xp.max(x, axis=-1, keepdims=True))
        return e / xp.sum(e, axis=-1, keepdims=True)
    vjp:
      python: return out * (out_bar - xp.sum(out * out_bar, axis=-1, keepdims=True))
  - name: sa_host
    inputs: [x]
    forward:
      numpy: return np.sin(x)
    jvp:
      python: return xp.cos(x) * x_dot
"""


@pytest.fixture(scope="module")
def snippets(tmp_path_factory):
    root = tmp_path_factory.mktemp("snippet_accuracy")
    with built_package(root, SNIPPETS, "rg_snippet_accuracy"):
        rules = {r.name: r for r in read_rule_file(root / "rg_snippet_accuracy.yaml")}
        jax_pkg = importlib.import_module("rg_snippet_accuracy.jax")
        torch_pkg = importlib.import_module("rg_snippet_accuracy.torch")
        yield lambda name: subject_of(rules[name], jax_pkg, torch_pkg, 0, list(rules))


def test_a_gradient_that_carries_the_output_s_rounding_fails_where_the_sample_is_moved_to_large_logits(snippets):
    with pytest.raises(CheckFailed) as failed:
        check_snippet_accuracy(snippets("sa_output_rounding"))
    # exp(x - out) is exact near 0; near 1e4, ulp(out) ~ 1e-3 is the exponent's error.
    said = r"dout/dx in float32 \(jax\): [0-9.]+ bits of error at the sample shifted by -10000\.3 \(inputs from "
    assert re.match(said + r"\S+ to \S+\), autodiff of the forward body [0-2]\.[0-9];", str(failed.value))


def test_derivatives_from_the_forward_s_residuals_pass_at_every_magnitude(snippets):
    said = check_snippet_accuracy(snippets("sa_residuals"))
    assert "jax, torch; float32 at 20 points: the sample moved to magnitudes 1e-20-1e4" in said


def test_an_input_with_a_domain_of_its_own_is_measured_where_the_rule_checks_it(snippets):
    # On [0.5, 2] the output is below 4 and exp(x - out) loses nothing: only the sample itself is measured.
    assert "float32 at the sample as given" in check_snippet_accuracy(snippets("sa_in_domain"))


def test_a_sympy_forward_with_a_hand_written_derivative_is_measured_against_autodiff_of_the_forward(snippets):
    with pytest.raises(CheckFailed, match=r"dout/dx in float32 \(jax\): [0-9.]+ bits of error at the sample scaled"):
        check_snippet_accuracy(snippets("sa_cosh_difference"))


def test_softmax_s_vjp_as_torch_writes_it_is_right_to_the_size_of_its_terms(snippets):
    # It gave 0 where one logit leads by 50 and the entry is 4.4e-23: 29.4 bits against the entry, half an
    # ulp against the cotangent's entries, which the VJP sums.
    said = check_snippet_accuracy(snippets("sa_softmax_as_torch_writes_it"))
    assert "no value or partial worse than autodiff" in said


def test_an_error_counts_against_the_size_of_the_terms_only_where_the_exact_value_is_small_beside_them():
    exact = np.array([4.4e-23, 0.5, 0.0])
    got = np.array([0.0, 0.5 + 2.0**-20, np.nan])
    assert against_terms(got, exact, 1.0).round(2).tolist() == [0.0, 4.09, 32.0]
    assert against_terms(got, exact, 0.0)[0] > 28  # an elementwise rule's entries sum nothing


def test_a_host_forward_has_no_autodiff_to_measure_against(snippets):
    with pytest.raises(NotApplicable, match="a host forward runs outside autodiff"):
        check_snippet_accuracy(snippets("sa_host"))


def test_the_accuracy_table_of_a_snippet_rule_marks_the_worse_gradient_and_not_the_accurate_one(snippets):
    from rich.console import Console

    from rulegen.check.accuracy_report import accuracy_table
    from rulegen.check.accuracy_snippet import snippet_accuracy

    def table(name):
        console = Console(width=100, record=True, color_system="truecolor")
        result = snippet_accuracy(snippets(name))
        assert not result.skipped and result.dtypes == ["float32"]
        console.print(accuracy_table(result))
        return console.export_text(styles=True), result

    text, wrong = table("sa_output_rounding")
    assert re.search(r"│ dout/dx +│ float32 │", text) and "\x1b[1;31m" in text  # bold red: worse than autodiff
    partial = next(q for q in wrong.quantities if q.label == "dout/dx")
    assert (
        wrong.find(partial, "float32", "jax", "generated").max
        > 10
        >= wrong.find(partial, "float32", "jax", "autodiff").max
    )
    text, _ = table("sa_residuals")
    assert "\x1b[1;31m" not in text and re.search(r"│ dout/dx \(jvp\) +│ float32 │", text)
    assert snippet_accuracy(snippets("sa_host")).skipped.startswith("a host forward runs outside autodiff")


def test_the_accuracy_command_measures_a_rule_written_with_snippets(tmp_path, monkeypatch):
    from pathlib import Path

    from typer.testing import CliRunner

    from rulegen.cli import app

    logsumexp = Path(__file__).resolve().parents[2] / "rules" / "logsumexp.yaml"
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["accuracy", str(logsumexp)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "not measured" not in result.output
    for row in ("out", "dout/dx", r"dout/dx \(jvp\)"):
        assert re.search(rf"│ {row} +│ float32 │(?: +\d+\.\d\d / \d+ │){{4}}", result.output), row
    assert "float32 against autodiff of the forward in float64" in result.output
