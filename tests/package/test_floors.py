"""The framework floors of a package built from the bundled rules cover every API its modules use.

The floors are read off the APIs the package's modules use (`rulegen.derive.floors`);
these tests read every module of a package built from the bundled rules the
same way and check that its pyproject.toml requires, of each framework, a
release that has all of them.
"""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version
from typer.testing import CliRunner

from rulegen.cli import app
from rulegen.derive.floors import API_FLOORS, apis_used
from tests.conftest import ROOT
from tests.render.test_floors import _rules


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled rules built as a distribution (from a copy of generated/: only what changed is derived)."""
    out = tmp_path_factory.mktemp("shipped") / "bundled"
    shutil.copytree(ROOT / "generated", out)
    result = CliRunner().invoke(
        app, ["build", str(ROOT / "rules"), "--out", str(out), "--package-name", "bundled", "--jobs", "1"]
    )
    assert result.exit_code == 0, result.output
    return out


#: Where the frameworks add and change APIs from release to release: every API
#: of the package under one of these must have its own row in the table
#: (a keyword argument of a call, `name(keyword=)`, too).
CHANGING = (
    "torch.compiler.",
    "torch.library.",
    "torch.export.",
    "torch._C.",
    "torch.func.",
    "torch.autograd.forward_ad.",
    "jax.extend.",
    "jax.ffi.",
    "jax.export.",
    "jax.tree.",
    "jax.typeof",
    "jax.pure_callback(",
    "jax.custom_jvp(",
    "jax.custom_vjp(",
)


def _floors(pyproject: Path) -> dict[str, Version]:
    """Each framework's floor in a package's pyproject.toml, over its extras."""
    project = tomllib.loads(pyproject.read_text())["project"]
    floors: dict[str, Version] = {}
    for extra in project["optional-dependencies"].values():
        for line in extra:
            requirement = Requirement(line)
            if requirement.name in ("jax", "torch"):
                (spec,) = requirement.specifier
                assert spec.operator == ">=", line
                floors[requirement.name] = max(
                    floors.get(requirement.name, Version(spec.version)), Version(spec.version)
                )
    return floors


def _used(package: Path) -> set[str]:
    return set().union(*(apis_used(path.read_text()) for path in package.rglob("*.py")))


def test_the_floors_cover_every_api_the_package_uses(shipped):
    floors = _floors(shipped / "pyproject.toml")
    used = _used(shipped)
    needed = {
        api: (framework, release)
        for api in used
        for key, (framework, release) in API_FLOORS.items()
        if api == key or api.startswith(f"{key}.")
    }
    assert needed, "the package uses none of the table's APIs: the scan reads nothing"
    short = {api: need for api, need in needed.items() if floors[need[0]] < Version(need[1])}
    assert short == {}, f"floors {floors} are older than these APIs"


def test_torch_is_required_from_a_release_with_custom_ops(shipped):
    # The case: `torch>=2.1` while the code calls torch.library.custom_op (2.4).
    assert "torch.library.custom_op" in _used(shipped)
    assert _floors(shipped / "pyproject.toml")["torch"] >= Version("2.4")


def test_every_api_of_a_changing_namespace_has_a_row_in_the_table(shipped):
    unlisted = {
        api
        for api in _used(shipped)
        if api.startswith(CHANGING) and not any(api == key or api.startswith(f"{key}.") for key in API_FLOORS)
    }
    assert unlisted == set(), "add these to rulegen.derive.floors.API_FLOORS with the release that brought them"


# A rule whose own bodies call what needs newer frameworks than anything rulegen writes for it.
NEWER_BODIES = """\
name: twice
inputs: [x]
forward:
  torch: return 2 * x if torch.compiler.is_exporting() else x + x
  jax: return jnp.asarray(2 * x, dtype=jax.typeof(x).dtype)
"""
PLAIN_BODIES = """\
name: twice
inputs: [x]
forward:
  torch: return 2 * x
  jax: return 2 * x
"""


@pytest.mark.parametrize(("text", "torch", "jax"), [(PLAIN_BODIES, "2.4", "0.5.3"), (NEWER_BODIES, "2.7", "0.5.3")])
def test_the_floors_cover_what_the_rules_own_bodies_call(tmp_path, text, torch, jax):
    (tmp_path / "twice.yaml").write_text(text)
    out = tmp_path / "twice_pkg"
    for version in ("1.0", "1.1"):  # the second build reuses the rule's record: the floors must survive it
        arguments = ["--package-name", "twice_pkg", "--package-version", version, "--jobs", "1"]
        result = CliRunner().invoke(app, ["build", str(tmp_path / "twice.yaml"), "--out", str(out), *arguments])
        assert result.exit_code == 0, result.output
        assert _floors(out / "pyproject.toml") == {"torch": Version(torch), "jax": Version(jax)}


def test_package_version_sets_the_distributions_version(tmp_path):
    out = tmp_path / "my_rules"
    result = CliRunner().invoke(
        app,
        [
            "build",
            str(_rules(tmp_path)),
            "--out",
            str(out),
            "--package-name",
            "my_rules",
            "--package-version",
            "1.2.0-rc1",
        ],
    )
    assert result.exit_code == 0, result.output
    assert tomllib.loads((out / "pyproject.toml").read_text())["project"]["version"] == "1.2.0rc1"


def test_package_version_comes_from_the_project_table(tmp_path, monkeypatch):
    _rules(tmp_path)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.rulegen]\nout = "my_rules"\npackage-name = "my_rules"\npackage-version = "2.0.1"\n'
    )
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["build", "--jobs", "1"])
    assert result.exit_code == 0, result.output
    assert tomllib.loads((tmp_path / "my_rules" / "pyproject.toml").read_text())["project"]["version"] == "2.0.1"
