"""What the derive stage builds slowly, kept on disk: a rebuild never builds again what a build has built.

Two kinds of thing are kept: the accuracy search's results (`stabilise.cache` keys them) and the function
registry's expressions by cases (beta's, betaln's and their partials', which sympy takes seconds to build, in
every process that prints them: each test worker, each build). A key is a hash of what decides the thing,
written out in full (`srepr`, assumptions included), and of the code that decides it (this package's derive
and spec stages and the computation model) and the libraries that compute (sympy, numpy, mpmath): an entry is
read back only where the same code would build the same thing again. Entries are pickles in the user's own
cache folder, written whole or not at all (`os.replace`); one that cannot be read is a miss.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import pickle
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import sympy as sp

from rulegen.spec.rules import Node

#: Where the cache lives: a folder, or "off" for none. Default: `$XDG_CACHE_HOME/rulegen/search`
#: (`~/.cache/rulegen/search`).
CACHE_ENV = "RULEGEN_SEARCH_CACHE"


def cache_dir() -> Path | None:
    """The folder of the cache, or None where it is turned off."""
    setting = os.environ.get(CACHE_ENV, "")
    if setting.lower() == "off":
        return None
    if setting:
        return Path(setting)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "rulegen" / "search"


@functools.cache
def deriving_fingerprint() -> str:
    """A hash of the code and the libraries that decide what the derive stage builds."""
    package = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for library in ("sympy", "numpy", "mpmath"):
        digest.update(f"{library} {importlib.metadata.version(library)}\n".encode())
    digest.update(f"python {sys.version_info[:2]}\n".encode())
    for path in sorted(
        [
            *(package / "derive").rglob("*.py"),
            *(package / "derive").rglob("*.json"),
            *(package / "spec").rglob("*.py"),
            # The gate measures a form as the planners compute it (`gate.as_computed`: computation.sharing).
            *(package / "computation").rglob("*.py"),
        ]
    ):
        digest.update(path.relative_to(package).as_posix().encode() + b"\n" + path.read_bytes())
    return digest.hexdigest()


def written(value: object) -> str:
    """`value` written out in full: sympy objects as `srepr`, assumptions included; rule nodes without places."""
    if isinstance(value, sp.Basic):
        return sp.srepr(value)
    if isinstance(value, tuple | list):
        return "(" + ", ".join(written(v) for v in value) + ")"
    if isinstance(value, Node):  # where a rule file wrote it decides nothing
        return f"{type(value).__name__}{written(tuple(value.model_dump(exclude={'loc'}).items()))}"
    return repr(value)


def key_of(parts: Sequence[object]) -> str:
    """The key of what `parts` decide, built by this version of the code."""
    text = "\n".join([deriving_fingerprint(), *(written(v) for v in parts)])
    return hashlib.sha256(text.encode()).hexdigest()


def load(key: str) -> tuple[Any, ...] | None:
    """What was stored under `key`, exactly as it was built, or None."""
    folder = cache_dir()
    if folder is None:
        return None
    try:
        text, data = pickle.loads((folder / key[:2] / key).read_bytes())
        # Unpickling calls each node's constructor, which would simplify again (a power of a Piecewise
        # folds into it): built as stored, then held to the text it was stored with.
        with sp.evaluate(False):
            found = pickle.loads(data)
    except Exception:  # missing, written by another rulegen, unreadable: built again
        return None
    return found if isinstance(found, tuple) and written(found) == text else None


def store(key: str, found: tuple[Any, ...]) -> None:
    folder = cache_dir()
    if folder is None:
        return
    target = folder / key[:2]
    try:
        target.mkdir(parents=True, exist_ok=True)
        entry = (written(found), pickle.dumps(found, protocol=pickle.HIGHEST_PROTOCOL))
        data = pickle.dumps(entry, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError, RecursionError, OSError):
        return  # an expression pickle cannot write, a read-only home: the build goes on uncached
    handle, temporary = tempfile.mkstemp(dir=target, prefix=".tmp-")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(temporary, target / key)
    except OSError:  # a full disk
        Path(temporary).unlink(missing_ok=True)


def kept(build: Callable[..., sp.Expr]) -> Callable[..., sp.Expr]:
    """`build`, an expression of sympy arguments, built once per process and arguments and kept on disk.

    The expressions are immutable: every caller gets the same one.
    """

    @functools.cache
    @functools.wraps(build)
    def wrapper(*args: Any, **kwargs: Any) -> sp.Expr:
        key = key_of((build.__module__, build.__qualname__, *args, *sorted(kwargs.items())))
        found = load(key)
        if found is not None and len(found) == 1 and isinstance(found[0], sp.Expr):
            return found[0]
        expr = build(*args, **kwargs)
        store(key, (expr,))
        return expr

    return wrapper
