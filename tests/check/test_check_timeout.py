"""A check of hand-written code that never finishes fails, and its thread is stopped, not left running.

The thread of a timed-out check ran on beside the checks after it (on the same frameworks, taking a core),
until the process ended.
"""

from __future__ import annotations

import threading
import time

import pytest

from rulegen.check.against import _within
from rulegen.check.outcome import CheckFailed


def test_a_check_that_loops_forever_fails_and_its_thread_stops() -> None:
    calls = {"n": 0}

    def forever() -> str:
        while True:
            calls["n"] += 1

    before = set(threading.enumerate())
    with pytest.raises(CheckFailed, match=r"did not finish in 0 s .*; stopped"):
        _within(0.2, forever)
    left = [t for t in threading.enumerate() if t not in before]
    assert not left, left
    counted = calls["n"]
    time.sleep(0.05)
    assert calls["n"] == counted  # nothing runs on


def test_a_check_that_finishes_returns_its_detail_and_raises_its_error() -> None:
    assert _within(5, lambda: "fine") == "fine"

    def wrong() -> str:
        raise CheckFailed("wrong")

    with pytest.raises(CheckFailed, match="wrong"):
        _within(5, wrong)
