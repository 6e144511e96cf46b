"""Shared fixtures: a package built from the bundled rules, imported once per session."""

from __future__ import annotations

import gc
import getpass
import importlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

os.environ.setdefault("JAX_ENABLE_X64", "1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# The checks jit and differentiate the same small programs in every test process (both xdist workers,
# both lanes, the subprocesses they start): compiled once and read back from disk, a sweep of the
# bundled rules' checks takes 40% less CPU.  The key is the program, the jaxlib and the flags, so a
# stale entry is never read; tests that want JAX's own default clear the variable.
os.environ.setdefault(
    "JAX_COMPILATION_CACHE_DIR", str(Path(tempfile.gettempdir()) / f"rulegen-tests-jax-cache-{getpass.getuser()}")
)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
# The accuracy search's results, kept the same way (rulegen/derive/stabilise/cache.py): the key is the
# expression, the budget and a hash of the searching code, so an entry is read only where a search would
# find it again, and a test of what a search chooses reads it as a build does. Tests that need the search
# itself to run (its determinism, its clock, its time limit, the cache's own tests) turn it off
# (`search_cache_off`).
os.environ.setdefault(
    "RULEGEN_SEARCH_CACHE", str(Path(tempfile.gettempdir()) / f"rulegen-tests-search-cache-{getpass.getuser()}")
)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
# mpmath's values of the special-value matrix's references (tests/reference_cache.py), kept the same way: the key is
# the reference's expression, the precision and the exact arguments, with rulegen's derive fingerprint (sympy's,
# mpmath's versions, the registry's mpmath implementations), so the cells of both dtypes and backends, both xdist
# workers and later runs compute each value once.
os.environ.setdefault(
    "RULEGEN_TESTS_REFERENCE_CACHE",
    str(Path(tempfile.gettempdir()) / f"rulegen-tests-reference-cache-{getpass.getuser()}"),
)

# The collector's youngest generation is collected every 700 container allocations, and its survivors are traversed
# again by the older generations' collections: the tests build sympy expressions, syntax trees and JAX traces by
# the hundred thousand beside the heap that torch, JAX and sympy keep, and each worker of the unit lane spent 6 s
# of its 45 s of CPU in about 4,000 collections (timed by gc.callbacks).  With the youngest collected every 50,000
# allocations, the middle at every 20th of those and the oldest at every 100th of the middle's, it is about 80
# collections and 2.7 s.  Garbage is still collected, later; no test depends on when.
gc.set_threshold(50_000, 20, 100)

# tests/check/ and tests/package/ run pytest in a temporary folder to test rulegen's plugin.
pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "rules"
SHARED_EXAMPLES = ROOT.parent / "shared" / "examples"
#: Right rules that once broke the generated code (tests/package/test_right_rules.py sweeps them).
RIGHT = ROOT / "tests" / "right_rules"


def bundled_package(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """(folder on sys.path, package name) of `rules/` built: `generated/` itself when it is fresh.

    CI checks that generated/ is fresh before the tests (`rulegen build --check`), so
    the tests use the package users get; a checkout whose rules or compiler changed
    since the last `rulegen build` gets a fresh build instead, so that tests never
    run stale generated code.
    """
    from rulegen.render.build import build

    difference = build([RULES], ROOT / "generated", check=True).difference
    if not (difference.written or difference.removed or difference.edited):
        return ROOT, "generated"
    return built_once(tmp_path_factory, "built", lambda root: build([RULES], root / "rg_built"), kept=True), "rg_built"


def rules_from(folder: Path, text: str, name: str = "rules.yaml") -> list:
    """The rules of `text`, read as a user's rule file `folder/name` is read (its places name that file)."""
    from rulegen.spec.rules import read_rule_file

    path = folder / name
    path.write_text(text)
    return read_rule_file(path)


#: Where `built_once` keeps each package it builds for the next run to start from, by name and checkout.
KEPT_BUILDS = Path(tempfile.gettempdir()) / f"rulegen-tests-builds-{getpass.getuser()}"


def built_once(
    tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], object], *, kept: bool = False
) -> Path:
    """A folder `make(folder)` filled once per test run: the xdist workers of one run share it.

    A package build takes tens of seconds of CPU (tests/right_rules/ 37 s, the conformance matrix's rules 30 s),
    and every worker that ran a test of such a package built it again.  The first worker to ask builds it under a
    file lock; the others wait for it and import the same files.  A failed build leaves no mark, so the next
    asker builds again and fails as the first did.

    With `kept`, `make` builds over the folder as the last run of this checkout left it (`KEPT_BUILDS`), and what
    it leaves is kept for the next: `rulegen build`'s own manifest decides what is up to date (each rule file's
    hash, the compiler's fingerprint) and derives the rest, as a rebuild of a user's package does, so the package
    is the one a build from nothing writes.  The conformance matrix's rules took 54 s to build and 0.05 s to find
    up to date.
    """
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # each worker's base is a folder of the run's own
        base = base.parent
    root = base / f"shared-{name}"
    with FileLock(f"{root}.lock"):
        if not (root / ".built").exists():
            root.mkdir(exist_ok=True)
            if kept:
                _built_from_the_last_run(root, name, make)
            else:
                make(root)
            (root / ".built").touch()
    return root


def _built_from_the_last_run(root: Path, name: str, make: Callable[[Path], object]) -> None:
    import hashlib
    import shutil

    from filelock import FileLock

    checkout = hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]
    last = KEPT_BUILDS / f"{name}-{checkout}"
    KEPT_BUILDS.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{last}.lock"):
        if last.is_dir():
            shutil.copytree(last, root, dirs_exist_ok=True)
        try:
            make(root)
        except Exception:
            if not last.is_dir():
                raise
            # What the last run left is not what a build over it expects (a hand edit, a cut copy): from nothing.
            shutil.rmtree(last)
            shutil.rmtree(root)
            root.mkdir()
            make(root)
        fresh = Path(tempfile.mkdtemp(dir=KEPT_BUILDS, prefix=f".{name}-"))
        shutil.copytree(root, fresh, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
        if last.is_dir():
            shutil.rmtree(last)
        fresh.rename(last)


@pytest.fixture(scope="session", autouse=True)
def one_mlir_context_per_worker() -> Iterator[None]:
    """JAX's lowerings in the tests share one MLIR context, as in the checks
    (`rulegen.check.lowering.one_mlir_context`): the tests run JAX eagerly on many shapes, and each lowering made
    a context of its own."""
    from rulegen.check.lowering import one_mlir_context

    with one_mlir_context():
        yield


@pytest.fixture(scope="session")
def bundled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The importable name of `rules/` built (see `bundled_package`), for `run_checks(..., package=...)`."""
    root, package = bundled_package(tmp_path_factory)
    sys.path.insert(0, str(root))
    try:
        yield package
    finally:
        sys.path.remove(str(root))


@pytest.fixture(scope="session")
def built(bundled: str):
    """`rules/` built and imported; yields (jax module, torch module, rules by name)."""
    from rulegen.spec.rules import read_rules, rule_files

    jax_pkg = importlib.import_module(f"{bundled}.jax")
    torch_pkg = importlib.import_module(f"{bundled}.torch")
    rules = {r.name: r for r in read_rules(rule_files([RULES]))}
    yield jax_pkg, torch_pkg, rules


def right_rules_built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder holding tests/right_rules/ built as the package `rg_right`, once per run (`built_once`)."""
    from rulegen.render.build import build
    from rulegen.spec.rules import rule_files

    return built_once(tmp_path_factory, "right", lambda root: build(rule_files([RIGHT]), root / "rg_right"), kept=True)


@pytest.fixture(scope="session")
def right_package(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """tests/right_rules/ built once per run (`built_once`), importable as `rg_right`: the sweep of every check and
    the whole-line sweep of finiteness (tests/package/test_finite_everywhere.py) share it."""
    root = right_rules_built(tmp_path_factory)
    sys.path.insert(0, str(root))
    try:
        yield "rg_right"
    finally:
        sys.path.remove(str(root))


@contextmanager
def built_package(root: Path, rules_text: str, package: str) -> Iterator[Path]:
    """`rules_text` built into `root/package`, importable while the block runs."""
    from rulegen.render.build import build

    (root / f"{package}.yaml").write_text(rules_text)
    build([root / f"{package}.yaml"], root / package)
    with importable(root):
        yield root / package


@contextmanager
def shared_package(tmp_path_factory: pytest.TempPathFactory, rules_text: str, package: str) -> Iterator[Path]:
    """`built_package` for a session fixture that tests on both xdist workers use: built once per run
    (`built_once`), importable while the block runs."""
    from rulegen.render.build import build

    def make(root: Path) -> None:
        (root / f"{package}.yaml").write_text(rules_text)
        build([root / f"{package}.yaml"], root / package)

    root = built_once(tmp_path_factory, package, make, kept=True)
    with importable(root):
        yield root / package


@contextmanager
def importable(root: Path) -> Iterator[None]:
    """The packages in `root` importable while the block runs."""
    sys.path.insert(0, str(root))
    try:
        yield
    finally:
        sys.path.remove(str(root))


# The stage folders test one stage each and build no package (the unit lane, `pytest tests/spec tests/derive
# tests/plan tests/render tests/check tests/runtime`); built packages are tested in tests/package and tests/docs.
STAGE_FOLDERS = frozenset({"spec", "derive", "plan", "render", "check", "runtime"})


def swept_checks() -> tuple[str, ...]:
    """The checks of a sweep over rules that tests/package/test_finite_everywhere.py also sweeps.

    Its whole-line sweep is the `admissible` check's at four times the points, so the sweeps leave that
    check to it.
    """
    from rulegen.check import CHECKS

    return tuple(name for name in CHECKS if name != "admissible")


def outcomes_of_part(rules: list, part: int, parts: int, package: str | None, seed: int) -> list:
    """`run_checks(rules, package, seed=seed)`'s outcomes for every `parts`-th rule from the `part`-th.

    A sweep cut into parts, each a test of its own, is shared by the xdist workers (whole, one took a
    worker for minutes).  A rule's outcomes are those of the whole sweep: its points come from the seed
    and its name, and each rule knows every other rule of the sweep (rules calling each other), as in one
    `CheckSession`.  With `package` None the session builds the rules (once per worker and part).
    """
    from rulegen.check import CheckSession, check_rule
    from rulegen.check.run import chosen_checks

    names = [r.name for r in rules]
    checks = chosen_checks(swept_checks())
    with CheckSession(rules, package) as session:
        jax_pkg, torch_pkg = session.modules
        return [
            o
            for rule in rules[part::parts]
            for o in check_rule(rule, jax_pkg, torch_pkg, seed, False, names, checks=checks)
        ]


def _refuse_build(*args: object, **kwargs: object) -> None:
    raise AssertionError("a test in a stage folder builds a package: move it to tests/package, or give it rules built")


def _in_stage_folder(item: pytest.Item) -> bool:
    path = Path(item.path).resolve()
    if not path.is_relative_to(ROOT / "tests"):  # a test suite that pytester writes
        return False
    parts = path.relative_to(ROOT / "tests").parts
    return len(parts) > 1 and parts[0] in STAGE_FOLDERS


@contextmanager
def _builds_refused_in_stage_folders(item: pytest.Item) -> Iterator[None]:
    # Patched around setup as well as the call: a session fixture that builds fails in the first stage test
    # that asks for it, instead of quietly taking minutes there.
    if not _in_stage_folder(item):
        yield
        return
    import rulegen.render.build

    plan_build = rulegen.render.build.plan_build
    rulegen.render.build.plan_build = _refuse_build  # type: ignore[assignment]
    try:
        yield
    finally:
        rulegen.render.build.plan_build = plan_build


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with _builds_refused_in_stage_folders(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with _builds_refused_in_stage_folders(item):
        return (yield)


def pytest_configure(config: pytest.Config) -> None:
    # xdist's load scheduling hands each worker a run of consecutive tests at the start, a quarter of its share:
    # the costly tests, collected first (see below), all went to one worker, which ran them one after the other
    # for minutes while the other, its own run done, sat idle (the slow lane: 557 s of tests on one worker, 180 s
    # on the other).  Handed out one at a time, each goes to the first worker free.  An explicit
    # `--maxschedchunk` wins; the other schedulings (`--dist loadfile`) do not read it.
    if config.pluginmanager.hasplugin("xdist") and config.getoption("maxschedchunk", None) is None:
        config.option.maxschedchunk = 1
    # `--dist loadgroup` schedules groups of tests (see below) and lone tests alike as units; by default xdist
    # hands the units out largest first, which put every costly test after the groups.  In collection order,
    # the costly tests go first.
    if config.pluginmanager.hasplugin("xdist") and config.getoption("dist", None) == "loadgroup":
        config.option.loadscopereorder = False


def _join_group(item: pytest.Item, group: str) -> None:
    """`item` scheduled in `group` under `--dist loadgroup`: xdist groups the tests whose node ids end in `@group`.

    xdist (3.8) writes that suffix from an `xdist_group` mark into the item's `_nodeid`, which pytest 9.2 no longer
    reads (a node's id is its `_id`): no test was grouped.  The suffix is written here, where pytest reads it.
    """
    nodeid = f"{item.nodeid}@{group}"
    if isinstance(getattr(item, "_nodeid", None), str):  # pytest before 9.2
        item._nodeid = nodeid  # type: ignore[attr-defined]
    else:
        from _pytest.nodeid import NodeId  # type: ignore[import-not-found,unused-ignore]

        item._id = NodeId.parse(nodeid)  # type: ignore[attr-defined]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # `pytest -m unit` selects the stage folders: the folder decides, the mark only names the lane.
    for item in items:
        if _in_stage_folder(item):
            item.add_marker(pytest.mark.unit)
        # Tests that share a module's fixture run on one worker (`--dist loadgroup`, in an xdist worker), one
        # after the other, so that it is made once; the others go one at a time to whichever worker is free.
        # A test's `xdist_group` mark names its group (tests that share what a process remembers, as the
        # special-value cells of one function and dtype share mpmath's values); xdist no longer reads it (above).
        if not getattr(config.option, "loadgroup", False):
            continue
        named = item.get_closest_marker("xdist_group")
        scopes = {d.scope for defs in item._fixtureinfo.name2fixturedefs.values() for d in defs}  # type: ignore[attr-defined]
        if named is not None:
            _join_group(item, str(named.args[0] if named.args else named.kwargs.get("name", "default")))
        elif scopes & {"module", "class", "package"}:
            _join_group(item, item.module.__name__)  # type: ignore[attr-defined]
    # The costliest tests first (a stable sort keeps the rest in order): handed out last, one of them kept a
    # worker busy for the slow lane's last three minutes while the other sat idle.  Handed out one at a time
    # (see pytest_configure), they go to the two workers as each comes free, the longest first.
    items.sort(key=lambda item: item.get_closest_marker("costly") is None)
    # A package that tests on both workers import is built once, by the first worker to ask (`built_once`): the
    # first test of each such package goes first, so that the two workers build different packages side by side
    # and neither waits on the lock for a build the other began a moment before.
    first: dict[str, pytest.Item] = {}
    for item in items:
        defs = item._fixtureinfo.name2fixturedefs  # type: ignore[attr-defined]
        for name in SHARED_BUILDS:
            if name in defs and defs[name][-1].scope == "session":
                first.setdefault(name, item)
    # In this order: xdist hands the first unit to one worker, the second to the other, the third to the first.
    leading = list(dict.fromkeys(first[name] for name in SHARED_BUILDS if name in first))
    ahead = {id(item) for item in leading}
    items[:] = leading + [item for item in items if id(item) not in ahead]


#: The session fixtures whose package `built_once` builds once per run: tests/right_rules/, the conformance
#: matrix's rules (tests/package/test_conformance.py) and the cookbook's (tests/docs/test_cookbook.py).
SHARED_BUILDS = ("right_package", "package", "cookbook_package")


# A project (test_names.py of tests/spec and tests/package) whose rule in one file calls a rule of another.
CALLEE = "name: halved\ninputs: [x]\nforward: x / 2\n"
CALLER = "name: quartered\ninputs: [x]\nforward:\n  python: return halved(halved(x))\n"


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    (tmp_path / "pyproject.toml").write_text('[tool.rulegen]\nrules = ["rules"]\nout = "generated"\n')
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "halved.yaml").write_text(CALLEE)
    (tmp_path / "rules" / "quartered.yaml").write_text(CALLER)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def search_cache_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every search of the test runs: none is read from this process's memo or from disk."""
    from rulegen.derive.stabilise import search

    monkeypatch.setenv("RULEGEN_SEARCH_CACHE", "off")
    monkeypatch.setattr(search, "_SEARCHED", {})
