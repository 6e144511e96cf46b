"""The pytest plugin collects rule files only where asked: the command line and the `rulegen_rules` ini option."""

from __future__ import annotations

import pytest

from rulegen.check import CHECKS

SQ = "name: sq\ninputs: [x]\nforward: x**2\n"
CUBE = "name: cube\ninputs: [x]\nforward: x**3\n"
TRIVIAL_TEST = "def test_x():\n    pass\n"


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """pytest run in this process, without hypothesis's plugin: it imports hypothesis anew for every run (2 s)."""
    return pytester.runpytest("-p", "no:hypothesispytest", "-p", "no:cacheprovider", *args)


def items(path: str, rule: str) -> list[str]:
    return [f"{path}::{rule}::{check}" for check in CHECKS]


def collected(result: pytest.RunResult) -> list[str]:
    """The node ids that `--collect-only -q` printed."""
    return [line for line in result.outlines if "::" in line]


def test_folder_on_the_command_line_is_collected(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\n")
    (pytester.path / "myrules" / "sub").mkdir(parents=True)
    (pytester.path / "myrules" / "sub" / "sq.yaml").write_text(SQ)
    (pytester.path / "myrules" / "cube.yml").write_text(CUBE)
    (pytester.path / "elsewhere").mkdir()
    (pytester.path / "elsewhere" / "other.yaml").write_text(SQ)
    result = run(pytester, "--collect-only", "-q", "myrules")
    assert result.ret == pytest.ExitCode.OK
    assert sorted(collected(result)) == sorted(items("myrules/cube.yml", "cube") + items("myrules/sub/sq.yaml", "sq"))


def test_yaml_file_on_the_command_line_is_collected(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\n")
    (pytester.path / "data").mkdir()
    (pytester.path / "data" / "sq.yaml").write_text(SQ)
    (pytester.path / "data" / "cube.yaml").write_text(CUBE)
    result = run(pytester, "--collect-only", "-q", "data/sq.yaml")
    assert result.ret == pytest.ExitCode.OK
    assert collected(result) == items("data/sq.yaml", "sq")


@pytest.mark.parametrize("testpaths", [True, False], ids=["testpaths", "no-testpaths"])
def test_ini_option_collects_its_folders_on_plain_pytest(pytester: pytest.Pytester, testpaths: bool) -> None:
    pytester.makepyprojecttoml(
        "[tool.pytest.ini_options]\n"
        + ('testpaths = ["tests"]\n' if testpaths else "")
        + 'rulegen_rules = ["myrules", "one/cube.yaml"]\n'
    )
    pytester.mkdir("tests")
    (pytester.path / "tests" / "test_x.py").write_text(TRIVIAL_TEST)
    pytester.mkdir("myrules")
    (pytester.path / "myrules" / "sq.yaml").write_text(SQ)
    pytester.mkdir("one")
    (pytester.path / "one" / "cube.yaml").write_text(CUBE)
    (pytester.path / "one" / "not_a_rule.yaml").write_text("key: value\n")
    result = run(pytester, "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.OK
    expected = ["tests/test_x.py::test_x", *items("myrules/sq.yaml", "sq"), *items("one/cube.yaml", "cube")]
    assert sorted(collected(result)) == sorted(expected)


def test_ini_folders_are_not_added_to_explicit_arguments(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml('[tool.pytest.ini_options]\ntestpaths = ["tests"]\nrulegen_rules = ["myrules"]\n')
    pytester.mkdir("tests")
    (pytester.path / "tests" / "test_x.py").write_text(TRIVIAL_TEST)
    pytester.mkdir("myrules")
    (pytester.path / "myrules" / "sq.yaml").write_text(SQ)
    result = run(pytester, "--collect-only", "-q", "tests")
    assert result.ret == pytest.ExitCode.OK
    assert collected(result) == ["tests/test_x.py::test_x"]


def test_missing_ini_folder_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml('[tool.pytest.ini_options]\nrulegen_rules = ["nowhere"]\n')
    result = run(pytester, "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*rulegen_rules: no such file or folder: *nowhere*"])


@pytest.mark.parametrize(
    ("ini", "folders"),
    [
        ("[tool.pytest.ini_options]\n", ["rules", "examples", "tests/rules"]),
        # rulegen's own layout: rule files kept as test data under the testpaths
        ('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n', ["tests/right_rules", "tests/rules"]),
    ],
    ids=["rootdir", "testpaths"],
)
def test_project_without_the_option_collects_no_rules(pytester: pytest.Pytester, ini: str, folders: list[str]) -> None:
    pytester.makepyprojecttoml(ini)
    pytester.mkdir("tests")
    (pytester.path / "tests" / "test_x.py").write_text(TRIVIAL_TEST)
    for folder in folders:
        (pytester.path / folder).mkdir(parents=True, exist_ok=True)
        (pytester.path / folder / "cube.yaml").write_text(CUBE)
    # Collecting only: a rule collected by mistake would be built and checked in this process.
    result = run(pytester, "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.OK
    assert collected(result) == ["tests/test_x.py::test_x"]
    result.stdout.no_fnmatch_line("*cube*")
