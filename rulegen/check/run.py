"""Running the checks: rules built once, each rule's subject built once, every check run on it."""

from __future__ import annotations

import concurrent.futures
import importlib
import multiprocessing
import sys
import tempfile
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from rulegen.check.lowering import one_mlir_context
from rulegen.check.outcome import CheckFailed, NotApplicable, Outcome, brief
from rulegen.check.registry import CHECKS, REGISTRY, Check
from rulegen.check.subject import Subject, subject_of
from rulegen.render.build import available_cores
from rulegen.spec.rules import Rule


class CheckSession:
    """Rules built once and checked, rule by rule, in this process or in worker processes.

    With `jobs` above 1 each rule's checks run in one of `jobs` worker
    processes, started with "spawn": torch and JAX hold threads and
    runtime state that a forked child inherits half-initialised.  A rule's
    outcomes do not depend on where it runs (its random points come from the
    seed and its name), so they are the same as in one process, in the
    same order.  Several seeds can be run in one session without rebuilding
    the package or restarting the workers.
    """

    def __init__(
        self, rules: Sequence[Rule], package: str | None = None, *, jobs: int = 1, accuracy: str | None = None
    ) -> None:
        self.rules = list(rules)
        self.accuracy = accuracy  # the build's accuracy policy, of the rules that name none
        self.package = package
        self.jobs = max(1, min(jobs, len(self.rules)))
        self._stack = ExitStack()
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._modules: tuple[Any, Any] | None = None

    def __enter__(self) -> CheckSession:
        with self._stack:
            package, folder = self.package, None
            if package is None:
                package = "rulegen_checked"
                folder = self._stack.enter_context(tempfile.TemporaryDirectory(prefix="rulegen-check-"))
                self._stack.callback(_forget_package, package)
                from rulegen.render.build import build

                build(sorted({Path(r.source) for r in self.rules}), Path(folder) / package, accuracy=self.accuracy)
            if self.jobs > 1:
                # Each worker gets an equal share of the cores for torch's own threads.
                threads = max(1, available_cores() // self.jobs)
                self._pool = self._stack.enter_context(
                    concurrent.futures.ProcessPoolExecutor(
                        max_workers=self.jobs,
                        mp_context=multiprocessing.get_context("spawn"),
                        initializer=_start_worker,
                        initargs=(self.rules, package, folder, threads),
                    )
                )
            else:
                if folder is not None:
                    sys.path.insert(0, folder)
                    self._stack.callback(sys.path.remove, folder)
                self._modules = _import_package(package)
            # Entered whole: keep what was opened until __exit__.
            self._stack = self._stack.pop_all()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stack.close()
        self._pool = self._modules = None

    @property
    def modules(self) -> tuple[Any, Any]:
        """The built package's JAX and torch modules, imported in this process (a session of one job)."""
        assert self._modules is not None, "modules are imported here only by a session of one job, once entered"
        return self._modules

    def run(
        self,
        *,
        seed: int = 0,
        include_compile: bool = False,
        progress: Callable[[Outcome], None] | None = None,
        checks: Sequence[Check] = REGISTRY,
    ) -> list[Outcome]:
        """Every check of `checks` (see `chosen_checks`) on every rule at the points of `seed`, in rule order."""
        chosen = tuple(checks)
        if self._pool is None:
            assert self._modules is not None, "run() is for inside `with CheckSession(...)`"
            jax_pkg, torch_pkg = self._modules
            names = [r.name for r in self.rules]
            outcomes = []
            for rule in self.rules:
                for outcome in check_rule(rule, jax_pkg, torch_pkg, seed, include_compile, names, chosen):
                    outcomes.append(outcome)
                    if progress is not None:
                        progress(outcome)
            return outcomes
        by_rule: dict[int, list[Outcome]] = {}
        futures = {
            self._pool.submit(_check_in_worker, k, seed, include_compile, chosen): k for k in range(len(self.rules))
        }
        for future in concurrent.futures.as_completed(futures):
            k = futures[future]
            try:
                by_rule[k] = future.result()
            except Exception as exc:  # not a check's failure (each is caught): the worker died, say in native code
                detail = f"the worker process checking it failed: {type(exc).__name__}: {exc}"
                by_rule[k] = [Outcome(self.rules[k].name, check.name, "fail", detail) for check in chosen]
            if progress is not None:
                for outcome in by_rule[k]:
                    progress(outcome)
        return [outcome for k in range(len(self.rules)) for outcome in by_rule[k]]


def _import_package(package: str) -> tuple[Any, Any]:
    import jax

    jax.config.update("jax_enable_x64", True)
    return importlib.import_module(f"{package}.jax"), importlib.import_module(f"{package}.torch")


def _forget_package(package: str) -> None:
    """Drop a temporary package's modules, so that the next one of the same name is imported afresh."""
    for module in [m for m in sys.modules if m == package or m.startswith(f"{package}.")]:
        del sys.modules[module]


# A worker process's rules and imported package, set once by `_start_worker`.
_WORKER: dict[str, Any] = {}


def _start_worker(rules: list[Rule], package: str, folder: str | None, threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
    if folder is not None:
        sys.path.insert(0, folder)
    _WORKER.update(rules=rules, modules=_import_package(package))


def _check_in_worker(index: int, seed: int, include_compile: bool, chosen: tuple[Check, ...]) -> list[Outcome]:
    rules: list[Rule] = _WORKER["rules"]
    jax_pkg, torch_pkg = _WORKER["modules"]
    return list(check_rule(rules[index], jax_pkg, torch_pkg, seed, include_compile, [r.name for r in rules], chosen))


def chosen_checks(only: Collection[str] | None) -> tuple[Check, ...]:
    """The registry's checks named in `only` (all where None), in the registry's order; ValueError for a name
    that is no check."""
    if only is None:
        return REGISTRY
    unknown = sorted(set(only) - set(CHECKS))
    if unknown:
        raise ValueError(f"no check named {', '.join(map(repr, unknown))}; the checks are {', '.join(CHECKS)}")
    return tuple(check for check in REGISTRY if check.name in only)


def run_checks(
    rules: Sequence[Rule],
    package: str | None = None,
    *,
    seed: int = 0,
    include_compile: bool = False,
    progress: Callable[[Outcome], None] | None = None,
    jobs: int = 1,
    only: Collection[str] | None = None,
    accuracy: str | None = None,
) -> list[Outcome]:
    """Every check (or those named in `only`) on every rule; `package` names an importable built package,
    else one is built.

    `jobs` above 1 checks rules in that many worker processes (see `CheckSession`); `accuracy` is the
    build's accuracy policy.
    """
    checks = chosen_checks(only)  # an unknown name is refused before anything is built
    with CheckSession(rules, package, jobs=jobs, accuracy=accuracy) as session:
        return session.run(seed=seed, include_compile=include_compile, progress=progress, checks=checks)


def check_rule(
    rule: Rule,
    jax_pkg: Any,
    torch_pkg: Any,
    seed: int,
    include_compile: bool,
    known: Sequence[str] = (),
    checks: Sequence[Check] | None = None,
) -> Iterator[Outcome]:
    """Every check's outcome on one rule, in order, each check given a fresh copy of one subject.

    The subject is built once, at the first check the rule does not skip; a
    failure to build it (a sample that misses the rule's domain) is each
    check's outcome, as it would be were the subject built per check.
    """
    built: Subject | Exception | None = None
    available = {"include_compile": include_compile, "jax_package": jax_pkg}
    for check in REGISTRY if checks is None else checks:
        skip = rule.checks.skip.get(check.name)
        if skip is not None:
            yield Outcome(rule.name, check.name, "n/a", f"skipped by the rule: {skip}")
            continue
        with one_mlir_context():
            if built is None:
                try:
                    built = subject_of(rule, jax_pkg, torch_pkg, seed, known)
                except Exception as exc:
                    built = exc
            outcome = _outcome(rule, check, built, available)
        yield outcome


def _outcome(rule: Rule, check: Check, built: Subject | Exception, available: dict[str, Any]) -> Outcome:
    try:
        if isinstance(built, Exception):
            raise built
        detail = check.function(built.fresh(), **{need: available[need] for need in check.needs})
        return Outcome(rule.name, check.name, "pass", detail)
    except NotApplicable as why:
        return Outcome(rule.name, check.name, "n/a", str(why))
    except CheckFailed as failure:
        return Outcome(rule.name, check.name, "fail", str(failure))
    except Exception as exc:
        return Outcome(rule.name, check.name, "fail", f"{type(exc).__name__}: {brief(str(exc))}")
