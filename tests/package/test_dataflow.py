"""A built package's manifest and requirements come from the plans, and the stages import one way.

Which helpers the package ships, what a distribution requires, which rules
export a Function class and which tensors a method saves are read off typed
plan data (import statements the planner chose, Block.reads); an internal
failure inside a stage names the rule and the stage.
"""

from __future__ import annotations

import ast
import json
import pathlib
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

import rulegen.plan
from rulegen.cli import app
from rulegen.render.build import build, generate
from rulegen.spec.errors import SpecErrors
from tests.render.test_dataflow import HOST_IMPORT, PACKAGE, PLAIN, _rule


def test_a_body_s_own_import_is_a_requirement_of_the_distribution(tmp_path):
    path, rule = _rule(tmp_path, "erfcx_host", HOST_IMPORT)
    generated = generate(rule)
    assert "scipy" in generated.requires["jax"] and "scipy" in generated.requires["torch"]
    out = tmp_path / "pkg"
    result = CliRunner().invoke(app, ["build", str(path), "--out", str(out), "--package-name", "pkg"])
    assert result.exit_code == 0, result.output
    pyproject = (out / "pyproject.toml").read_text()
    assert '"scipy' in pyproject, pyproject


def test_the_manifest_records_what_the_plans_said_each_file_needs(tmp_path):
    host, _ = _rule(tmp_path, "erfcx_host", HOST_IMPORT)
    plain, _ = _rule(tmp_path, "twice", PLAIN)
    out = tmp_path / "pkg"
    build([host, plain], out)
    sources = json.loads((out / ".rulegen-manifest.json").read_text())["sources"]
    assert "jax/_host.py" in sources["erfcx_host.yaml"]["helpers"]
    assert sources["twice.yaml"]["plain"] == ["twice"]
    # The plain rule exports its function alone; the package ships exactly the helpers recorded.
    init = (out / "torch" / "__init__.py").read_text()
    assert "Twice" not in init and "ErfcxHost" in init
    shipped = {p.relative_to(out).as_posix() for p in out.glob("*/_*.py")}
    recorded = {h for s in sources.values() for h in s["helpers"]}
    assert recorded <= shipped


def test_an_internal_error_while_planning_names_the_rule_and_the_stage(tmp_path, monkeypatch):
    path, _ = _rule(tmp_path, "twice", PLAIN)

    def broken(d):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(rulegen.plan, "plan_torch_snippet", broken)
    with pytest.raises(SpecErrors) as caught:
        build([path], tmp_path / "pkg")
    (error,) = caught.value.errors
    assert error.loc.line == 1 and error.loc.file.endswith("twice.yaml")
    assert "internal error while planning rule 'twice': ZeroDivisionError: a bug" in str(error)
    result = CliRunner().invoke(app, ["build", str(path), "--out", str(tmp_path / "pkg")])
    assert result.exit_code == 2 and "twice.yaml:1:1" in result.output and "Traceback" not in result.output


def _rulegen_imports(path: pathlib.Path) -> Iterator[tuple[str, ...]]:
    """The rulegen modules a file imports, in every form (`from rulegen.x import`, `from rulegen import x`,
    `import rulegen.x`), at module level or inside functions, as name parts after `rulegen`."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            parts = tuple(node.module.split("."))
            if parts == ("rulegen",):
                yield from ((alias.name,) for alias in node.names)
            elif parts[0] == "rulegen":
                yield from ((*parts[1:], alias.name) for alias in node.names)
        elif isinstance(node, ast.Import):
            yield from (tuple(a.name.split("."))[1:] for a in node.names if a.name.startswith("rulegen."))


def _module_name(path: pathlib.Path) -> str:
    """A module's dotted name inside the package, as rulegen.STAGES places it: a stage's package is
    `stage.__init__`, a subpackage of a stage is named by its folder (`derive.stabilise`)."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    if len(parts) > 2 and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def test_no_stage_imports_a_later_one():
    """Every module of the package is in rulegen.STAGES, and imports (in any form, anywhere in it) only modules
    before it there: no exemptions.  A folder's package (`__init__`) ranks after the folder's modules; a
    subpackage's modules (`stabilise.points`) rank where STAGES puts them, the subpackage (`stabilise`) after
    them, so that its modules import one another one way only."""
    from rulegen import STAGES

    order = [f"{folder}.{m}" if folder else m for folder, _, modules in STAGES for m in (*modules, "__init__")]
    order = [m for m in order if m != "__init__"]
    rank = {name: k for k, name in enumerate(order)}
    found = {_module_name(p) for p in PACKAGE.rglob("*.py") if p.relative_to(PACKAGE).parts[0] != "runtime"}
    assert found - {"__init__"} == set(order), "modules rulegen.STAGES does not place, or places but lacks"

    def resolved(parts: tuple[str, ...]) -> str | None:
        for k in range(len(parts), 0, -1):
            key = ".".join(parts[:k])
            for name in (key, f"{key}.__init__"):
                if name in rank:
                    return name
        return None  # rulegen's own metadata (`STAGES`)

    for path in PACKAGE.rglob("*.py"):
        rel = _module_name(path)
        if rel == "__init__" or rel.startswith("runtime"):
            continue  # the package's metadata; the shipped runtime, which imports no rulegen module
        for imported in _rulegen_imports(path):
            module = resolved(imported)
            if module is not None and module != rel:
                assert rank[module] < rank[rel], (rel, module)


def test_the_check_stage_s_modules_import_no_cycle_and_no_private_name():
    """rulegen/check/ is a package of modules by concern, each importing only public names of the others."""
    check = PACKAGE / "check"
    graph: dict[str, set[str]] = {}
    for path in check.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rulegen."):
                private = [a.name for a in node.names if a.name.startswith("_") and a.name != "__future__"]
                assert not private, (path.name, node.module, private)
        # An import of a name of the package itself (`from rulegen.check import run_checks`) goes through __init__.
        modules = {
            p[1] if (check / f"{p[1]}.py").exists() else "__init__" for p in _rulegen_imports(path) if p[0] == "check"
        }
        graph[path.stem] = modules - {path.stem}
    assert {"durability", "registry", "subject", "run"} <= set(graph)
    # The package's __init__ gathers the public names; no module of it imports it back.
    assert not any("__init__" in found for found in graph.values())
    done: set[str] = set()

    def visit(module: str, trail: tuple[str, ...]) -> None:
        assert module not in trail, f"import cycle: {' -> '.join((*trail, module))}"
        if module in done:
            return
        for imported in graph.get(module, ()):
            visit(imported, (*trail, module))
        done.add(module)

    for module in graph:
        visit(module, ())
