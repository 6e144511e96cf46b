"""`.ci/run` runs the README's test command, step by step."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_ci_steps_are_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    (command,) = [line for line in readme.splitlines() if line.startswith("pip install") and "pytest" in line]
    steps = []
    for line in (ROOT / ".ci" / "run").read_text().splitlines():
        if line.startswith("step "):
            words = shlex.split(line)
            steps.append(words[2:])
    assert steps == [shlex.split(part) for part in re.split(r" && ", command)]


SHARED_FIXTURE_SUITE = """
import pytest

@pytest.fixture(scope="module")
def made(request):
    with open("made.log", "a") as log:
        log.write("made\\n")

def test_shared_1(made): pass
def test_alone_1(): pass
def test_shared_2(made): pass
def test_alone_2(): pass
def test_shared_3(made): pass
@pytest.mark.parametrize("k", range(6))
def test_alone_3(k): pass
def test_shared_4(made): pass
"""


def test_the_tests_sharing_a_module_fixture_run_on_one_worker_which_makes_it_once(pytester, monkeypatch):
    # xdist groups a test by its node id's `@group` suffix, which it wrote where pytest 9.2 no longer reads it:
    # under `-n 2 --dist loadgroup` each test went alone, and the seed-0 sweep's module fixture was made twice.
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makeconftest("from tests.conftest import pytest_collection_modifyitems, pytest_configure  # noqa: F401\n")
    pytester.makepyfile(test_suite=SHARED_FIXTURE_SUITE)
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadgroup", "-v", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=12)
    ran = re.findall(r"^\[(gw\d)\] .*PASSED test_suite\.py::(test_\w+)(@\w+)?", result.stdout.str(), re.M)
    shared = [(worker, group) for worker, name, group in ran if name.startswith("test_shared")]
    assert len(shared) == 4 and len(set(shared)) == 1 and shared[0][1] == "@test_suite", ran
    assert all(not group for _, name, group in ran if name.startswith("test_alone")), ran
    assert (pytester.path / "made.log").read_text() == "made\n"


BUILT_ONCE_SUITE = """
import pytest

from tests.conftest import built_once

@pytest.fixture(scope="session")
def folder(tmp_path_factory):
    def make(root):
        (root / "package").write_text("built")
        with open("made.log", "a") as log:
            log.write("made\\n")

    return built_once(tmp_path_factory, "package", make)

@pytest.mark.parametrize("k", range(8))
def test_reads(folder, k):
    assert (folder / "package").read_text() == "built"

@pytest.mark.xdist_group("together")
@pytest.mark.parametrize("k", range(4))
def test_grouped(k): pass
"""


def test_a_package_both_workers_use_is_built_once_and_a_named_group_runs_on_one_worker(pytester, monkeypatch):
    # Each worker built tests/right_rules/ and the conformance matrix's rules for itself (37 s and 30 s of CPU
    # each), and the special-value cells of beta in float64 asked mpmath for the same values on both workers.
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makeconftest("from tests.conftest import pytest_collection_modifyitems, pytest_configure  # noqa: F401\n")
    pytester.makepyfile(test_suite=BUILT_ONCE_SUITE)
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadgroup", "-v", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=12)
    ran = re.findall(r"^\[(gw\d)\] .*PASSED test_suite\.py::(test_\w+)\[\d\](@\w+)?", result.stdout.str(), re.M)
    assert {worker for worker, name, _ in ran if name == "test_reads"} == {"gw0", "gw1"}, ran
    assert (pytester.path / "made.log").read_text() == "made\n"
    grouped = {(worker, group) for worker, name, group in ran if name == "test_grouped"}
    assert len(grouped) == 1 and grouped.pop()[1] == "@together", ran


def test_the_unit_lane_is_a_step_of_its_own_and_the_steps_run_every_test_folder():
    # The unit lane's time is printed as a step's; together the pytest steps run every folder of tests/.
    from tests.conftest import STAGE_FOLDERS

    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    runs = [words[2:] for words in (shlex.split(line) for line in lines if line.startswith("step "))]
    paths = [[w for w in words if w.startswith("tests/")] for words in runs if words[0] == "pytest"]
    assert len(paths) == 2
    assert paths[0] == [f"tests/{folder}" for folder in ("spec", "derive", "plan", "render", "check", "runtime")]
    assert {p.removeprefix("tests/") for p in paths[0]} == STAGE_FOLDERS
    folders = {"/".join(p.relative_to(ROOT).parts[:2]) for p in (ROOT / "tests").rglob("test_*.py")}
    assert folders == {p for run in paths for p in run}
    assert not set(paths[0]) & set(paths[1])


def test_a_passing_test_s_temporary_folder_is_removed_as_it_ends(request):
    # Kept, a lane's folders were removed by pytest's cleanup in a later session, after the kernel had written them
    # out: 3 ms a file on the CI disk, half a minute of the unit lane spent on an earlier package lane's files.
    assert request.config.getini("tmp_path_retention_policy") == "failed"


class _Run:
    """A test run's temporary folders, as `built_once` reads them (`getbasetemp`): a worker's folder inside the
    run's own, as under xdist, where `built_once` shares the run's folder (its parent) between workers."""

    def __init__(self, base: Path) -> None:
        self.base = base / "popen-gw0"
        self.base.mkdir(parents=True)

    def getbasetemp(self) -> Path:
        return self.base


def test_a_shared_package_is_built_over_the_last_run_s_and_rebuilt_where_its_rules_changed(tmp_path, monkeypatch):
    # Each run built the conformance matrix's rules (54 s), tests/right_rules/ and the cookbook's from nothing.
    import rulegen.render.build
    import tests.conftest
    from tests.conftest import shared_package

    monkeypatch.setattr(tests.conftest, "KEPT_BUILDS", tmp_path / "kept")
    planned = []

    def plan_build(*args, **kwargs):
        found = plan(*args, **kwargs)
        planned.append((found[2], found[3]))  # the rule files derived, those reused
        return found

    plan = rulegen.render.build.plan_build
    monkeypatch.setattr(rulegen.render.build, "plan_build", plan_build)
    halved = "rules:\n  - {name: halved, inputs: [x], forward: x / 2}\n"
    thirded = halved + "  - {name: thirded, inputs: [x], forward: x / 3}\n"
    folders = []
    for k, text in enumerate([halved, halved, thirded]):
        with shared_package(_Run(tmp_path / f"run{k}"), text, "rg_kept") as package:
            folders.append(package)
    assert planned == [(("rg_kept.yaml",), ()), ((), ("rg_kept.yaml",)), (("rg_kept.yaml",), ())]
    assert (folders[1] / "jax" / "halved.py").read_text() == (folders[0] / "jax" / "halved.py").read_text()
    assert (folders[2] / "jax" / "thirded.py").exists() and not (folders[1] / "jax" / "thirded.py").exists()


def test_a_kept_build_a_build_refuses_over_is_built_again_from_nothing(tmp_path, monkeypatch):
    import tests.conftest
    from tests.conftest import shared_package

    monkeypatch.setattr(tests.conftest, "KEPT_BUILDS", tmp_path / "kept")
    halved = "rules:\n  - {name: halved, inputs: [x], forward: x / 2}\n"
    with shared_package(_Run(tmp_path / "run0"), halved, "rg_kept"):
        pass
    (kept,) = (tmp_path / "kept").glob("rg_kept-*[!k]")
    edited = kept / "rg_kept" / "jax" / "halved.py"
    edited.write_text(edited.read_text() + "# edited by hand\n")  # a build refuses to write over it
    with shared_package(_Run(tmp_path / "run1"), halved, "rg_kept") as package:
        assert "edited by hand" not in (package / "jax" / "halved.py").read_text()
    assert "edited by hand" not in edited.read_text()
