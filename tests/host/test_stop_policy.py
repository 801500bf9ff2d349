"""The stop-class table (spec 01): what a stop does to a started call of each class."""

from __future__ import annotations

from tether.host import StopClass
from tether.host._tool import OnStop


def test_every_class_has_one_row_as_spec_01_says() -> None:
    """READ_ONLY is abandoned at once, PROCESS terminated within the grace window,
    MUTATING and EXTENSION awaited; only a write is not told of the stop."""
    rows = {c: (c.policy.on_stop, c.policy.tells_tool) for c in StopClass}
    assert rows == {
        StopClass.READ_ONLY: (OnStop.ABANDON, True),
        StopClass.PROCESS: (OnStop.TERMINATE, True),
        StopClass.MUTATING: (OnStop.AWAIT, False),
        StopClass.EXTENSION: (OnStop.AWAIT, True),
    }
    abandoned = {c for c in StopClass if c.policy.abandons}
    assert abandoned == {StopClass.READ_ONLY, StopClass.PROCESS}
