"""What a check finds: an outcome per (rule, check), and the comparison its numbers go through."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

Status = Literal["pass", "fail", "n/a"]


RTOL, ATOL = 1e-7, 1e-9


@dataclass(frozen=True)
class Outcome:
    rule: str
    check: str
    status: Status
    detail: str = ""


def brief(message: str, limit: int = 600) -> str:
    """`message` on one line, cut (if longer than `limit`) only where a sentence ends.

    A message whose first line ends "but got:" says what it got on the
    next: its lines are joined, never dropped.  Past `limit`, the text
    keeps every whole sentence that fits, and the first one always.
    """
    text = re.sub(r"\s*\n\s*", " ", message.strip())
    if len(text) <= limit:
        return text
    ends = [m.end() for m in re.finditer(r"[.;!?](?=\s)", text)]
    fitting = [e for e in ends if e <= limit]
    cut = fitting[-1] if fitting else next(iter(ends), len(text))
    return text if cut >= len(text) else f"{text[:cut]} (...)"


class CheckFailed(Exception):
    """A check's finding, with the numbers that show it."""


class NotApplicable(Exception):
    """Why a check says nothing about this rule."""


def compare(
    name: str,
    got: Any,
    expected: Any,
    rtol: float,
    atol: float,
    where: Callable[[tuple[int, ...], tuple[int, ...]], str] | None = None,
) -> None:
    """Fail with where and by how much `got` differs from `expected`.

    `where(index, shape)` names the inputs at the index of the worst entry
    (`Subject.where`): the message then says `at x=0.5, y=2 (index (1,))`.
    """
    # Complex values are compared as complex numbers: |got - expected| against |expected|.
    kind = np.complex128 if np.iscomplexobj(got) or np.iscomplexobj(expected) else np.float64
    got_a = np.asarray(got, dtype=kind)
    exp_a = np.asarray(expected, dtype=kind)
    if got_a.shape != exp_a.shape:
        raise CheckFailed(f"{name}: shape {got_a.shape}, expected {exp_a.shape}")
    # Equal infinities agree (inf - inf is nan), and so do two nans.
    same = (got_a == exp_a) | (np.isnan(got_a) & np.isnan(exp_a))
    with np.errstate(invalid="ignore"):
        close = np.isfinite(exp_a) & (np.abs(got_a - exp_a) <= atol + rtol * np.abs(exp_a))
        bad = ~same & ~close
    if bad.any():
        index = np.unravel_index(int(np.argmax(np.where(bad, np.abs(got_a - exp_a), -1.0))), bad.shape)
        error = np.abs(got_a - exp_a)[index]
        position = tuple(int(i) for i in index)
        inputs = where(position, got_a.shape) if where is not None else ""
        at = f"at {inputs} (index {position})" if inputs else f"at index {position}"
        raise CheckFailed(
            f"{name}: {at} expected {exp_a[index]:.17g}, "
            f"got {got_a[index]:.17g} (abs error {error:.3g}; {int(bad.sum())} of {bad.size} entries off)"
        )
