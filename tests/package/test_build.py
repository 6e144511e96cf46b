"""Parallel and incremental builds of packages: the same bytes, errors from workers, defaults that import.

`rulegen build --jobs N` derives rules in worker processes: the package and
the errors are the same as a serial build's.  An incremental build keeps
unchanged modules as they are on disk, the package's own modules included,
and redoes whatever a changed rule set touches.
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import rulegen.render.build
from rulegen.cli import app
from rulegen.derive.partials import sympy_time_limit
from rulegen.spec.errors import Loc, SpecErrors

RULES = Path(__file__).resolve().parents[2] / "rules"

# Two rules in one file, the second calling the first by name: workers must
# know every rule of the build, and regroup outcomes by file in order.
PAIR = """\
rules:
  - name: halved
    inputs: [x]
    forward: x / 2
  - name: halved_twice
    inputs: [x]
    forward:
      python: return halved(halved(x))
"""


@pytest.fixture
def pools(monkeypatch) -> list[int]:
    """Every build derives in workers; records the size of each pool started."""
    started: list[int] = []
    make_pool = rulegen.render.build.worker_pool

    def recording_pool(workers: int, known_rules: frozenset[str]):
        started.append(workers)
        return make_pool(workers, known_rules)

    monkeypatch.setattr(rulegen.render.build, "PARALLEL_MIN_RULES", 1)
    monkeypatch.setattr(rulegen.render.build, "worker_pool", recording_pool)
    return started


def _build(rules: Path, out: Path, *extra: str):
    return CliRunner().invoke(app, ["build", str(rules), "--out", str(out), *extra], catch_exceptions=False)


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_parallel_build_writes_the_same_bytes_as_a_serial_build(tmp_path, monkeypatch, pools):
    monkeypatch.chdir(tmp_path)
    rules = tmp_path / "rules"
    rules.mkdir()
    for name in ("log1pexp", "softplus_beta", "l2_normalize", "fixed_point"):
        shutil.copy(RULES / f"{name}.yaml", rules)
    (rules / "pair.yaml").write_text(PAIR)

    serial = _build(rules, tmp_path / "serial", "--jobs", "1")
    assert serial.exit_code == 0, serial.output
    assert pools == []
    parallel = _build(rules, tmp_path / "parallel", "--jobs", "2")
    assert parallel.exit_code == 0, parallel.output
    assert pools == [2]
    assert _files(tmp_path / "serial") == _files(tmp_path / "parallel")


BAD = {
    # Each is refused while deriving (in a worker), not while reading.
    "nonlinear.yaml": ("name: nonlinear\ninputs: [x]\nforward: sin(x)\njvp: cos(x) * x_dot**2\n", "4:6", "linear"),
    "unknown_call.yaml": (
        "name: unknown_call\ninputs: [x]\nforward: x\nvjp:\n  python: |\n    y = out_bar\n    return y * zz\n",
        "7:16",
        "unknown name 'zz'",
    ),
    "huge_gamma.yaml": ("name: huge_gamma\ninputs: [x]\nforward: x * gamma(1000000)\n", "3:", ""),
}


def test_errors_raised_in_workers_are_reported_for_every_file_and_nothing_is_written(tmp_path, monkeypatch, pools):
    monkeypatch.chdir(tmp_path)
    rules = tmp_path / "rules"
    rules.mkdir()
    for name, (text, _, _) in BAD.items():
        (rules / name).write_text(text)
    for k in range(3):
        (rules / f"good{k}.yaml").write_text(f"name: good{k}\ninputs: [x]\nforward: sin({k + 1} * x)\n")

    result = _build(rules, tmp_path / "pkg", "--jobs", "2")

    assert pools == [2]
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    for name, (_, where, fragment) in BAD.items():
        match = re.search(rf"{re.escape(name)}:(\d+):(\d+): error: (.*)", result.output)
        assert match, result.output
        assert f"{match.group(1)}:{match.group(2)}".startswith(where), result.output
        assert fragment in match.group(3), result.output
    assert not (tmp_path / "pkg").exists()


def _compute_past_time_limit() -> None:
    with sympy_time_limit(0.2, Loc("slow.yaml", 3, 10)):
        end = time.process_time() + 30  # CPU time: the limit counts it, and sleeping spends none
        while time.process_time() < end:
            pass


def test_sympy_time_limit_refuses_a_rule_inside_a_worker():
    pool = rulegen.render.build.worker_pool(1, frozenset())
    try:
        with pytest.raises(SpecErrors, match=r"slow\.yaml:3:10: sympy needs more than 0\.2 s"):
            pool.submit(_compute_past_time_limit).result(timeout=20)
    finally:
        pool.shutdown(cancel_futures=True)


def test_an_incremental_build_redoes_the_package_modules_when_the_rule_set_changes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rules, out = tmp_path / "rules", tmp_path / "pkg"
    rules.mkdir()
    (rules / "first.yaml").write_text("name: first\ninputs: [x]\nforward: sin(x)\n")
    assert _build(rules, out).exit_code == 0
    before = _files(out)

    noop = _build(rules, out)
    assert "0 file(s) derived, 1 unchanged, 0 written" in noop.output, noop.output
    assert _files(out) == before

    # A host rule brings helper modules (`jax/_host.py`, `torch/_host.py`) into the package.
    shutil.copy(RULES / "scipy_erfcx.yaml", rules)
    added = _build(rules, out)
    assert "1 file(s) derived, 1 unchanged" in added.output, added.output
    assert "from .scipy_erfcx import scipy_erfcx" in (out / "jax" / "__init__.py").read_text()
    assert "ScipyErfcx" in (out / "torch" / "__init__.py").read_text()
    assert (out / "jax" / "_host.py").exists()
    assert (out / "torch" / "_host.py").exists()

    (rules / "first.yaml").unlink()
    assert _build(rules, out).exit_code == 0
    init = (out / "jax" / "__init__.py").read_text()
    assert '"first"' not in init and "from .first " not in init
    assert not (out / "jax" / "first.py").exists()

    (rules / "scipy_erfcx.yaml").unlink()
    (rules / "first.yaml").write_text("name: first\ninputs: [x]\nforward: sin(x)\n")
    assert _build(rules, out).exit_code == 0
    assert _files(out) == before


DEFAULTS = """\
rules:
  - name: with_defaults
    inputs:
      x: {}
      a: {static: true, default: .inf}
      b: {static: true, default: -.inf}
      c: {static: true, default: .nan}
      d: {static: true, default: -2.5}
      s: {static: true, default: "it's \\"quoted\\" \\\\ "}
      t: {static: true, default: [1, -2.0, [3]]}
      n: {static: true, default: null}
      flag: {static: true, default: true}
    forward: x * d + exp(-1 / a) + exp(1 / b)
  - name: reads_defaults
    inputs:
      x: {}
      c: {static: true, default: .nan}
      s: {static: true, default: "it's"}
      t: {static: true, default: [1, -2.0]}
      n: {static: true, default: null}
    forward:
      python: return x * (len(s) + len(t) + (n is None) + (c != c))
"""


def test_defaults_of_every_kind_import_and_run_in_both_backends(tmp_path):
    import math
    import subprocess
    import sys

    (tmp_path / "defaults.yaml").write_text(DEFAULTS)
    rulegen.render.build.build([tmp_path / "defaults.yaml"], tmp_path / "pkg")
    code = (
        "import inspect, math, jax.numpy as jnp, torch, pkg.jax as J, pkg.torch as T\n"
        "print(inspect.signature(J.with_defaults).parameters['s'].default)\n"
        "print(inspect.signature(T.with_defaults).parameters['t'].default)\n"
        "print(float(J.with_defaults(jnp.float64(1.0))), float(T.with_defaults(torch.tensor(1.0).double())))\n"
        "print(float(J.reads_defaults(jnp.float64(1.0))), float(T.reads_defaults(torch.tensor(1.0))))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == 'it\'s "quoted" \\ '
    assert lines[1] == "(1, -2.0, (3,))"
    assert [float(v) for v in lines[2].split()] == [-0.5, -0.5]  # 1 * -2.5 + exp(-1 / inf) + exp(1 / -inf)
    assert [float(v) for v in lines[3].split()] == [8.0, 8.0]
    assert not math.isnan(float(lines[2].split()[0]))


def test_a_mapping_default_is_a_located_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "r.yaml").write_text("name: f\ninputs:\n  x: {}\n  a: {static: true, default: {k: 1}}\nforward: x\n")
    result = _build(tmp_path / "r.yaml", tmp_path / "pkg")
    assert result.exit_code == 2, result.output
    assert "r.yaml:4:" in result.output and "default" in result.output


def test_a_symlink_loop_among_the_rules_is_a_located_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "good.yaml").write_text("name: good\ninputs: [x]\nforward: x\n")
    (rules / "loop.yaml").symlink_to("loop.yaml")
    for args in (["build", "rules", "--out", "pkg"], ["build", "rules/loop.yaml", "--out", "pkg"], ["show", "good"]):
        result = CliRunner().invoke(app, args, catch_exceptions=False)
        assert result.exit_code == 2, result.output
        assert "rules/loop.yaml:1:1: error:" in result.output and "loop" in result.output, result.output
    assert not (tmp_path / "pkg").exists()


def test_an_output_that_cannot_be_written_is_an_environment_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "r.yaml").write_text("name: good\ninputs: [x]\nforward: x\n")
    read_only = tmp_path / "read_only"
    read_only.mkdir()
    read_only.chmod(0o555)
    unwritable = [read_only / "pkg", Path("/sys/rulegen-test-pkg"), tmp_path / "r.yaml" / "pkg"]
    for out in unwritable:
        try:
            out.mkdir()
        except OSError:
            pass
        else:  # root writes through permissions
            out.rmdir()
            continue
        result = CliRunner().invoke(app, ["build", "r.yaml", "--out", str(out)], catch_exceptions=False)
        assert result.exit_code == 1, result.output
        assert "error: cannot write" in result.output and "Traceback" not in result.output, result.output


def _children(pid: int) -> set[int]:
    """Every descendant of `pid`, from /proc."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")
def test_worker_processes_die_with_a_killed_parallel_build(tmp_path):
    import os
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "rulegen", "build", str(RULES), "--out", str(tmp_path / "pkg"), "--jobs", "2"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    workers: set[int] = set()
    while time.monotonic() < deadline and len(workers) < 3 and proc.poll() is None:
        workers = _children(proc.pid)  # the fork server and its two workers
        time.sleep(0.2)
    assert len(workers) >= 3, "the build never started its workers"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(_alive(p) for p in workers):
        time.sleep(0.2)
    survivors = {p for p in workers if _alive(p)}
    for pid in survivors:
        os.kill(pid, signal.SIGKILL)
    assert not survivors, "worker processes outlived the killed build"


# Runs a build that SIGKILLs itself when it is about to put the third file in place.
KILLED_BUILD = """
import os, signal, sys
from pathlib import Path
import rulegen.render.write
from rulegen.render.build import build

# Only the package's own files count: the search cache (`derive.stored`) puts its entries in place with os.replace
# too, and a build that searched wrote those first and died before any of the package's.
replace, calls, package = os.replace, [], Path(sys.argv[2]).resolve()
def replace_then_die(src, dst):
    if package in Path(dst).resolve().parents:
        calls.append(dst)
    if len(calls) == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    replace(src, dst)
rulegen.render.write.os.replace = replace_then_die
build([Path(sys.argv[1])], Path(sys.argv[2]))
"""


def test_a_build_killed_while_writing_leaves_nothing_the_next_build_mistakes(tmp_path, monkeypatch):
    import signal
    import subprocess
    import sys

    monkeypatch.chdir(tmp_path)
    rules = tmp_path / "rules"
    rules.mkdir()
    first = "name: good\ninputs: [x]\nforward: sin(x)\n"
    (rules / "good.yaml").write_text(first)
    (rules / "other.yaml").write_text("name: other\ninputs: [x]\nforward: exp(x)\n")
    assert _build(rules, tmp_path / "pkg").exit_code == 0
    (rules / "good.yaml").write_text(first.replace("sin", "cos"))
    (rules / "other.yaml").write_text("name: other\ninputs: [x]\nforward: tanh(x)\n")
    script = tmp_path / "killed.py"
    script.write_text(KILLED_BUILD)
    proc = subprocess.run([sys.executable, str(script), str(rules), "pkg"], capture_output=True, check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert list((tmp_path / "pkg").rglob("*.tmp")), "the killed build should have left a temporary file"
    (rules / "good.yaml").write_text(first)  # the user takes the change back
    result = _build(rules, tmp_path / "pkg")
    assert result.exit_code == 0, result.output
    assert not list((tmp_path / "pkg").rglob("*.tmp"))
    assert _build(rules, tmp_path / "fresh").exit_code == 0
    assert _files(tmp_path / "pkg") == _files(tmp_path / "fresh")


def test_no_rules_given_in_a_folder_with_rules_uses_them(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "sq.yaml").write_text("name: sq\ninputs: [x]\nforward: x**2\n")
    result = CliRunner().invoke(app, ["build"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "generated" / "jax" / "sq.py").is_file()


def test_no_generated_file_names_an_absolute_path_of_the_build_machine(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "theirs" / "rules").mkdir(parents=True)
    (tmp_path / "theirs" / "rules" / "sq.yaml").write_text("name: sq\ninputs: [x]\nforward: x**2\n")
    out = tmp_path / "mine" / "pkg"
    result = CliRunner().invoke(app, ["build", str(tmp_path / "theirs" / "rules"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    files = [p for p in out.rglob("*") if p.is_file()]
    assert files
    for path in files:
        assert str(tmp_path) not in path.read_text(), path
    assert "# Source: ../theirs/rules/sq.yaml" in (out / "jax" / "sq.py").read_text()


def test_the_compiler_fingerprint_covers_what_generates_and_not_the_checks():
    """A change to a check made every built package stale (generated/ failed `build --check`)."""
    from rulegen.render.build import fingerprinted_files

    package = Path(rulegen.render.build.__file__).resolve().parent.parent
    covered = {path.relative_to(package.parent).as_posix() for path in fingerprinted_files()}
    assert {"rulegen/derive/partials.py", "rulegen/plan/torch.py", "rulegen/plan/printers.py"} <= covered
    assert any(name.endswith("module.py.j2") for name in covered)
    assert any(name.startswith("rulegen/runtime/torch/_") for name in covered)
    assert not [name for name in covered if name.startswith("rulegen/check/") or name == "rulegen/cli.py"]
