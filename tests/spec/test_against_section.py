"""`checks.against`: the implementations a rule file declares for the audit, read and refused where they are."""

from __future__ import annotations

from pathlib import Path

import pytest

from rulegen.spec.errors import SpecErrors
from rulegen.spec.rules import read_rule_file

RULE = "name: log1pexp\ninputs: [x]\nforward: log(1 + exp(x))\nchecks:\n  against:\n"


def _written(tmp_path: Path, against: str) -> Path:
    path = tmp_path / "log1pexp.yaml"
    path.write_text(RULE + against)
    return path


def test_declared_implementations_are_read_by_framework(tmp_path: Path) -> None:
    path = _written(tmp_path, "    jax: mylib.ops:log1pexp\n    torch: mylib.ops:Log1pExp.apply\n")
    (rule,) = read_rule_file(path)
    assert rule.checks.against == {"jax": "mylib.ops:log1pexp", "torch": "mylib.ops:Log1pExp.apply"}
    (plain,) = read_rule_file(_written(tmp_path, "    {}\n"))
    assert plain.checks.against == {}


@pytest.mark.parametrize(
    ("against", "where", "message"),
    [
        ("    numpy: mylib:f\n", "6:5", "key 'numpy': Input should be 'jax' or 'torch'"),
        ("    jax: mylib.ops\n", "6:10", "an implementation is MODULE:ATTR (a dotted module, a colon, a name)"),
        ("    torch: 'mylib:'\n", "6:13", "an implementation is MODULE:ATTR"),
        ("    jax: [mylib, f]\n", "6:10", "an implementation is MODULE:ATTR"),
    ],
)
def test_a_bad_declaration_is_refused_where_it_is(tmp_path: Path, against: str, where: str, message: str) -> None:
    path = _written(tmp_path, against)
    with pytest.raises(SpecErrors) as caught:
        read_rule_file(path)
    (error,) = caught.value.errors
    assert str(error.loc).endswith(f"log1pexp.yaml:{where}") and message in error.message, (error.loc, error.message)
