"""The checks of `rulegen test` catch wrong rules and pass correct ones.

tests/wrong_rules/ holds deliberately wrong rules, each naming in a comment
the check that must catch it ("Caught by <check>"); every bundled rule must
pass on several seeds.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rulegen.check import CheckFailed, compare
from rulegen.spec.errors import SpecErrors
from rulegen.spec.rules import read_rules

WRONG = Path(__file__).resolve().parents[1] / "wrong_rules"
WRONG_FILES = sorted(WRONG.glob("*.yaml"))


def test_the_wrong_corpus_is_large_enough():
    assert len(WRONG_FILES) >= 30


def test_compare_reports_where_and_by_how_much():
    with pytest.raises(CheckFailed, match=r"at index \(1,\) expected 2, got 2.5"):
        compare("x", np.array([1.0, 2.5]), np.array([1.0, 2.0]), 1e-7, 1e-9)
    compare("x", np.array([1.0, np.nan]), np.array([1.0, np.nan]), 1e-7, 1e-9)
    compare("x", np.array([np.inf, -np.inf]), np.array([np.inf, -np.inf]), 1e-7, 1e-9)
    with pytest.raises(CheckFailed, match="expected inf, got -inf"):
        compare("x", np.array([-np.inf]), np.array([np.inf]), 1e-7, 1e-9)
    with pytest.raises(CheckFailed, match="shape"):
        compare("x", np.zeros(2), np.zeros(3), 1e-7, 1e-9)


def test_a_jvp_point_without_tangents_is_a_located_spec_error(tmp_path):
    path = tmp_path / "bad_point.yaml"
    path.write_text(
        "name: bad_point\ninputs: [x]\nforward: sin(x)\n"
        "checks:\n  points:\n    - at: {x: 1.0}\n      jvp: {tangent: {x: 1.0}, value: 0.54}\n"
    )
    with pytest.raises(SpecErrors) as raised:
        read_rules([path])
    messages = [f"{e.loc.line}: {e.message}" for e in raised.value.errors]
    assert "7: unknown key 'tangent'; did you mean 'tangents'?" in messages


@pytest.mark.parametrize("width", [80, 100, 140])
def test_the_report_fits_the_console_folding_long_names(width, monkeypatch):
    # At COLUMNS=100, names cut at what 80 columns left them, and lines past the console's width.
    import io

    from rich.console import Console

    import rulegen.cli
    from rulegen.check import CHECKS, Outcome

    names = ["sigmoid_of_statics_only_and_an_array_times_two_and_the_rest_of_a_long_name", "short"]
    outcomes = [Outcome(name, check, "pass", "") for name in names for check in CHECKS]
    outcomes[1] = Outcome(names[0], CHECKS[1], "fail", "max |error| " + "9" * 150 + " at x = 0.5")
    outcomes[2] = Outcome(names[0], CHECKS[2], "n/a", "no float16 " + "a" * 120)
    out = io.StringIO()
    monkeypatch.setattr(rulegen.cli, "out_console", Console(file=out, width=width, highlight=False, soft_wrap=True))
    rulegen.cli._report_checks(outcomes, wide=False)
    lines = out.getvalue().splitlines()
    assert max(len(line) for line in lines) <= width, lines
    title, header, *rest = lines
    assert title.startswith("rulegen test") and header.startswith("rule "), lines
    rows = rest[: next(i for i, line in enumerate(rest) if line.startswith("✓ pass"))]
    # Each rule's marks on its first row; the name whole, folded onto the rows below where it is long.
    marked = [row for row in rows if "✓" in row]
    assert [row.split()[0] for row in marked] == [names[0][: len(marked[0].split()[0])], "short"], rows
    assert all(row.count("✓") + row.count("✗") + row.count("·") == len(CHECKS) for row in marked), rows
    assert "".join(row.split()[0] for row in rows[:-1]) == names[0], rows
    assert (len(rows) == 2) == (len(names[0]) <= width - 3 * len(CHECKS) - 1), rows


def test_a_failure_message_keeps_whole_sentences():
    # A shard_map failure was reported as its first line, which ended at "but got:".
    from rulegen.check.durability import _raised
    from rulegen.check.outcome import brief

    stderr = (
        "Traceback (most recent call last):\n  File ...\n"
        "TypeError: Custom JVP rule must produce primal and tangent outputs with corresponding shapes "
        "and dtypes, but got:\n  primal int64[3]{V:calls} with tangent float0[3], expecting tangent "
        "float0[3]{V:calls}\n--------------------\nFor simplicity, JAX has removed its internal frames."
    )
    message = brief(_raised(stderr))
    assert message.endswith("expecting tangent float0[3]{V:calls}") and "For simplicity" not in message
    long = "The first sentence says what failed. " + "A second goes on " * 60 + "and ends here."
    assert brief(long, 100) == "The first sentence says what failed. (...)"
