"""Stage 5: format generated modules and write them without ever leaving a half-built package.

Everything is rendered and formatted in memory first; only then is any file
touched, each replaced atomically (`os.replace`).  A manifest beside the
modules records the hash of every rule file and of every module written, so
that a rebuild skips unchanged rules and a module edited by hand is noticed
instead of overwritten.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

MANIFEST = ".rulegen-manifest.json"
# The package has `jax` and `torch` subfolders; without this, isort would
# take `import jax` for an import of the package's own folder.
RUFF_ARGS = (
    "--isolated",
    "--line-length",
    "100",
    "--config",
    "lint.isort.known-third-party = ['jax', 'torch']",
)


def sha256(data: str | bytes) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


@dataclass(frozen=True)
class StabilisedRecord:
    """A quantity a rule computes in another form than derived: the search's choice, as the manifest keeps it."""

    rule: str
    quantity: str
    family: str
    derived: str
    chosen: str
    #: Mean bits of error, (float64, float32), of the derived and of the chosen form; nan where not measured.
    bits_before: tuple[float, float]
    bits_after: tuple[float, float]

    def as_json(self) -> dict[str, object]:
        # One decimal: the manifest records the choice, not the measurement's noise.
        bits = {k: [None if b != b else round(b, 1) for b in getattr(self, k)] for k in ("bits_before", "bits_after")}
        return {
            "rule": self.rule,
            "quantity": self.quantity,
            "family": self.family,
            "derived": self.derived,
            "chosen": self.chosen,
            **bits,
        }

    @staticmethod
    def from_json(data: Mapping[str, object]) -> StabilisedRecord:
        def bits(key: str) -> tuple[float, float]:
            low, high = (float("nan") if b is None else float(b) for b in data[key])  # type: ignore[attr-defined]
            return low, high

        return StabilisedRecord(
            rule=str(data["rule"]),
            quantity=str(data["quantity"]),
            family=str(data["family"]),
            derived=str(data["derived"]),
            chosen=str(data["chosen"]),
            bits_before=bits("bits_before"),
            bits_after=bits("bits_after"),
        )


@dataclass(frozen=True)
class SourceRecord:
    """What one rule file produced last time."""

    hash: str
    rules: tuple[tuple[str, str], ...]  # (function name, torch class name)
    files: tuple[str, ...]
    # What its modules need, as the plans said: the package's runtime helpers
    # (`jax/_util.py`), and per backend the top-level modules they import.
    helpers: tuple[str, ...] = ()
    requires: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    apis: tuple[str, ...] = ()  # framework APIs their bodies call whose age matters (rulegen.derive.floors)
    plain: tuple[str, ...] = ()  # rules whose torch module defines no Function class
    stabilised: tuple[StabilisedRecord, ...] = ()  # what `rulegen show NAME --why` explains


@dataclass(frozen=True)
class PackageRecord:
    """The package's own modules (`__init__.py`s, shared helpers) as last written.

    They depend only on the rules' names and the helpers the rules import;
    `hash` is of those, so a rebuild that changes neither renders and formats
    nothing.
    """

    hash: str
    files: tuple[str, ...]


@dataclass(frozen=True)
class Manifest:
    compiler: str = ""
    accuracy: str = "best"  # the build's accuracy policy, of the rules that name none
    sources: Mapping[str, SourceRecord] = field(default_factory=dict)
    files: Mapping[str, str] = field(default_factory=dict)  # relative path -> sha256
    package: PackageRecord | None = None
    # Files a build was replacing when it stopped (relative path -> the sha256
    # it was writing): recorded before the first replacement, so that a file
    # a killed build left half-way is told from one edited by hand.
    pending: Mapping[str, str] = field(default_factory=dict)

    @staticmethod
    def load(out: Path) -> Manifest:
        try:
            data = json.loads((out / MANIFEST).read_text())
            sources = {
                path: SourceRecord(
                    hash=s["hash"],
                    rules=tuple((r[0], r[1]) for r in s["rules"]),
                    files=tuple(s["files"]),
                    helpers=tuple(s["helpers"]),
                    requires={b: tuple(m) for b, m in s["requires"].items()},
                    apis=tuple(s.get("apis", ())),  # absent from manifests of older rulegens
                    plain=tuple(s["plain"]),
                    stabilised=tuple(StabilisedRecord.from_json(c) for c in s.get("stabilised", ())),
                )
                for path, s in data["sources"].items()
            }
            package = data.get("package")
            return Manifest(
                compiler=data["compiler"],
                accuracy=str(data.get("accuracy", "best")),  # absent from manifests of older rulegens
                sources=sources,
                files=dict(data["files"]),
                package=PackageRecord(hash=package["hash"], files=tuple(package["files"])) if package else None,
                pending=dict(data.get("pending", {})),
            )
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            return Manifest()

    def wrote(self, rel: str, digest: str) -> bool:
        """Whether a build recorded here left `rel` with this hash (finished, or stopped while writing it)."""
        return digest in (self.files.get(rel), self.pending.get(rel))

    def dumps(self) -> str:
        data = {
            "compiler": self.compiler,
            "accuracy": self.accuracy,
            "sources": {
                path: {
                    "hash": s.hash,
                    "rules": [list(r) for r in s.rules],
                    "files": list(s.files),
                    "helpers": list(s.helpers),
                    "requires": {b: list(m) for b, m in sorted(s.requires.items())},
                    "apis": list(s.apis),
                    "plain": list(s.plain),
                    "stabilised": [c.as_json() for c in s.stabilised],
                }
                for path, s in sorted(self.sources.items())
            },
            "files": dict(sorted(self.files.items())),
        }
        if self.package is not None:
            data["package"] = {"hash": self.package.hash, "files": list(self.package.files)}
        if self.pending:
            data["pending"] = dict(sorted(self.pending.items()))
        return json.dumps(data, indent=1) + "\n"


def ruff_executable() -> list[str]:
    try:
        from ruff.__main__ import find_ruff_bin

        return [os.fsdecode(find_ruff_bin())]
    except ImportError:
        return [sys.executable, "-m", "ruff"]


def format_sources(files: Mapping[str, str]) -> dict[str, str]:
    """`ruff format` every module in one run; generated code is formatted like hand-written code.

    Files other than modules (py.typed, pyproject.toml) are returned as they are.
    """
    modules = {rel: text for rel, text in files.items() if rel.endswith(".py")}
    if not modules:
        return dict(files)
    with tempfile.TemporaryDirectory(prefix="rulegen-format-") as tmp:
        root = Path(tmp)
        for rel, text in modules.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        # Import blocks are sorted and grouped (stdlib, third party, local) by
        # ruff's isort rule, then everything is formatted.
        for command in (["check", "--select", "I", "--fix", "--exit-zero"], ["format"]):
            proc = subprocess.run(
                [*ruff_executable(), *command, *RUFF_ARGS, "--quiet", "."],
                cwd=root,
                capture_output=True,
                text=True,
                check=False,
            )
            if proc.returncode != 0:
                raise RuntimeError(
                    f"ruff {command[0]} failed on generated code (a rulegen bug):\n{proc.stderr}{proc.stdout}"
                )
        return {**files, **{rel: (root / rel).read_text() for rel in modules}}


@dataclass(frozen=True)
class Plan:
    """What a build wants the output directory to hold."""

    files: Mapping[str, str]  # relative path -> text, every module of the package
    manifest: Manifest


@dataclass(frozen=True)
class Difference:
    written: tuple[str, ...]
    removed: tuple[str, ...]
    edited: tuple[str, ...]  # modules changed by hand since rulegen wrote them


def compare(out: Path, plan: Plan, previous: Manifest, read: Mapping[str, str] | None = None) -> Difference:
    """Which files a write of `plan` would change, and which were edited by hand.

    `read` gives the sha256 of files the build has already read from `out`
    (relative path -> hash), so that they are not read again.
    """
    read = read or {}
    written: list[str] = []
    edited: list[str] = []
    for rel, text in sorted(plan.files.items()):
        if rel in read:
            digest = read[rel]
        else:
            try:
                digest = sha256((out / rel).read_bytes())
            except OSError:
                written.append(rel)
                continue
        if digest != sha256(text):
            written.append(rel)
            if not previous.wrote(rel, digest):
                edited.append(rel)
    removed = sorted(rel for rel in previous.files if rel not in plan.files and (out / rel).exists())
    for rel in removed:
        if not previous.wrote(rel, sha256((out / rel).read_bytes())):
            edited.append(rel)
    manifest_path = out / MANIFEST
    if not manifest_path.exists() or manifest_path.read_text() != plan.manifest.dumps():
        written.append(MANIFEST)
    return Difference(tuple(written), tuple(removed), tuple(sorted(edited)))


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# mkstemp creates files readable by their owner only; generated modules are
# ordinary source files.
_UMASK = _current_umask()


def _replace(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


#: What `_replace` names a module or the manifest before it takes its place.
TEMPORARIES = (".*.py.*.tmp", f".{MANIFEST}.*.tmp", ".py.typed.*.tmp", ".pyproject.toml.*.tmp")


def remove_temporaries(out: Path) -> None:
    """Delete the temporary files a killed build left in `out`."""
    if out.is_dir():
        for pattern in TEMPORARIES:
            for path in out.rglob(pattern):
                path.unlink(missing_ok=True)


def write_package(out: Path, plan: Plan, difference: Difference, previous: Manifest) -> None:
    """Make `out` hold exactly `plan`, one atomic replacement per file.

    `previous` (the manifest `out` holds) is first rewritten with the hashes
    about to be written, so that a build killed half-way leaves a package
    whose every file the next build recognises as its own.
    """
    remove_temporaries(out)
    pending = {rel: sha256(plan.files[rel]) for rel in difference.written if rel != MANIFEST}
    if pending:
        _replace(out / MANIFEST, replace(previous, pending={**previous.pending, **pending}).dumps())
    for rel in difference.written:
        if rel != MANIFEST:
            _replace(out / rel, plan.files[rel])
    for rel in difference.removed:
        (out / rel).unlink(missing_ok=True)
    # The manifest goes last: if anything above fails, the next build sees
    # the old hashes and redoes the work.
    _replace(out / MANIFEST, plan.manifest.dumps())
