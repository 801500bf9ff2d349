"""The one mapping between a tether call's ledger state and an MCP task's status."""

from __future__ import annotations

from typing import get_args

import mcp_types
import pytest

from tether._mcptasks import (
    TERMINAL_STATUSES,
    CallStateValue,
    TaskStatus,
    call_state,
    task_status,
)
from tether.runtime import CallState


def test_the_mapping_knows_every_call_state_and_every_task_status() -> None:
    """The Literal sets stay equal to the ledger's states and the SDK's statuses."""
    assert set(get_args(CallStateValue)) == {s.value for s in CallState}
    assert set(get_args(TaskStatus)) == set(get_args(mcp_types.TaskStatus))


@pytest.mark.parametrize("state", list(CallState))
def test_a_call_is_working_until_its_final_state_says_otherwise(
    state: CallState,
) -> None:
    """spec 01 S6: a call being stopped (`aborting`) has not ended: `working`."""
    status = task_status(state)
    assert (status in TERMINAL_STATUSES) == state.is_final
    assert task_status(state.value) == status


def test_the_final_states_read_as_what_really_happened() -> None:
    """A tool's error is a result (`completed`), a stop is `cancelled`, an end never
    reported is `failed`; and the way back gives the same states."""
    table = {
        "succeeded": "completed",
        "failed": "completed",
        "aborted": "cancelled",
        "end_unknown": "failed",
    }
    assert {state: task_status(state) for state in table} == table
    assert call_state("completed") == "succeeded"
    assert call_state("completed", is_error=True) == "failed"
    assert call_state("cancelled") == "aborted"
    assert call_state("failed") == "failed"
    assert call_state("working") == call_state("input_required") == "running"
    assert call_state(None) == "end_unknown"
    with pytest.raises(ValueError, match="not a tether call state"):
        task_status("done")
