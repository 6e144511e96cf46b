"""mpmath's values of an exact reference, kept on disk: the cells that ask for the same values compute them once.

The special-value cells (tests/package/test_conformance.py) ask mpmath for a function's value and derivatives at
each point of a dtype, at up to 364 digits, and at the one-sided stand-ins for a signed zero (1e-450, 1e-900):
beta's partials, digamma at hundreds of digits, took 32 s of CPU per cell.  Each backend of a dtype asks for the
same values, and float32's cells ask for many of float64's (nan, ±0, ±inf, the stand-ins and their ladders);
memoised in one process, they were computed again by the other xdist worker and by every later run.  Here they are
computed once and read back by every cell, worker and run that asks for them.

A reference's values are kept in one file, named by a hash of what decides them: the reference's identity (its sympy
expression written out in full, or the source of the function that computes it), and the code and libraries that
evaluate it (rulegen's derive fingerprint: sympy, numpy and mpmath's versions, the registry's mpmath
implementations).  An entry is keyed by the working precision and the arguments' exact binary values, so it is read
back only where mpmath would compute it again.  A file is written whole (`os.replace`), merged under a lock with
what another worker wrote meanwhile; one that cannot be read is a miss.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
from collections.abc import Callable
from pathlib import Path

import mpmath

#: The folder of the kept values, or "off" for none; tests/conftest.py defaults it to one in the temporary folder.
CACHE_ENV = "RULEGEN_TESTS_REFERENCE_CACHE"

#: What a reference raises where it has no value, kept as a value is: `_exact` reads each as no value.
NO_VALUE = (ValueError, ZeroDivisionError, OverflowError, TypeError)


def cache_dir() -> Path | None:
    setting = os.environ.get(CACHE_ENV, "")
    if not setting or setting.lower() == "off":
        return None
    return Path(setting)


def identity_of(*parts: str) -> str:
    """The name of a reference's file: a hash of what decides its values (with rulegen's derive fingerprint)."""
    from rulegen.derive.stored import deriving_fingerprint

    text = "\n".join([deriving_fingerprint(), f"mpmath backend {mpmath.libmp.BACKEND}", *parts])
    return hashlib.sha256(text.encode()).hexdigest()


def _exactly(value: object) -> object:
    """`value` as a key: an mpf by its exact binary value (sign, mantissa, exponent, bits), not at a precision."""
    if isinstance(value, mpmath.mpf):
        sign, mantissa, exponent, bits = value._mpf_
        return ("mpf", int(sign), int(mantissa), int(exponent), int(bits))
    if isinstance(value, mpmath.mpc):
        return ("mpc", _exactly(value.real), _exactly(value.imag))
    return (type(value).__name__, repr(value))


class KeptReference:
    """`f`, each of its values at a precision and arguments (or what it raised of `NO_VALUE`) read from its file or
    computed and kept for `save`."""

    def __init__(self, identity: str, f: Callable[..., object]) -> None:
        self.f = f
        folder = cache_dir()
        self.path = None if folder is None else folder / identity[:2] / identity
        self.values: dict[object, object] | None = None
        self.new: dict[object, object] = {}
        self.computed = 0

    def _read(self) -> dict[object, object]:
        if self.path is None:
            return {}
        try:
            found = pickle.loads(self.path.read_bytes())
        except Exception:  # missing, cut short, written by another layout: computed again
            return {}
        return found if isinstance(found, dict) else {}

    def __call__(self, *args: object) -> object:
        if self.values is None:
            self.values = self._read()
        key = (mpmath.mp.prec, tuple(_exactly(a) for a in args))
        if key not in self.values:
            self.computed += 1
            try:
                found: object = self.f(*args)
            except NO_VALUE as exc:
                # As the first of NO_VALUE's types it is (mpmath's own subclasses included), whose pickle is its
                # message alone.
                found = next(kind for kind in NO_VALUE if isinstance(exc, kind))(str(exc))
            self.values[key] = self.new[key] = found
        found = self.values[key]
        if isinstance(found, BaseException):
            raise found
        return found

    def save(self) -> None:
        """The values computed since the last save merged into the file, with those another process wrote."""
        if self.path is None or not self.new:
            return
        from filelock import FileLock

        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with FileLock(f"{self.path}.lock"):
                merged = {**self._read(), **self.new}
                data = pickle.dumps(merged, protocol=pickle.HIGHEST_PROTOCOL)
                handle, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=".tmp-")
                try:
                    with os.fdopen(handle, "wb") as file:
                        file.write(data)
                    os.replace(temporary, self.path)
                except OSError:
                    Path(temporary).unlink(missing_ok=True)
                    raise
        except (OSError, pickle.PicklingError, TypeError, AttributeError):
            return  # a read-only or full disk, a value pickle cannot write: the next run computes it again
        self.new = {}
