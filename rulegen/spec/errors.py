"""Source locations and the errors that carry them.

Every stage reports a problem in a rule file as `file:line:col: message`, so
each value read from YAML keeps where it came from, and an error raised about
it names that place.  Errors are collected, not raised one by one, so that a
user sees every problem of every file in one run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, order=True)
class Loc:
    """A position in a rule file; line and col count from 1."""

    file: str
    line: int = 1
    col: int = 1

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"

    def offset(self, line: int, col: int) -> Loc:
        """The position of (line, col) of a text that starts at this location.

        `line` counts from 1 and `col` from 0, as `ast` reports them.  A block
        scalar's lines all start at the same column (its indentation), which
        is where a loader places the text's location; a one-line scalar is
        offset along its own line.
        """
        return Loc(self.file, self.line + line - 1, self.col + col)


class SpecError(Exception):
    """One problem in a rule file, at a known place."""

    def __init__(self, loc: Loc, message: str) -> None:
        super().__init__(f"{loc}: {message}")
        self.loc = loc
        self.message = message

    # An exception pickles as its class called with `args`, which here is the
    # one formatted string; build workers send these back to the parent.
    def __reduce__(self) -> tuple[type[SpecError], tuple[Loc, str]]:
        return type(self), (self.loc, self.message)


class SpecErrors(Exception):
    """Every problem found in one pass, in file order."""

    def __init__(self, errors: Iterable[SpecError]) -> None:
        self.errors = sorted(errors, key=lambda e: e.loc)
        super().__init__("\n".join(str(e) for e in self.errors))

    def __reduce__(self) -> tuple[type[SpecErrors], tuple[list[SpecError]]]:
        return type(self), (self.errors,)


class _HasLocation(Protocol):
    name: str
    loc: Loc


@contextmanager
def in_stage(rule: _HasLocation) -> Iterator[Callable[[str], None]]:
    """Name the rule, and the stage it was in, when a compiler stage fails on it (as torchgen's `context()`).

    Yields a function that records the stage entered (`"planning"`).  A
    SpecErrors passes as it is; anything else is a bug of rulegen's, and
    becomes a SpecErrors at the rule so that the user gets `file:line:col`
    and which rule to report, never a bare traceback.  Put it outside the
    sympy time limit, which turns running out of time or stack into
    refusals of its own.
    """
    stage = ["reading"]

    def enter(name: str) -> None:
        stage[0] = name

    try:
        yield enter
    except SpecErrors:
        raise
    except Exception as exc:
        message = (
            f"internal error while {stage[0]} rule {rule.name!r}: {type(exc).__name__}: {exc}"
            " (a rulegen bug: please report it with this rule file)"
        )
        raise SpecErrors([SpecError(rule.loc, message)]) from exc
