"""The runtime's beta cases (`rulegen/runtime/<backend>/_beta_cases.py`) are what the registry's sympy prints."""

import os
import subprocess
import sys

import pytest

from rulegen.plan import beta_runtime


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_the_shipped_beta_cases_were_printed_from_the_registry_s(backend):
    # Seconds: the cases' sha256, where printing them takes minutes (the slow test below).
    assert beta_runtime.shipped_digest(backend) == beta_runtime.digest(), (
        f"run `python -m rulegen.plan.beta_runtime {backend}`: the registry's beta cases changed"
    )


@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("RULEGEN_REPRINT_BETA"),
    reason="14 minutes of CPU, past CI's budget: RULEGEN_REPRINT_BETA=1 runs it (the digest test above runs always)",
)
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_the_shipped_beta_cases_are_the_registry_s(backend):
    # Minutes of CPU: the cases print as the rules' bodies do. Regenerate with `python -m rulegen.plan.beta_runtime`.
    # What the printed cases compute is checked on every run by the conformance matrix's beta cells and
    # tests/runtime/test_beta_partials.py; this checks that the printer would write them so today.
    path = beta_runtime.RUNTIME / backend / "_beta_cases.py"
    formatted = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--stdin-filename", str(path), "-"],
        input=beta_runtime.module_text(backend),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert formatted == path.read_text(), f"{path} is stale: run `python -m rulegen.plan.beta_runtime {backend}`"


def test_a_rule_calling_beta_prints_the_runtime_s_partial():
    import sympy as sp

    from rulegen.derive import functions as fn
    from rulegen.plan.printers import print_jax, print_torch

    a, b = sp.symbols("a b", real=True)
    for printer in (print_jax, print_torch):
        value, imports = printer(fn.beta_slope(a, b))
        assert value.text == "beta_slope(a, b)"
        assert {(i.module, i.name) for i in imports} == {("._beta", "beta_slope")}
