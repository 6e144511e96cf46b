"""Bad and hostile rule files: each gets `file:line:col: message`, exit 2, and nothing runs or is written."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rulegen.cli import app


def _new_names() -> list[str]:
    """Names a rule may not take as they are, or takes where generated code renames its own: keywords, format keys,
    modules, helpers and builtins generated code reads, the starter's input."""
    import keyword

    from rulegen.spec import names

    snake = re.compile(r"[a-z_][a-z0-9_]*")
    taken = [*keyword.kwlist, *keyword.softkwlist, *names.RESERVED, *names.GLOBAL_NAMES, *names.PRIVATE_NAMES]
    taken += ["x", "u", "x_dot", "none"]
    return sorted({n for n in taken if snake.fullmatch(n)})


@pytest.mark.parametrize("name", _new_names())
def test_new_writes_a_rule_that_reads_or_refuses_the_name(tmp_path, name):
    """`rulegen new class|none|torch` once wrote starters that `rulegen build` then refused."""
    from rulegen.spec.rules import read_rule_file

    result = CliRunner().invoke(app, ["new", name, "--dir", str(tmp_path / "rules")])
    path = tmp_path / "rules" / f"{name}.yaml"
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    if result.exit_code == 0:
        (rule,) = read_rule_file(path)
        assert rule.name == name
    else:
        assert result.exit_code == 2, result.output
        assert f"no rule can be named {name!r}: " in result.output, result.output
        assert not path.exists()


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("a_file", "is a file; --dir names the folder"),
        ("a_file/below", "cannot write"),
        ("missing/parents/rules", None),
    ],
)
def test_new_into_a_folder_that_cannot_be_one_says_why(tmp_path, where, message):
    (tmp_path / "a_file").write_text("not a folder\n")
    result = CliRunner().invoke(app, ["new", "q", "--dir", str(tmp_path / where)])
    if message is None:  # missing parents are made
        assert result.exit_code == 0, result.output
        assert (tmp_path / where / "q.yaml").is_file()
    else:
        assert result.exit_code == 2, result.output
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
        assert message in result.output, result.output
    assert (tmp_path / "a_file").read_text() == "not a folder\n"


def test_schema_is_json_schema_of_the_rule_format():
    import json

    result = CliRunner().invoke(app, ["schema"])
    schema = json.loads(result.output)
    rule = schema["$defs"]["Rule"]
    assert {"name", "inputs", "forward"} <= set(rule["required"])
    assert "loc" not in rule["properties"]
    assert {"$ref": "#/$defs/RuleFile"} in schema["anyOf"]


ROOT = Path(__file__).resolve().parents[2]
BUNDLED = sorted(
    [
        *ROOT.glob("rules/*.yaml"),
        *ROOT.glob("tests/right_rules/*.yaml"),
        *ROOT.glob("tests/wrong_rules/*.yaml"),
        *(ROOT.parent / "shared" / "examples").glob("*.yaml"),
    ]
)


@functools.cache
def schema_validator():
    """rulegen's JSON Schema as `rulegen schema` prints it, ready to validate with."""

    import json

    import jsonschema

    schema = json.loads(CliRunner().invoke(app, ["schema"]).output)
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("path", BUNDLED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_bundled_rule_file_validates_against_the_schema(path):
    # rulegen's YAML reader, as an editor's YAML 1.2 reads `1e-7` (a number; PyYAML's 1.1 reads a string)
    from rulegen.spec.source import load_yaml

    errors = [f"{list(e.absolute_path)}: {e.message}" for e in schema_validator().iter_errors(load_yaml(path))]
    assert not errors, errors[:3]


def test_a_rule_that_keeps_sympy_busy_is_refused_in_time(tmp_path, monkeypatch):
    from rulegen.derive import partials as derive
    from rulegen.spec.errors import SpecErrors
    from rulegen.spec.rules import read_rule_file

    monkeypatch.setattr(derive, "DERIVE_SECONDS", 0.05)
    product = " * ".join(f"(sin({k} * x) + cos(x**{k % 7 + 1}))" for k in range(1, 120))
    path = tmp_path / "slow.yaml"
    path.write_text(f"name: slow\ninputs: [x]\nforward: {product}\n")
    try:
        rules = read_rule_file(path)
        derive.derive_rule(rules[0])
    except SpecErrors as exc:
        assert any("sympy needs more than" in e.message for e in exc.errors), exc
    else:
        pytest.fail("a rule sympy cannot derive in the time limit was accepted")


def test_show_takes_rule_files_as_arguments_and_suggests_near_names(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # outside any project: the rules come from the arguments alone
    (tmp_path / "losses.yaml").write_text(
        "rules:\n"
        "  - {name: huber_pair, inputs: [x, y], forward: '(x - y)**2'}\n"
        "  - {name: hinge, inputs: [x], forward: 'Max(0, 1 - x)'}\n"
    )
    result = CliRunner().invoke(app, ["show", "hinge", "losses.yaml", "-b", "jax"])
    assert result.exit_code == 0, result.output
    assert "def hinge(" in result.output
    # --rules still works, as before the files were arguments.
    assert "def hinge(" in CliRunner().invoke(app, ["show", "hinge", "--rules", "losses.yaml"]).output
    result = CliRunner().invoke(app, ["show", "huber", "losses.yaml"])
    assert result.exit_code == 2, result.output
    assert "no rule named 'huber'; did you mean 'huber_pair'?" in result.output
    result = CliRunner().invoke(app, ["show", "hnige", str(tmp_path)])
    assert result.exit_code == 2 and "did you mean 'hinge'?" in result.output, result.output


def test_a_bare_expression_body_is_located_where_it_is(tmp_path):
    from rulegen.spec.rules import read_rule_file

    path = tmp_path / "bare.yaml"
    path.write_text("name: bare\ninputs: [x]\nforward: x * 2\nvjp: out_bar * 2\n")
    rule = read_rule_file(path)[0]
    # Errors about a body (sympy cannot differentiate it, say) point here, not at <unknown>.
    assert (rule.forward.loc.line, rule.forward.loc.col) == (3, 10)
    assert (rule.vjp.loc.line, rule.vjp.loc.col) == (4, 6)
