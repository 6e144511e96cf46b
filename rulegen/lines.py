"""Straight-line generated code, as the planners write it and the templates lay it out."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Assign:
    """`target = code`; with no target, the statement `code` (an in-place update)."""

    target: str
    code: str

    @property
    def line(self) -> str:
        return f"{self.target} = {self.code}" if self.target else self.code


@dataclass(frozen=True)
class Block:
    """Straight-line code: assignments, then the values it returns.

    `reads` are the names it reads that it does not assign: what a method
    running it must have at hand (saved, unpacked, passed).
    """

    lines: tuple[Assign, ...]
    results: tuple[str, ...]
    reads: frozenset[str] = frozenset()

    @property
    def result(self) -> str:
        return ", ".join(self.results)


__all__ = ["Assign", "Block"]
