"""A call's state in the executor moves as `CallState` allows, and a pending call's `why`
is made from its fields."""

from __future__ import annotations

from typing import Any

import pytest

from tether import StopClass
from tether.errors import UsageError
from tether.host._protocol import CallKey
from tether.runtime import CallState, PendingCall, PendingPhase
from tether.runtime._executor import Executor
from tether.runtime._ledger import Ledger


def test_a_call_moves_only_as_call_state_allows() -> None:
    """A tether choice: the call refuses a move the ledger would refuse, before the
    ledger is asked, and its row moves with it; staying in a state is no move, and a
    final state is never left."""
    ledger = Ledger()
    executor = Executor(ledger=ledger, grace=1.0, abort_bound=1.0, emit=print)
    call = executor.begin(
        CallKey("s", "c1", "Bash"), "t", StopClass.PROCESS, lambda _call: None, {}
    )
    call.move(CallState.RUNNING)
    call.move(CallState.RUNNING)
    with pytest.raises(UsageError, match="running -> queued"):
        call.move(CallState.QUEUED)
    call.move(CallState.ABORTING)
    call.move(CallState.ABORTED)
    with pytest.raises(UsageError, match="aborted -> running"):
        call.move(CallState.RUNNING)
    assert call.state is ledger.get("s", "c1").state is CallState.ABORTED


def _why(stop_class: StopClass, phase: PendingPhase, **particulars: Any) -> str:
    return PendingCall(
        call_id="c1", tool="T", stop_class=stop_class, phase=phase, **particulars
    ).why


@pytest.mark.parametrize("phase", list(PendingPhase))
def test_every_phase_reads_with_its_stop_class_first(phase: PendingPhase) -> None:
    """S6: the reason starts with the call's stop class in lower case, whatever its
    phase; the fields say the same to code."""
    why = _why(StopClass.MUTATING, phase)
    assert why.startswith("mutating: ")
    assert len(why) > len("mutating: ")


def test_a_phase_s_particulars_are_in_its_text() -> None:
    """spec 01: a grace window counts down in whole seconds, and a withdrawn question
    and the trees being reaped are named."""
    assert (
        _why(StopClass.PROCESS, PendingPhase.TERMINATING, seconds_left=3.0)
        == "process: terminating, at most 3 s left"
    )
    assert _why(
        StopClass.MUTATING, PendingPhase.STARTED, question="Overwrite?"
    ).endswith("; its question was withdrawn (Overwrite?)")
    assert "the 2 process trees" in _why(
        StopClass.READ_ONLY, PendingPhase.REAPING, trees=2
    )
