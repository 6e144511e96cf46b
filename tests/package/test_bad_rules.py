"""Bad rule files against a build on disk: located errors, exit 2, and the earlier output left as it was."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rulegen.cli import app
from tests.spec.test_bad_rules import schema_validator

GOOD = """\
name: good
inputs: [x]
forward: sin(x)
"""

# (case id, rule text, expected "line:col", message fragment)
BAD = [
    ("yaml-syntax", "name: a\ninputs: [x\nforward: x\n", None, "yaml"),
    ("duplicate-key", "name: a\ninputs: [x]\nforward: x\nforward: x**2\n", "4:1", "duplicate key 'forward'"),
    (
        "alias-bomb",
        'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
        "b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n",
        None,
        "alias",
    ),
    ("python-tag", "name: a\ninputs: [x]\nforward: !!python/object/apply:os.system ['touch CANARY']\n", "3:10", "tag"),
    ("unknown-key", "name: a\ninputs: [x]\nforward: x\nderivativs: {x: 1}\n", "4:1", "did you mean 'derivatives'"),
    ("missing-forward", "name: a\ninputs: [x]\n", "1:1", "forward"),
    ("bad-name", "name: Not-A-Name\ninputs: [x]\nforward: x\n", "1:7", "name"),
    ("import-call", "name: a\ninputs: [x]\nforward: __import__('os').system('touch CANARY')\n", "3:10", ""),
    ("attribute", "name: a\ninputs: [x]\nforward: x.__class__\n", "3:10", "attribute"),
    ("lambda", "name: a\ninputs: [x]\nforward: (lambda: 1)()\n", "3:1", ""),
    ("subscript", "name: a\ninputs: [x]\nforward: x[0]\n", "3:10", "subscript"),
    ("unknown-name", "name: a\ninputs: [x]\nforward: sin(y)\n", "3:14", "unknown name 'y'"),
    ("unknown-function", "name: a\ninputs: [x]\nforward: frobnicate(x)\n", "3:10", "frobnicate"),
    ("huge-power", "name: a\ninputs: [x]\nforward: (x + 1)**100000\n", "3:10", ""),
    ("deep-nesting", "name: a\ninputs: [x]\nforward: " + "(" * 5000 + "x" + ")" * 5000 + "\n", "3:", ""),
    ("syntax-in-expr", "name: a\ninputs: [x]\nforward: sin(x +\n", "3:", "syntax"),
    ("nonlinear-jvp", "name: a\ninputs: [x]\nforward: sin(x)\njvp: cos(x) * x_dot**2\n", "4:6", "linear"),
    ("derivative-of-unknown-input", "name: a\ninputs: [x]\nforward: x\nderivatives:\n  y: 1\n", "5:", "y"),
    ("default-order", "name: a\ninputs:\n  x: {default: 1.0}\n  y: {}\nforward: x*y\n", None, "default"),
    ("empty-domain", "name: a\ninputs:\n  x: {domain: [2, 1]}\nforward: x\n", "3:", "domain"),
    ("bad-dtype", "name: a\ninputs:\n  x: {dtype: quaternion}\nforward: x\n", "3:", "dtype"),
    ("non-string-key", "name: a\ninputs: [x]\nforward: x\n1: 2\n", "4:1", "key"),
    ("empty-file", "", "1:1", "empty"),
    ("caret-power", "name: a\ninputs: [x]\nforward: x^2\n", "3:", "**"),
    ("output-named-twice", "name: a\ninputs: [x]\noutputs: [x]\nforward: x\n", None, "twice"),
    ("gamma-of-huge-int", "name: a\ninputs: [x]\nforward: x * gamma(1000000)\n", "3:", ""),
    (
        "snippet-syntax",
        "name: a\ninputs: [x]\nforward: x\nvjp:\n  python: |\n    y = out_bar +\n    return y\n",
        "6:",
        "syntax error in the `python` body",
    ),
    (
        "snippet-unknown-name",
        "name: a\ninputs: [x]\nforward: x\nvjp:\n  python: |\n    y = out_bar\n    return y * zz\n",
        "7:16",
        "unknown name 'zz'",
    ),
    ("snippet-no-return", "name: a\ninputs: [x]\nforward: x\nvjp:\n  python: y = out_bar\n", "5:11", "returns nothing"),
    (
        "snippet-import-runs-nothing",
        "name: a\ninputs: [x]\nforward:\n  numpy: |\n    import os\n    os.system('touch CANARY')\n    return x\n"
        "jvp:\n  python: return x_dot * undefined_thing\n",
        "9:",
        "unknown name 'undefined_thing'",
    ),
    (
        "numpy-without-derivative",
        "name: a\ninputs: [x]\nforward:\n  numpy: return x\n",
        "1:1",
        "runs outside autodiff: give a `jvp` or `vjp`",
    ),
    (
        "numpy-vjp-body",
        "name: a\ninputs: [x]\nforward: x\nvjp:\n  numpy: return out_bar\n",
        "5:",
        "is for the forward only",
    ),
    (
        "5000-digit-point",
        "name: a\ninputs: [x]\nforward: x\nchecks:\n  points:\n    - at: {x: " + "7" * 5000 + "}\n",
        "6:15",
        "too large",
    ),
    (
        "point-beyond-float64",
        "name: a\ninputs: [x]\nforward: x\nchecks:\n  points:\n    - at: {x: 1}\n      value: [1, " + "9" * 400 + "]\n",
        "7:",
        "beyond float64",
    ),
    ("domain-wider-than-float64", "name: a\ninputs:\n  x: {domain: [-1e308, 1e308]}\nforward: x\n", "3:", "finite"),
    ("domain-infinite", "name: a\ninputs:\n  x: {domain: [0, .inf]}\nforward: x\n", "3:", "finite"),
    (
        "domain-of-huge-integers",
        "name: a\ninputs:\n  x: {domain: [0, 1" + "0" * 400 + "]}\nforward: x\n",
        "3:",
        "float64",
    ),
    (
        "domain-two-lower-bounds",
        "name: a\ninputs:\n  x: {domain: {gt: 0, ge: 1}}\nforward: x\n",
        "3:",
        "`gt` or `ge`",
    ),
    ("domain-unknown-bound", "name: a\ninputs:\n  x: {domain: {gtt: 0}}\nforward: x\n", "3:", "gtt"),
    ("domain-empty-bounds", "name: a\ninputs:\n  x: {domain: {gt: 1, lt: 1}}\nforward: x\n", "3:", "empty"),
    ("domain-infinite-bound", "name: a\ninputs:\n  x: {domain: {lt: .inf}}\nforward: x\n", "3:", "finite"),
    (
        "domain-assumption-open-bound",
        "name: a\ninputs:\n  x: {domain: {ge: 0}, assume: positive}\nforward: x\n",
        "3:",
        "`assume: positive` fails",
    ),
    (
        "joint-domain-syntax",
        "name: a\ninputs: [x, y]\ndomain: x >= = y\nforward: x\n",
        "3:",
        "invalid expression syntax",
    ),
    ("joint-domain-unknown-name", "name: a\ninputs: [x, y]\ndomain: x >= z\nforward: x\n", "3:", "z"),
    ("mode-vjp-without-vjp", "name: a\ninputs: [x]\nforward:\n  python: return x\nmode: vjp\n", "1:1", "needs a `vjp`"),
    (
        "jax-body-alone",
        "name: a\ninputs: [x]\nforward:\n  jax: return x\n",
        "4:",
        "needs a `torch` (or `python`) body",
    ),
]


def _run(tmp_path: Path, files: dict[str, str], *extra: str):
    rules = tmp_path / "rules"
    rules.mkdir(exist_ok=True)
    for name, text in files.items():
        (rules / name).write_text(text)
    out = tmp_path / "pkg"
    result = CliRunner().invoke(app, ["build", str(rules), "--out", str(out), *extra], catch_exceptions=False)
    return result, out


@pytest.mark.parametrize(("case", "text", "where", "fragment"), BAD, ids=[c[0] for c in BAD])
def test_bad_rule_is_a_located_error_with_exit_2(tmp_path, monkeypatch, case, text, where, fragment):
    monkeypatch.chdir(tmp_path)
    result, out = _run(tmp_path, {"bad.yaml": text})
    output = result.output
    assert result.exit_code == 2, output
    assert "Traceback" not in output
    match = re.search(r"bad\.yaml:(\d+):(\d+): error: (.*)", output)
    assert match, output
    if where is not None:
        assert f"{match.group(1)}:{match.group(2)}".startswith(where), output
    assert fragment.lower() in output.lower(), output
    assert not (tmp_path / "CANARY").exists()
    assert not out.exists()


def test_every_bad_file_is_reported_in_one_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    files = {f"bad{k}.yaml": text for k, (_, text, _, _) in enumerate(BAD[:6])}
    files["good.yaml"] = GOOD
    result, _ = _run(tmp_path, files)
    assert result.exit_code == 2
    reported = set(re.findall(r"(bad\d+)\.yaml:\d+:\d+", result.output))
    assert reported == {f"bad{k}" for k in range(6)}, result.output


def test_a_failed_build_leaves_the_previous_output_untouched(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result, out = _run(tmp_path, {"good.yaml": GOOD})
    assert result.exit_code == 0, result.output
    before = {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    result, _ = _run(
        tmp_path, {"good.yaml": GOOD.replace("sin(x)", "sin(x"), "other.yaml": GOOD.replace("good", "other")}
    )
    assert result.exit_code == 2
    after = {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    assert after == before


def test_a_hand_edited_module_is_not_overwritten_without_force(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result, out = _run(tmp_path, {"good.yaml": GOOD})
    module = out / "jax" / "good.py"
    module.write_text(module.read_text() + "# my fix\n")
    result, _ = _run(tmp_path, {"good.yaml": GOOD.replace("sin(x)", "cos(x)")})
    assert result.exit_code == 1
    assert "edited by hand" in result.output
    assert module.read_text().endswith("# my fix\n")
    result, _ = _run(tmp_path, {"good.yaml": GOOD.replace("sin(x)", "cos(x)")}, "--force")
    assert result.exit_code == 0, result.output
    assert "jnp.cos(x)" in module.read_text()


def test_check_reports_a_stale_package_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result, out = _run(tmp_path, {"good.yaml": GOOD})
    result, _ = _run(tmp_path, {"good.yaml": GOOD}, "--check")
    assert result.exit_code == 0, result.output
    result, _ = _run(tmp_path, {"good.yaml": GOOD.replace("sin(x)", "cos(x)")}, "--check")
    assert result.exit_code == 1
    assert "jnp.sin(x)" in (out / "jax" / "good.py").read_text()


def test_rebuild_of_unchanged_rules_derives_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _run(tmp_path, {"good.yaml": GOOD, "other.yaml": GOOD.replace("good", "other")})
    (tmp_path / "rules" / "other.yaml").write_text(GOOD.replace("good", "other").replace("sin", "cos"))
    result, _ = _run(tmp_path, {})
    assert result.exit_code == 0
    assert "1 file(s) derived, 1 unchanged" in result.output


def test_generated_files_are_deterministic(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _, out = _run(tmp_path, {"good.yaml": GOOD})
    first = {p.relative_to(out): p.read_bytes() for p in out.rglob("*.py")}
    other = tmp_path / "again"
    CliRunner().invoke(app, ["build", str(tmp_path / "rules"), "--out", str(other)], catch_exceptions=False)
    second = {p.relative_to(other): p.read_bytes() for p in other.rglob("*.py")}
    assert first == second


def test_starter_rule_builds(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    assert runner.invoke(app, ["new", "my_rule", "--dir", str(tmp_path / "rules")]).exit_code == 0
    result = runner.invoke(app, ["build", str(tmp_path / "rules"), "--out", str(tmp_path / "pkg")])
    assert result.exit_code == 0, result.output


def test_new_x_builds_with_an_input_of_another_name(tmp_path):
    runner = CliRunner()
    assert runner.invoke(app, ["new", "x", "--dir", str(tmp_path / "rules")]).exit_code == 0
    result = runner.invoke(app, ["build", str(tmp_path / "rules"), "--out", str(tmp_path / "pkg")])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    "text",
    [
        "inputs: [x]\nforward: x\n",  # no name
        "name: a\ninputs: {x: {domian: [0, 1]}}\nforward: x\n",  # a misspelt option
        "name: a\ninputs: {x: {dtype: complex128}}\nforward: x\n",
    ],
)
def test_the_schema_refuses_what_the_reader_refuses(text, tmp_path):
    import yaml

    assert list(schema_validator().iter_errors(yaml.safe_load(text)))
    (tmp_path / "a.yaml").write_text(text)
    result = CliRunner().invoke(app, ["build", str(tmp_path / "a.yaml"), "--out", str(tmp_path / "pkg")])
    assert result.exit_code == 2, result.output


def test_hostile_text_stays_data(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = textwrap.dedent(
        """\
        name: a
        doc: "__import__('os').system('touch CANARY')"
        inputs: [x]
        forward: x
        """
    )
    result, _ = _run(tmp_path, {"a.yaml": text})
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "CANARY").exists()


def test_a_doc_cannot_break_out_of_its_docstring(tmp_path, monkeypatch):
    import subprocess
    import sys

    monkeypatch.chdir(tmp_path)
    doc = 'x"""\nimport pathlib; pathlib.Path("CANARY").touch()\n"""\\'
    text = f"name: a\ndoc: {json_quote(doc)}\ninputs: [x]\nforward: x\n"
    result, _ = _run(tmp_path, {"a.yaml": text})
    assert result.exit_code == 0, result.output
    code = "import pkg.jax, pkg.torch; print(pkg.torch.a.__doc__)"
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "CANARY").exists()
    assert 'pathlib.Path("CANARY")' in proc.stdout


def json_quote(text: str) -> str:
    import json

    return json.dumps(text)


def test_generated_code_is_lint_clean(tmp_path_factory):
    import subprocess

    from rulegen.render.write import RUFF_ARGS, ruff_executable
    from tests.conftest import bundled_package

    # rules/ built: generated/ itself when fresh (CI checks it is), else a build of its own (see bundled_package).
    root, package = bundled_package(tmp_path_factory)
    out = root / package
    proc = subprocess.run(
        [*ruff_executable(), "check", *RUFF_ARGS, "--select", "E,F,W,B,UP,I,N,SIM,RUF", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_show_prints_the_generated_code_of_one_rule(monkeypatch):
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    result = CliRunner().invoke(app, ["show", "log1pexp", "--backend", "torch"])
    assert result.exit_code == 0, result.output
    routes, code = result.output.split("\n", 1)
    assert routes == "routes: JAX: custom_jvp; torch: jvp derived, backward derived"
    assert "class Log1pexp(RuleFunction)" in code
    assert "jax/log1pexp.py" not in code and "custom_jvp" not in code  # the torch module only
