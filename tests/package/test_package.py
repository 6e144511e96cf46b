"""rulegen as users install it, and the generated package as they ship it.

A wheel of rulegen (not an editable install) builds, shows and tests rules;
a package built with `--package-name` installs with pip and imports under its
own name; `help()` of a generated function says what it computes; importing
the JAX package leaves torch unloaded.
"""

from __future__ import annotations

import importlib
import inspect
import os
import shutil
import subprocess
import sys
import textwrap
import typing
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rulegen.cli import app
from tests.conftest import ROOT, built_package

RULES = """
rules:
  - name: scaled_square
    doc: The square of x, times a constant.
    inputs:
      x: {domain: [0.5, 3]}
      c: {static: true, default: 2.0}
    forward: c * x**2
  - name: ratio
    inputs: [x, y]
    outputs: [q, p]
    forward: {q: x / (1 + y**2), p: x * y}
    derivatives:
      q: {x: 1 / (1 + y**2), y: -2*x*y / (1 + y**2)**2}
      p: {x: y, y: x}
"""

SQUARE = "name: sq\ndoc: The square.\ninputs: [x]\nforward: x**2\n"


def _site_packages() -> list[str]:
    """Where this interpreter's installed packages live (a venv's own, and the base's if it sees them)."""
    return [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]


def _venv(path: Path) -> Path:
    """A venv that sees this interpreter's packages (sympy, torch, jax) but not rulegen's source checkout.

    `--system-site-packages` would not do: from inside a venv (how a newcomer runs the tests) it
    shows the *base* interpreter's packages, not the outer venv's. A `.pth` file naming this
    interpreter's site-packages shows them as plain paths, after the new venv's own; the
    editable install's finder there is not loaded (a `.pth` path line processes no `.pth` files
    inside it), so the checkout stays out of sight.
    """
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = path / "bin" / "python"
    purelib = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    Path(purelib, "_outer_site_packages.pth").write_text("\n".join(_site_packages()) + "\n")
    return python


Completed = subprocess.CompletedProcess[str]


def _run(command: list[str | Path], cwd: Path | None = None, env: dict[str, str] | None = None) -> Completed:
    """`command` run to completion; on failure its stdout and stderr are the assertion's message."""
    done = subprocess.run([str(c) for c in command], capture_output=True, text=True, check=False, cwd=cwd, env=env)
    said = f"{' '.join(map(str, command))} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    assert done.returncode == 0, said
    return done


def _pip_install(python: Path, *args: str) -> None:
    # pip runs under `python` with this environment: a PYTHONPATH naming the checkout showed it the checkout's
    # rulegen.egg-info, the wheel's version already installed, and pip installed nothing.
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", *args], env=_clean_env())


def _clean_env() -> dict[str, str]:
    # The venv must find its own installs, not this checkout (`pytest` puts the repository on sys.path).
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    with built_package(tmp_path_factory.mktemp("shipped"), RULES, "rg_shipped") as path:
        yield path, importlib.import_module("rg_shipped.jax"), importlib.import_module("rg_shipped.torch")


@pytest.mark.parametrize("backend", [1, 2])
def test_help_shows_the_doc_the_formulas_and_the_inputs(package, backend):
    module = package[backend]
    text = inspect.getdoc(module.scaled_square)
    assert text.startswith("The square of x, times a constant.")
    assert "out = c*x**2" in text
    assert "Partials (derived by sympy)" in text and "dout/dx = 2*c*x" in text
    assert "x: float array; checked on [0.5, 3]" in text
    assert "c: static" in text and "default 2.0" in text
    assert "rg_shipped.yaml" in text
    ratio = inspect.getdoc(module.ratio)
    assert "Partials (from the rule)" in ratio and "dq/dy = -2*x*y/(y**2 + 1)**2" in ratio and "dp/dx = y" in ratio


def test_public_functions_carry_type_hints(package):
    import jax
    import torch

    _, jax_pkg, torch_pkg = package
    hints = typing.get_type_hints(jax_pkg.scaled_square)
    assert hints == {"x": jax.typing.ArrayLike, "return": jax.Array}
    assert typing.get_type_hints(torch_pkg.scaled_square) == {"x": torch.Tensor | float, "return": torch.Tensor}
    assert typing.get_type_hints(torch_pkg.ratio)["return"] == tuple[torch.Tensor, torch.Tensor]
    assert (package[0] / "py.typed").is_file()


def test_importing_the_jax_package_leaves_torch_unloaded():
    # torch_mish is bridged to torch: it imports torch on its first call, not with the package.
    probe = textwrap.dedent(
        """\
        import sys
        import generated.jax as rules
        assert "torch" not in sys.modules, "imported with the package"
        assert "array_api_compat" not in sys.modules
        print(float(rules.torch_mish(1.0)))
        assert "torch" in sys.modules
        """
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert abs(float(result.stdout) - 0.8650983882673103) < 1e-6


def test_a_built_package_installs_as_a_distribution_of_its_own(tmp_path):
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "sq.yaml").write_text(SQUARE)
    out = tmp_path / "my_rules"
    result = CliRunner().invoke(
        app, ["build", str(tmp_path / "rules"), "--out", str(out), "--package-name", "my_rules"]
    )
    assert result.exit_code == 0, result.output
    pyproject = (out / "pyproject.toml").read_text()
    assert 'name = "my_rules"' in pyproject and 'jax = ["jax>=' in pyproject
    python = _venv(tmp_path / "venv")
    _pip_install(python, "--no-build-isolation", str(out))
    probe = (
        "import my_rules.jax, my_rules.torch, importlib.resources as r;"
        "assert 'site-packages' in my_rules.jax.__file__, my_rules.jax.__file__;"
        "assert r.files('my_rules').joinpath('py.typed').is_file();"
        "print(float(my_rules.jax.sq(3.0)), float(my_rules.torch.sq(3.0)))"
    )
    elsewhere = tmp_path / "elsewhere"  # not the folder holding my_rules/
    elsewhere.mkdir()
    assert _run([python, "-c", probe], cwd=elsewhere, env=_clean_env()).stdout.split() == ["9.0", "9.0"]


@pytest.mark.parametrize("name", ["my-rules", "class", "1st"])
def test_a_package_name_that_is_no_identifier_is_refused(tmp_path, name):
    (tmp_path / "sq.yaml").write_text(SQUARE)
    result = CliRunner().invoke(
        app, ["build", str(tmp_path / "sq.yaml"), "--out", str(tmp_path / "p"), "--package-name", name]
    )
    assert result.exit_code == 2, result.output
    assert "Python identifier" in result.output
    assert not (tmp_path / "p").exists()


def _imported_distributions_top_level_names() -> list[str]:
    """A top-level module of each distribution a package of rules imports, other than its own name (`functorch`)."""
    import importlib.metadata

    by_module = importlib.metadata.packages_distributions()
    frameworks = {d for m in ("torch", "jax", "numpy") for d in by_module.get(m, ())}
    return sorted(m for m, dists in by_module.items() if set(dists) & frameworks and m.isidentifier())[:12]


@pytest.mark.parametrize(
    "name",
    [
        *("torch", "jax", "jaxlib", "numpy", "rulegen", "sympy", "scipy", "gmpy2", "typing", "math", "json", "Torch"),
        "NumPy",
        *_imported_distributions_top_level_names(),
    ],
)
def test_a_package_name_that_would_replace_a_module_it_needs_is_refused(tmp_path, name):
    """Installed, `--package-name torch` would replace PyTorch (and `typing` would hide the standard library's)."""
    (tmp_path / "sq.yaml").write_text(SQUARE)
    result = CliRunner().invoke(
        app, ["build", str(tmp_path / "sq.yaml"), "--out", str(tmp_path / "p"), "--package-name", name]
    )
    assert result.exit_code == 2, result.output
    assert f"--package-name {name!r} is " in result.output and "choose another" in result.output, result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize("name", ["my_rules", "torch_rules", "jax2"])
def test_a_package_name_of_its_own_is_accepted(tmp_path, name):
    """The refusal above is of names taken, not of every name near a framework's."""
    (tmp_path / "sq.yaml").write_text(SQUARE)
    result = CliRunner().invoke(
        app, ["build", str(tmp_path / "sq.yaml"), "--out", str(tmp_path / "p"), "--package-name", name]
    )
    assert result.exit_code == 0, result.output
    assert f'name = "{name}"' in (tmp_path / "p" / "pyproject.toml").read_text()


_NOT_BUILT = ("build", "dist", "*.egg-info", "__pycache__", ".*", "venv", "generated", "tests", "benchmarks", "docs")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """rulegen's wheel, built from this checkout as `pip install .` builds it."""
    # From a copy without build/: setuptools reuses build/lib, where a module the packaging misses
    # may still lie from an older build (this test passed on a broken package list that way).
    source = tmp_path_factory.mktemp("source") / "rulegen"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*_NOT_BUILT))
    wheels = tmp_path_factory.mktemp("wheels")
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", wheels, source])
    (built,) = wheels.glob("rulegen-*.whl")
    return built


def test_the_wheel_holds_every_module_template_and_helper_of_the_checkout(wheel):
    shipped = set(zipfile.ZipFile(wheel).namelist())
    source = {str(p.relative_to(ROOT)) for p in (ROOT / "rulegen").rglob("*.py") if "__pycache__" not in p.parts} | {
        f"rulegen/templates/{p.name}" for p in (ROOT / "templates").glob("*.j2")
    }
    # Data the compiler reads: the cost model's weights.
    source |= {str(p.relative_to(ROOT)) for p in (ROOT / "rulegen").rglob("*.json")}
    assert source - shipped == set()


@pytest.mark.costly
@pytest.mark.slow
def test_rulegen_installed_from_a_wheel_builds_shows_and_tests_rules(tmp_path, wheel):
    python = _venv(tmp_path / "venv")
    _pip_install(python, str(wheel))
    work = tmp_path / "work"  # no pyproject.toml, outside the checkout
    (work / "rules").mkdir(parents=True)
    (work / "rules" / "sq.yaml").write_text(SQUARE)

    def run(*args: str) -> Completed:
        return _run([python, *args], cwd=work, env=_clean_env())

    where = run("-c", "import rulegen.render.layout as r; print(r.__file__); print(r.TEMPLATES)").stdout.split()
    assert all(str(tmp_path / "venv") in p for p in where), where
    run("-m", "rulegen", "build")
    assert "def sq(" in run("-m", "rulegen", "show", "sq").stdout
    assert "passed" in run("-m", "rulegen", "test", "rules", "--jobs", "1").stdout
    probe = "import generated.jax, generated.torch; print(float(generated.jax.sq(3.0)), float(generated.torch.sq(3.0)))"
    assert run("-c", probe).stdout.split() == ["9.0", "9.0"]
