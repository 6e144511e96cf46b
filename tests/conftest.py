"""Shared fixtures: a package built from the bundled rules, imported once per session."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

os.environ.setdefault("JAX_ENABLE_X64", "1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "rules"
SHARED_EXAMPLES = ROOT.parent / "shared" / "examples"


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory):
    """`rules/` built into a fresh package `rg_built`; yields (jax module, torch module, rules)."""
    from rulegen.build import build
    from rulegen.spec import read_rules, rule_files

    root = tmp_path_factory.mktemp("built")
    out = root / "rg_built"
    build([RULES], out)
    sys.path.insert(0, str(root))
    try:
        jax_pkg = importlib.import_module("rg_built.jax")
        torch_pkg = importlib.import_module("rg_built.torch")
        rules = {r.name: r for r in read_rules(rule_files([RULES]))}
        yield jax_pkg, torch_pkg, rules
    finally:
        sys.path.remove(str(root))


@contextmanager
def built_package(root: Path, rules_text: str, package: str) -> Iterator[Path]:
    """`rules_text` built into `root/package`, importable while the block runs."""
    from rulegen.build import build

    (root / f"{package}.yaml").write_text(rules_text)
    build([root / f"{package}.yaml"], root / package)
    sys.path.insert(0, str(root))
    try:
        yield root / package
    finally:
        sys.path.remove(str(root))
