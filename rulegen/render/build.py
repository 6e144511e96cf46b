"""The pipeline from rule files to a package on disk, stage after stage.

read (spec) -> derive -> plan -> render -> format and write.  Each stage
takes the previous one's immutable output; this module only sequences them,
skips rule files that have not changed since the last build, and gathers
every error of every file before deciding to write anything.
"""

from __future__ import annotations

import concurrent.futures
import functools
import importlib.metadata
import json
import multiprocessing
import os
import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rulegen.derive.routes import Routes
from rulegen.render.layout import Distribution, helper_closure, helper_source, render_package, template_files
from rulegen.render.write import (
    Difference,
    Manifest,
    PackageRecord,
    Plan,
    SourceRecord,
    StabilisedRecord,
    compare,
    format_sources,
    remove_temporaries,
    sha256,
    write_package,
)
from rulegen.spec.errors import Loc, SpecError, SpecErrors, in_stage
from rulegen.spec.model import DEFAULT_ACCURACY
from rulegen.spec.rules import Rule, clash_errors, read_rule_file, rule_files

#: Fewer rules than this are derived in the calling process: starting workers
#: (a fork server that imports sympy, each worker's first, cold derivation)
#: costs about what 30 rules take on one core.
PARALLEL_MIN_RULES = 32


Claim = tuple[str, str, Loc]  # a rule's function name, torch class name and place


@dataclass(frozen=True)
class BuildResult:
    out: Path
    difference: Difference
    rebuilt: tuple[str, ...]  # rule files derived in this build
    reused: tuple[str, ...]  # rule files whose modules were up to date
    rules: int


def available_cores() -> int:
    """The cores this process may run on (its affinity where the platform says, else all)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


#: Parts of the package that generate nothing, relative to it: the check stage and the commands
#: around it.  A change there must not make every built package stale.
GENERATES_NOTHING = ("check", "cli.py", "pytest_plugin.py", "__main__.py")


def fingerprinted_files() -> list[Path]:
    """The package's modules that may decide what a build writes, and the templates, in a fixed order."""
    package = Path(__file__).resolve().parent.parent
    modules = [path for path in package.rglob("*.py") if path.relative_to(package).parts[0] not in GENERATES_NOTHING]
    data = sorted((package / "derive").glob("*.json"))  # the cost model's weights
    return sorted({*modules, *data, *template_files()})


@functools.cache
def compiler_fingerprint() -> str:
    """A hash of everything besides the rules that decides the output."""
    root = Path(__file__).resolve().parent.parent.parent
    parts = [f"sympy {importlib.metadata.version('sympy')}"]
    for path in fingerprinted_files():
        parts.append(f"{path.relative_to(root).as_posix()} {sha256(path.read_bytes())}")
    return sha256("\n".join(parts))


def resolved_path(path: Path) -> Path:
    """`path.resolve()`, or SpecErrors where symbolic links make a loop (Python 3.11 raises RuntimeError)."""
    try:
        return path.resolve()
    except (RuntimeError, OSError):
        raise SpecErrors([SpecError(Loc(str(path)), "a loop of symbolic links; it names no file")]) from None


def display_path(path: Path, resolved: Path | None = None, cwd: Path | None = None) -> Path:
    """The path as a user reads it in messages: relative to the working directory when inside it.

    `resolved` (`path.resolve()`) and `cwd` save a build of many files the
    system calls of finding them again.
    """
    resolved, cwd = resolved or resolved_path(path), cwd or Path.cwd()
    return Path(os.path.relpath(resolved, cwd)) if resolved.is_relative_to(cwd) else path


def source_name(resolved: Path, root: Path) -> str:
    """The name generated code records for a rule file (a resolved path): relative to `root`.

    `root` is the resolved parent folder of the package, the project root where
    `generated/` sits, so headers and the manifest read the same whichever
    folder `rulegen build` runs from, and on any machine.
    """
    if resolved.is_relative_to(root):
        return resolved.relative_to(root).as_posix()
    # Outside the project: still relative (`../rules/a.yaml`), never an absolute path of the build machine.
    try:
        return Path(os.path.relpath(resolved, root)).as_posix()
    except ValueError:  # another drive (Windows): no relative path exists
        return resolved.name


@dataclass(frozen=True)
class Generated:
    """One rule's two unformatted modules, and what they need: read off the plans, never off the modules."""

    routes: Routes
    modules: Mapping[str, str]
    helpers: frozenset[str]  # the package's runtime helpers they import, as `jax/_util.py`
    requires: Mapping[str, frozenset[str]]  # per backend, the top-level modules they import
    apis: frozenset[str]  # the framework APIs their bodies call whose age matters (rulegen.derive.floors)
    torch_class: bool  # whether the torch module defines the rule's autograd.Function
    stabilised: tuple[StabilisedRecord, ...] = ()  # the search's choices, for the manifest and `show --why`
    searched: bool = False  # whether the rule is sympy, whose expressions the accuracy search measures


def generate_rule(rule: Rule, known_rules: Iterable[str] = ()) -> dict[str, str]:
    """The two unformatted modules of one rule; `known_rules` are the build's other rules."""
    return dict(generate(rule, known_rules).modules)


def generate(rule: Rule, known_rules: Iterable[str] = ()) -> Generated:
    """Derive, plan and render one rule; an internal failure names the rule and the stage (`in_stage`)."""
    # Deriving and printing need sympy; a rebuild with nothing to derive
    # should not pay for importing it.
    from rulegen.derive.partials import DERIVE_SECONDS, derive_rule, sympy_time_limit
    from rulegen.derive.snippet import SnippetDerivation
    from rulegen.plan import plan_modules
    from rulegen.render.layout import render_module

    with in_stage(rule) as stage:
        # Planning runs sympy too (cse, printing): one time limit covers both.
        with sympy_time_limit(DERIVE_SECONDS, rule.loc):
            stage("deriving")
            derivation = derive_rule(rule, known_rules)
            stage("planning")
            jax_plan, torch_plan = plan_modules(derivation)
        stage("rendering")
        modules = {f"jax/{rule.name}.py": render_module(jax_plan), f"torch/{rule.name}.py": render_module(torch_plan)}
    needs = {"jax": jax_plan.needs, "torch": torch_plan.needs}
    return Generated(
        routes=derivation.routes,
        modules=modules,
        helpers=frozenset(f"{backend}/{h}.py" for backend, n in needs.items() for h in n.helpers),
        requires={backend: n.modules for backend, n in needs.items()},
        apis=jax_plan.needs.apis | torch_plan.needs.apis,
        torch_class=bool(torch_plan.function_class),
        stabilised=_stabilised(derivation),
        searched=not isinstance(derivation, SnippetDerivation),
    )


def _stabilised(derivation: object) -> tuple[StabilisedRecord, ...]:
    """The quantities `derivation` computes in a form the search chose over the derived one."""
    import sympy as sp

    from rulegen.derive.partials import Derivation

    if not isinstance(derivation, Derivation):
        return ()
    return tuple(
        StabilisedRecord(
            rule=derivation.rule.name,
            quantity=c.quantity,
            family=c.family,
            derived=sp.sstr(c.derived),
            chosen=sp.sstr(c.chosen),
            bits_before=c.bits_before,
            bits_after=c.bits_after,
        )
        for c in derivation.choices
        if c.changed
    )


def _generate_or_refuse(rule: Rule, known_rules: frozenset[str]) -> Generated | SpecErrors:
    try:
        return generate(rule, known_rules)
    except SpecErrors as exc:
        return exc


# Set in each worker process by `_start_worker`: sent once per worker rather
# than with every rule.
_worker_known_rules: frozenset[str] = frozenset()


def _start_worker(known_rules: frozenset[str], build_pid: int) -> None:
    global _worker_known_rules
    _worker_known_rules = known_rules
    threading.Thread(target=_exit_without, args=(build_pid,), daemon=True).start()


def _exit_without(build_pid: int) -> None:
    """End this worker once the build that started it has gone (killed, it cannot shut its pool down).

    A worker's parent is the fork server, not the build, so the parent's
    death signal (PR_SET_PDEATHSIG) would not reach it; polling works on
    every platform.
    """
    while True:
        time.sleep(WORKER_POLL_SECONDS)
        try:
            os.kill(build_pid, 0)
        except ProcessLookupError:
            os._exit(1)
        except PermissionError:
            pass  # alive, as another user: cannot be ours, but do not guess


#: How often a worker checks that its build is still running.
WORKER_POLL_SECONDS = 0.5


def _generate_in_worker(rule: Rule) -> Generated | SpecErrors:
    return _generate_or_refuse(rule, _worker_known_rules)


def worker_pool(workers: int, known_rules: frozenset[str]) -> concurrent.futures.ProcessPoolExecutor:
    """Processes that derive rules, each knowing the build's rule names.

    They are forked from a "forkserver": a fresh interpreter that has imported
    sympy and the pipeline once.  Plain fork would copy whatever threads the
    calling process runs (pytest with torch or JAX loaded), half-initialised;
    spawn, the fallback where there is no fork server, imports sympy again in
    every worker.  Each task runs in its worker's main thread, where
    `sympy_time_limit` can take SIGPROF.
    """
    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    context = multiprocessing.get_context(method)
    if method == "forkserver":
        # Only takes effect when this process starts its fork server, on first use.
        preloaded = ["rulegen.render.build", "rulegen.derive.partials", "rulegen.plan", "rulegen.render.layout"]
        context.set_forkserver_preload(preloaded)
    return concurrent.futures.ProcessPoolExecutor(
        workers, mp_context=context, initializer=_start_worker, initargs=(known_rules, os.getpid())
    )


def generate_rules(rules: Sequence[Rule], known_rules: frozenset[str], jobs: int) -> list[Generated | SpecErrors]:
    """`generate_rule` of each rule, in order, in up to `jobs` processes; a refused rule gives its SpecErrors."""
    workers = min(jobs, len(rules))
    if workers <= 1 or len(rules) < PARALLEL_MIN_RULES:
        return [_generate_or_refuse(rule, known_rules) for rule in rules]
    # Chunks amortise the round trip to a worker; several chunks per worker
    # keep the cores busy to the end when some rules take much longer.
    chunksize = max(1, len(rules) // (8 * workers))
    pool = worker_pool(workers, known_rules)
    try:
        return list(pool.map(_generate_in_worker, rules, chunksize=chunksize))
    finally:
        pool.shutdown(cancel_futures=True)


def _read_unchanged(files: Sequence[str], out: Path, previous: Manifest) -> dict[str, str] | None:
    """The texts of `files` in `out` if each is as the last build wrote it, else None."""
    texts: dict[str, str] = {}
    for rel in files:
        try:
            data = (out / rel).read_bytes()
        except OSError:
            return None
        if sha256(data) != previous.files.get(rel):
            return None
        texts[rel] = data.decode()
    return texts


@dataclass
class _Sources:
    """What reading the rule files found: records and modules kept from the last build, rules to derive."""

    errors: list[SpecError] = field(default_factory=list)
    records: dict[str, SourceRecord] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)  # modules kept as they are in `out`
    reused: list[str] = field(default_factory=list)
    reused_files: dict[Loc, tuple[Path, str]] = field(default_factory=dict)
    claims: list[Claim] = field(default_factory=list)
    to_generate: list[tuple[str, str, tuple[Rule, ...]]] = field(default_factory=list)  # (key, hash, rules)


def _read_sources(
    paths: Iterable[Path], out: Path, previous: Manifest, same_compiler: bool, accuracy: str | None = None
) -> _Sources:
    """Each rule file: kept as the last build left it where nothing changed, else read to be derived, its rules
    without an `accuracy` of their own under the build's (`accuracy`; None: the default)."""
    found = _Sources()
    cwd, root = Path.cwd(), resolved_path(out).parent
    for path in rule_files(paths):
        try:
            resolved = resolved_path(path)
        except SpecErrors as exc:
            found.errors += exc.errors
            continue
        key = source_name(resolved, root)
        path = display_path(path, resolved, cwd)
        try:
            digest = sha256(path.read_bytes())
        except OSError as exc:
            found.errors.append(SpecError(Loc(str(path)), f"cannot read: {exc.strerror}"))
            continue
        record = previous.sources.get(key)
        if (
            record is not None
            and same_compiler
            and record.hash == digest
            and (kept := _read_unchanged(record.files, out, previous)) is not None
        ):
            found.texts.update(kept)
            found.records[key] = record
            found.reused.append(key)
            # Unread, its rules are located by their file until a clash needs more.
            found.reused_files[Loc(str(path))] = (path, key)
            found.claims += [(name, cls, Loc(str(path))) for name, cls in record.rules]
            continue
        try:
            rules = with_accuracy(read_rule_file(path, key), accuracy)
        except SpecErrors as exc:
            found.errors.extend(exc.errors)
            continue
        found.claims += [(r.name, r.torch_class, r.loc) for r in rules]
        found.to_generate.append((key, digest, rules))
    return found


def _generate_sources(found: _Sources, jobs: int) -> tuple[dict[str, str], list[str]]:
    """Derive the rules `found` to generate: their modules, and the rule files rebuilt; records them in `found`."""
    # Every rule is known before any is derived: bodies may call each other.
    known = frozenset(name for name, _, _ in found.claims)
    generated = iter(generate_rules([r for _, _, rules in found.to_generate for r in rules], known, jobs))
    fresh: dict[str, str] = {}
    rebuilt: list[str] = []
    for key, digest, rules in found.to_generate:
        outcomes = [next(generated) for _ in rules]
        for outcome in outcomes:
            if isinstance(outcome, SpecErrors):
                found.errors.extend(outcome.errors)
        made = [o for o in outcomes if isinstance(o, Generated)]
        files = {rel: text for g in made for rel, text in g.modules.items()}
        fresh.update(files)
        found.records[key] = SourceRecord(
            hash=digest,
            rules=tuple((r.name, r.torch_class) for r in rules),
            files=tuple(sorted(files)),
            helpers=tuple(sorted(set().union(*(g.helpers for g in made)))),
            requires={b: tuple(sorted(set().union(*(g.requires[b] for g in made)))) for b in BACKENDS},
            apis=tuple(sorted(set().union(*(g.apis for g in made)))),
            plain=tuple(sorted(r.name for r, g in zip(rules, outcomes, strict=True) if _without_class(g))),
            stabilised=tuple(c for g in made for c in g.stabilised),
        )
        rebuilt.append(key)
    return fresh, rebuilt


def with_accuracy(rules: Sequence[Rule], accuracy: str | None) -> tuple[Rule, ...]:
    """`rules`, those that name no accuracy policy of their own under `accuracy` (None: leave them be)."""
    if accuracy is None:
        return tuple(rules)
    return tuple(r if r.accuracy is not None else r.model_copy(update={"accuracy": accuracy}) for r in rules)


def _without_class(outcome: Generated | SpecErrors) -> bool:
    """A rule whose torch module is a plain function: the package exports no Function class for it."""
    return isinstance(outcome, Generated) and not outcome.torch_class


def plan_build(
    paths: Iterable[Path],
    out: Path,
    jobs: int = 1,
    package_name: str | None = None,
    package_version: str | None = None,
    accuracy: str | None = None,
) -> tuple[Plan, Manifest, tuple[str, ...], tuple[str, ...], dict[str, str]]:
    """What `out` should hold for the rules in `paths`; SpecErrors if any rule is bad.

    With `package_name`, the package gets a pyproject.toml of its own, of
    `package_version` (default 0.1.0).  `accuracy` is the build's accuracy
    policy, of the rules that name none (None: the default).

    Also returns the previous manifest, the rule files derived and reused,
    and the hashes of the files already read from `out` (for `compare`).
    """
    compiler = compiler_fingerprint()
    previous = Manifest.load(out)
    policy = accuracy or DEFAULT_ACCURACY
    # Another policy decides other forms: nothing a build under another one derived is reused.
    same_compiler = previous.compiler == compiler and previous.accuracy == policy
    found = _read_sources(paths, out, previous, same_compiler, accuracy)
    if clash_errors(found.claims):
        found.errors += clash_errors(_located(found.claims, found.reused_files))
    fresh, rebuilt = _generate_sources(found, jobs)
    if found.errors:
        raise SpecErrors(found.errors)
    texts, records = found.texts, found.records
    read = {rel: previous.files[rel] for rel in texts}
    helpers = sorted(set().union(*(r.helpers for r in records.values())))
    classes = [(name, None if name in r.plain else cls) for r in records.values() for name, cls in r.rules]
    if package_name:
        check_package_name(package_name, records.values())
    distribution = distribution_of(package_name, records.values(), package_version) if package_name else None
    package_hash = sha256(json.dumps([sorted(classes), helpers, repr(distribution)]))
    package = previous.package
    if (
        package is not None
        and same_compiler
        and package.hash == package_hash
        and (kept := _read_unchanged(package.files, out, previous)) is not None
    ):
        read.update({rel: previous.files[rel] for rel in kept})
        texts.update(kept)
        package_files = tuple(kept)
    else:
        rendered = render_package(classes, helpers, distribution)
        fresh.update(rendered)
        package_files = tuple(sorted(rendered))
    files = {**texts, **format_sources(fresh)}
    manifest = Manifest(
        compiler=compiler,
        accuracy=policy,
        sources=records,
        files={rel: sha256(t) for rel, t in files.items()},
        package=PackageRecord(hash=package_hash, files=package_files),
    )
    return Plan(files=files, manifest=manifest), previous, tuple(rebuilt), tuple(found.reused), read


BACKENDS = ("jax", "torch")

#: The frameworks, by import name: a backend's extra, never a dependency of both.
FRAMEWORKS = ("jax", "torch")


#: Distributions a package of rules may never be named after, whatever its rules import: the
#: frameworks, what their helpers and checks import (gmpy2: mpmath's and sympy's integers), and rulegen itself.
SHADOWED_ALWAYS = ("jax", "jaxlib", "torch", "numpy", "scipy", "sympy", "mpmath", "gmpy2", "rulegen")


class PackageNameError(ValueError):
    """A `--package-name` that installing the package would make shadow or replace another module."""


def check_package_name(name: str, records: Iterable[SourceRecord]) -> None:
    """PackageNameError where a distribution `name` of these rules' package would take another module's place.

    Installed, the package is the top-level module `name`: a standard library
    module of that name (`typing`, `math`) would be hidden from every program,
    and a distribution of that name (`torch`, or any top-level module that a
    distribution the package imports installs) replaced by pip.
    """
    import sys

    def normal(text: str) -> str:
        return re.sub(r"[-_.]+", "-", text).lower()

    if name in sys.stdlib_module_names:
        raise PackageNameError(f"--package-name {name!r} is a module of Python's standard library; choose another")
    installed = importlib.metadata.packages_distributions()
    imported = {m for r in records for modules in r.requires.values() for m in modules} | {*SHADOWED_ALWAYS}
    distributions = {d for m in imported for d in installed.get(m, ())} | {*SHADOWED_ALWAYS}
    taken = {
        normal(module): f"a module of the distribution {dist!r}"
        for module, dists in installed.items()
        for dist in dists
        if normal(dist) in {normal(d) for d in distributions}
    } | {normal(d): f"the distribution {d!r}" for d in distributions}
    why = taken.get(normal(name))
    if why is not None:
        raise PackageNameError(
            f"--package-name {name!r} is {why}, which the generated package needs: installing it would "
            "replace that; choose another name"
        )


def distribution_of(name: str, records: Iterable[SourceRecord], version: str | None = None) -> Distribution:
    """The distribution `name` of a package of rules with these records: what they import, by distribution name.

    Each framework is required from the first release that has every API its
    modules use (`rulegen.derive.floors`): what a rule module may print, what the
    rules' bodies call, what the runtime helpers it ships call.
    """
    import sys

    from rulegen.derive.floors import RULE_MODULE_APIS, apis_used, floors_of

    records = list(records)
    installed = importlib.metadata.packages_distributions()
    helpers = helper_closure(set().union(*(r.helpers for r in records)))
    floors = floors_of(
        {*RULE_MODULE_APIS, *(a for r in records for a in r.apis)}.union(
            *(apis_used(helper_source(helper).read_text()) for helper in helpers)
        )
    )

    def requirement(module: str) -> str:
        if module in FRAMEWORKS:
            return f"{module}>={floors[module]}" if module in floors else module
        return next(iter(installed.get(module, [])), module)

    used = {
        backend: {m for r in records for m in r.requires.get(backend, ()) if m not in sys.stdlib_module_names}
        for backend in BACKENDS
    }
    common = (used["jax"] | used["torch"]) - set(FRAMEWORKS)
    return Distribution(
        name=name,
        version=version or Distribution.version,
        dependencies=tuple(sorted({requirement(m) for m in common})),
        extras={
            backend: tuple(sorted({requirement(m) for m in (used[backend] & set(FRAMEWORKS)) | {backend}}))
            for backend in BACKENDS
        },
    )


def _located(
    claims: Sequence[tuple[str, str, Loc]], files: Mapping[Loc, tuple[Path, str]]
) -> list[tuple[str, str, Loc]]:
    """`claims` with the rules of unread files (`files`, by their file's location) located in them."""
    places: dict[tuple[Loc, str], Loc] = {}
    for where, (path, key) in files.items():
        try:
            places |= {(where, r.name): r.loc for r in read_rule_file(path, key)}
        except SpecErrors:
            continue
    return [(name, cls, places.get((loc, name), loc)) for name, cls, loc in claims]


class OutputError(Exception):
    """The package folder cannot be written (read-only, full, not ours): the machine's fault, not the rules'.

    Files are replaced one by one, each atomically, and the manifest last, so
    the next build redoes whatever this one left undone.
    """

    def __init__(self, out: Path, error: OSError) -> None:
        where = error.filename or out
        super().__init__(f"cannot write {where}: {error.strerror or error}")
        self.out = out


class HandEditedError(Exception):
    """A generated module was changed by hand; rulegen will not overwrite it without --force."""

    def __init__(self, paths: Sequence[str]) -> None:
        super().__init__(", ".join(paths))
        self.paths = tuple(paths)


def build(
    paths: Iterable[Path],
    out: Path,
    *,
    check: bool = False,
    force: bool = False,
    jobs: int = 1,
    package_name: str | None = None,
    package_version: str | None = None,
    accuracy: str | None = None,
) -> BuildResult:
    """Build the package at `out`; with `check`, only report what a build would change.

    With `package_name`, `out` also gets a pyproject.toml: a distribution of that
    name, of `package_version` (default 0.1.0).  `accuracy` is the accuracy
    policy of the rules that name none (None: the default, `best`).

    With `jobs` above 1, rules are derived in up to that many worker processes
    (the output is the same); the calling script's main module must then be
    guarded by `if __name__ == "__main__":`, as for any multiprocessing.
    """
    if out.exists() and not out.is_dir():
        raise SpecErrors([SpecError(Loc(str(out)), "the output names a file; it must be a folder (the package)")])
    plan, previous, rebuilt, reused, read = plan_build(paths, out, jobs, package_name, package_version, accuracy)
    difference = compare(out, plan, previous, read)
    if not check:
        if difference.edited and not force:
            raise HandEditedError(difference.edited)
        try:
            if difference.written or difference.removed:
                write_package(out, plan, difference, previous)
            else:
                remove_temporaries(out)
        except OSError as exc:
            raise OutputError(out, exc) from None
    rules = sum(len(s.rules) for s in plan.manifest.sources.values())
    return BuildResult(out=out, difference=difference, rebuilt=rebuilt, reused=reused, rules=rules)
