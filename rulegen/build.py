"""The pipeline from rule files to a package on disk, stage after stage.

read (spec) -> derive -> plan -> render -> format and write.  Each stage
takes the previous one's immutable output; this module only sequences them,
skips rule files that have not changed since the last build, and gathers
every error of every file before deciding to write anything.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rulegen.errors import Loc, SpecError, SpecErrors
from rulegen.render import render_package, template_files
from rulegen.spec import Rule, read_rule_file, rule_files
from rulegen.write import (
    Difference,
    Manifest,
    Plan,
    SourceRecord,
    compare,
    format_sources,
    sha256,
    write_package,
)


@dataclass(frozen=True)
class BuildResult:
    out: Path
    difference: Difference
    rebuilt: tuple[str, ...]  # rule files derived in this build
    reused: tuple[str, ...]  # rule files whose modules were up to date
    rules: int


@functools.cache
def compiler_fingerprint() -> str:
    """A hash of everything besides the rules that decides the output."""
    package = Path(__file__).resolve().parent
    parts = [f"sympy {importlib.metadata.version('sympy')}"]
    for path in sorted(package.glob("*.py")) + template_files():
        parts.append(f"{path.name} {sha256(path.read_bytes())}")
    return sha256("\n".join(parts))


def display_path(path: Path) -> Path:
    """The path as a user reads it in messages: relative to the working directory when inside it."""
    resolved = path.resolve()
    return Path(os.path.relpath(resolved, Path.cwd())) if resolved.is_relative_to(Path.cwd()) else path


def source_name(path: Path, out: Path) -> str:
    """The name generated code records for a rule file: relative to the package's parent folder.

    The project root is where `generated/` sits, so headers and the manifest
    read the same whichever folder `rulegen build` runs from.
    """
    resolved, root = path.resolve(), out.resolve().parent
    return resolved.relative_to(root).as_posix() if resolved.is_relative_to(root) else resolved.as_posix()


def generate_rule(rule: Rule, known_rules: Iterable[str] = ()) -> dict[str, str]:
    """The two unformatted modules of one rule; `known_rules` are the build's other rules."""
    # Deriving and printing need sympy; a rebuild with nothing to derive
    # should not pay for importing it.
    from rulegen.derive import DERIVE_SECONDS, derive_rule, sympy_time_limit
    from rulegen.plan import plan_jax, plan_jax_snippet, plan_torch, plan_torch_snippet
    from rulegen.render import render_jax, render_torch
    from rulegen.snippet import SnippetDerivation

    # Planning runs sympy too (cse, printing): one time limit covers both.
    with sympy_time_limit(DERIVE_SECONDS, rule.loc):
        derivation = derive_rule(rule, known_rules)
        if isinstance(derivation, SnippetDerivation):
            jax_plan, torch_plan = plan_jax_snippet(derivation), plan_torch_snippet(derivation)
        else:
            jax_plan, torch_plan = plan_jax(derivation), plan_torch(derivation)
    return {f"jax/{rule.name}.py": render_jax(jax_plan), f"torch/{rule.name}.py": render_torch(torch_plan)}


def _unchanged(record: SourceRecord | None, digest: str, out: Path, previous: Manifest, compiler: str) -> bool:
    if record is None or record.hash != digest or previous.compiler != compiler:
        return False
    for rel in record.files:
        try:
            if sha256((out / rel).read_bytes()) != previous.files.get(rel):
                return False
        except OSError:
            return False
    return True


def plan_build(paths: Iterable[Path], out: Path) -> tuple[Plan, Manifest, tuple[str, ...], tuple[str, ...]]:
    """What `out` should hold for the rules in `paths`; SpecErrors if any rule is bad."""
    compiler = compiler_fingerprint()
    previous = Manifest.load(out)
    errors: list[SpecError] = []
    sources: dict[str, SourceRecord] = {}
    texts: dict[str, str] = {}
    fresh: dict[str, str] = {}
    rebuilt: list[str] = []
    reused: list[str] = []
    owners: dict[str, str] = {}
    to_generate: list[tuple[str, str, tuple[Rule, ...]]] = []
    for path in rule_files(paths):
        key = source_name(path, out)
        path = display_path(path)
        try:
            digest = sha256(path.read_bytes())
        except OSError as exc:
            errors.append(SpecError(Loc(str(path)), f"cannot read: {exc.strerror}"))
            continue
        record = previous.sources.get(key)
        if _unchanged(record, digest, out, previous, compiler):
            assert record is not None
            texts.update({rel: (out / rel).read_text() for rel in record.files})
            sources[key] = record
            reused.append(key)
            _claim(owners, record.rules, str(path), errors)
            continue
        try:
            rules = read_rule_file(path, key)
        except SpecErrors as exc:
            errors.extend(exc.errors)
            continue
        _claim(owners, tuple((r.name, r.torch_class) for r in rules), str(path), errors)
        to_generate.append((key, digest, rules))
    # Every rule is known before any is derived: bodies may call each other.
    for key, digest, rules in to_generate:
        files: dict[str, str] = {}
        for rule in rules:
            try:
                files.update(generate_rule(rule, owners))
            except SpecErrors as exc:
                errors.extend(exc.errors)
        fresh.update(files)
        names = tuple((r.name, r.torch_class) for r in rules)
        sources[key] = SourceRecord(hash=digest, rules=names, files=tuple(sorted(files)))
        rebuilt.append(key)
    if errors:
        raise SpecErrors(errors)
    all_rules = [r for record in sources.values() for r in record.rules]
    modules = {**texts, **fresh}
    helpers = {f"{rel.split('/')[0]}/_{m}.py" for rel, text in modules.items() for m in _HELPER_IMPORT.findall(text)}
    classes = [
        (name, cls if f"\nclass {cls}(" in modules.get(f"torch/{name}.py", "") else None) for name, cls in all_rules
    ]
    package = render_package(classes, helpers)
    formatted = format_sources({**fresh, **package})
    files = {**texts, **formatted}
    manifest = Manifest(compiler=compiler, sources=sources, files={rel: sha256(t) for rel, t in files.items()})
    return Plan(files=files, manifest=manifest), previous, tuple(rebuilt), tuple(reused)


_HELPER_IMPORT = re.compile(r"^from \._(\w+) import", re.MULTILINE)


def _claim(owners: dict[str, str], rules: Sequence[tuple[str, str]], key: str, errors: list[SpecError]) -> None:
    for name, _ in rules:
        if name in owners:
            errors.append(SpecError(Loc(key), f"rule {name!r} is already defined in {owners[name]}"))
        else:
            owners[name] = key


class HandEditedError(Exception):
    """A generated module was changed by hand; rulegen will not overwrite it without --force."""

    def __init__(self, paths: Sequence[str]) -> None:
        super().__init__(", ".join(paths))
        self.paths = tuple(paths)


def build(paths: Iterable[Path], out: Path, *, check: bool = False, force: bool = False) -> BuildResult:
    """Build the package at `out`; with `check`, only report what a build would change."""
    plan, previous, rebuilt, reused = plan_build(paths, out)
    difference = compare(out, plan, previous)
    if not check:
        if difference.edited and not force:
            raise HandEditedError(difference.edited)
        if difference.written or difference.removed:
            write_package(out, plan, difference)
    rules = sum(len(s.rules) for s in plan.manifest.sources.values())
    return BuildResult(out=out, difference=difference, rebuilt=rebuilt, reused=reused, rules=rules)
