"""The one bounded wait of the suite, for what nothing announces to the test.

Tests wait on events: the runtime's event stream, a call's state changes, a pipe's
lines, a process's exit. A few things observed give no signal to the test's process:

- a row another process appends to a SQLite file (a `tether run` process);
- a file a process of another program writes (an agent's shell, a tool running in the
  stdio host's process);
- a counter the runtime keeps without announcing it (`statistics().late_results`: a
  late result is dropped in silence, by design, S3).

For those, and only those, `wait_until` re-checks a condition until it holds. The bound
is asserted: when it passes, the test fails with what it waited for, never goes on.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    from collections.abc import Callable

RECHECK = 0.02
"""Seconds between two checks: short against every bound used, long against a check."""


def _timed_out(what: str, explain: Callable[[], object] | None) -> AssertionError:
    more = f": {explain()}" if explain is not None else ""
    return AssertionError(f"timed out waiting for {what}{more}")


def wait_until(
    check: Callable[[], bool],
    *,
    what: str,
    bound: float = 30.0,
    explain: Callable[[], object] | None = None,
) -> None:
    """Block until `check()` holds; fail the test after `bound` seconds.

    `what` names the condition in the failure; `explain` adds what it returns (the
    ledger, say). For synchronous tests watching another process.
    """
    deadline = time.monotonic() + bound
    while not check():
        if time.monotonic() > deadline:
            raise _timed_out(what, explain)
        time.sleep(RECHECK)


async def await_until(
    check: Callable[[], bool],
    *,
    what: str,
    bound: float = 10.0,
    explain: Callable[[], object] | None = None,
) -> None:
    """`wait_until` for async tests: the event loop runs between two checks."""
    with anyio.move_on_after(bound):
        while not check():  # noqa: ASYNC110 - nothing announces the condition
            await anyio.sleep(RECHECK)
        return
    raise _timed_out(what, explain)
