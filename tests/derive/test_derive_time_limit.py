"""The guard against a sympy step that hangs counts the CPU time the build spends, not the wall clock: on a
machine other work shares, a rule's wall time grows with the load, and the load would decide which rules build."""

from __future__ import annotations

import time

import pytest

from rulegen.derive.partials import sympy_time_limit
from rulegen.spec.errors import Loc, SpecErrors

LOC = Loc("rules/slow.yaml", 3, 5)


@pytest.mark.unit
def test_waiting_past_the_limit_is_not_a_hang():
    # Waiting is what a process does while other processes take the CPU: it spends none of its own.
    with sympy_time_limit(0.2, LOC):
        time.sleep(0.6)


@pytest.mark.unit
def test_computing_past_the_limit_refuses_the_rule_at_its_place():
    with pytest.raises(SpecErrors) as raised, sympy_time_limit(0.2, LOC):
        spun = time.process_time() + 5.0
        while time.process_time() < spun:
            pass
    (error,) = raised.value.errors
    assert error.loc == LOC and "sympy needs more than 0.2 s" in str(error)
