"""How the restart path judges whether a run is alive: by its own lease first, and by
its process when it was recorded on this machine."""

from __future__ import annotations

import os
import socket

from tether.runs._liveness import _leases_expired, process_alive, process_start
from tether.runs._values import RunRow, RunState


def _run(expires: float | None) -> RunRow:
    return RunRow(
        id="run_x",
        state=RunState.RUNNING,
        host="elsewhere/1",
        pid=1,
        pid_start=0.0,
        started_at=0.0,
        plan="plan.toml",
        repo=".",
        expires=expires,
    )


class _NoClaims:
    def claims(self, run: str) -> list[object]:
        return []


def test_a_run_is_judged_by_its_own_lease_before_any_claim() -> None:
    """A run with no claim yet is alive from its first row while its lease holds."""
    store = _NoClaims()
    assert not _leases_expired(store, _run(160.0), now=100.0)  # type: ignore[arg-type]
    assert _leases_expired(store, _run(99.0), now=100.0)  # type: ignore[arg-type]


def test_a_run_recorded_with_the_bare_host_name_is_judged_by_its_process_here() -> None:
    """The host name alone names this machine: its pid is looked up here; another
    host's is not (None: judged by leases)."""
    me = f"{socket.gethostname()}/some-machine"
    mine = process_alive(socket.gethostname(), os.getpid(), process_start(), here_id=me)
    assert mine is True
    assert process_alive("other", os.getpid(), process_start(), here_id=me) is None
