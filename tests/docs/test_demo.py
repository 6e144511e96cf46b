"""The README's demo runs, and shows in float32 what a rule is for."""

import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_demo_shows_plain_autodiff_nan_beside_the_rule_in_float32():
    result = subprocess.run([sys.executable, "demo.py"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "float32" in lines[0], result.stdout
    for framework in ("jax.grad", "torch backward"):
        naive, ruled = next(line for line in lines if line.strip().startswith(framework)).split()[-2:]
        assert math.isnan(float(naive)) or math.isinf(float(naive)), result.stdout
        assert float(ruled) == 1.0, result.stdout
    # What `rulegen show --why` prints for it: the stable form the rule's derivative was rewritten to.
    why = next(line for line in lines if "dout/dx" in line and "canonical" in line)
    assert "sigmoid(x)" in why, result.stdout
    # Plain numbers, no framework reprs.
    assert "Array(" not in result.stdout and "tensor(" not in result.stdout, result.stdout
