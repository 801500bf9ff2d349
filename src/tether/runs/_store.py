"""The store interface both backends implement: embedded SQLite and PostgreSQL.

A store keeps the work items (the queue), the runs, their lanes, the claims with their
leases and epochs, the receipts and the ledger. Every method is synchronous and short:
one transaction each. Fencing is the store's job: a claim whose epoch is no longer
current is refused (`StaleClaim`) when it renews, records a receipt, releases or
finishes. This module does not know how a backend keeps its rows.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Protocol

from .._env import TetherEnv
from ._values import (
    AgentSession,
    Claim,
    Event,
    LaneRow,
    LaneState,
    QueueItem,
    Receipt,
    RunRow,
    RunState,
    StaleClaim,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ("Store", "crash_point", "stale")

_CRASH_ENV = TetherEnv.TEST_CRASH_AT


def crash_point(name: str) -> None:
    """Test-only: SIGKILL this process at the named point when `TETHER_TEST_CRASH_AT` names it.

    The crash tests use it to kill a run at chosen points (taking a claim, renewing,
    between a save and a release, during a take-over); it does nothing otherwise.
    """
    if os.environ.get(_CRASH_ENV) == name:
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


class Store(Protocol):
    """Runs, lanes, claims, receipts and the ledger of one account (or several machines)."""

    url: str
    """Where the store is (a file path or a URL), for messages."""

    def close(self) -> None:
        """Close the connection."""

    def now(self) -> float:
        """The store's clock (seconds since the epoch): leases are compared against it.

        One clock for every machine that shares the store, so a lease written by one
        host is judged expired by another on the same time line.
        """

    # -- the queue -------------------------------------------------------------------
    def add_item(self, item: str, brief: str) -> bool:
        """Queue a work item; False when an item of that id is already there."""

    def retry(self, item: str) -> bool:
        """Put a failed item back in the queue; False when it is not failed."""

    def items(self) -> list[QueueItem]:
        """Every work item, in the order they were added."""

    # -- runs ------------------------------------------------------------------------
    def create_run(self, run: RunRow) -> None:
        """Record a new run."""

    def set_run_state(self, run: str, state: RunState) -> None:
        """Record a run's new state.

        Raises:
            StoreError: the move is not one `RunState` allows from the run's state
                now (`RUN_MOVES_INTO`), or there is no such run.
        """

    def beat(self, run: str, lease: float) -> None:
        """The run's own heartbeat: it lives `lease` more seconds on the store's clock.

        A run that holds no claim (idle, between items) still shows it is alive.
        """

    def run(self, run: str) -> RunRow | None:
        """One run, or None."""

    def runs(self) -> list[RunRow]:
        """Every run, oldest first."""

    # -- claims ----------------------------------------------------------------------
    def take_claim(
        self,
        run: str,
        lane: str,
        *,
        only: Sequence[str] | None,
        host: str,
        pid: int,
        lease: float,
    ) -> Claim | None:
        """Atomically claim the first queued, unclaimed item (of `only`, if given).

        Returns None when nothing may be claimed.
        """

    def take_over_claim(
        self,
        item: str,
        run: str,
        lane: str,
        *,
        previous: str,
        host: str,
        pid: int,
        lease: float,
    ) -> Claim | None:
        """Claim `item` for a take-over: free, or still held by the run `previous`.

        The caller has checked that `previous` is halted or dead (the restart path).
        Returns None when another run holds it or it is finished.
        """

    def renew(self, claim: Claim, lease: float) -> Claim:
        """Extend a claim's lease.

        Raises:
            StaleClaim: the claim is no longer current.
        """

    def release(self, claim: Claim) -> None:
        """Give the item back to the queue.

        Raises:
            StaleClaim: the claim is no longer current.
        """

    def finish(self, claim: Claim, *, failed: bool = False) -> None:
        """Mark the item done (or failed) and drop the claim.

        Raises:
            StaleClaim: the claim is no longer current.
        """

    def claims(self, run: str | None = None) -> list[Claim]:
        """Claims held now (by `run`, if given)."""

    # -- lanes, receipts, ledger -------------------------------------------------------
    def add_lane(self, lane: LaneRow) -> None:
        """Record a new lane."""

    def update_lane(
        self,
        lane: str,
        *,
        state: LaneState | None = None,
        stage: int | None = None,
        saved: tuple[str, str] | None = None,
        note: str | None = None,
        stage_name: str | None = None,
        held_reason: str | None = None,
    ) -> None:
        """Change a lane's state, next stage, saved (ref, commit) or a fact of it.

        A save is also kept in the lane's list of saves (`saved_refs`).

        The facts: its note, the name of the stage it started (`stage_name`), why its
        save failed (`held_reason`).
        """

    def record_session(self, lane: str, session: AgentSession) -> None:
        """Record the agent session a lane's stage started, in place of any earlier.

        A take-over reads it back from the lane (`LaneRow.session`) to resume it.
        """

    def saved_refs(self, run: str) -> dict[str, list[str]]:
        """Per lane of `run`, the view ref of every save, oldest first.

        Every `update_lane(saved=...)` adds one; a lane never saved is absent.
        """

    def lanes(self, run: str) -> list[LaneRow]:
        """A run's lanes, in the order they opened."""

    def item_lanes(self, item: str) -> list[LaneRow]:
        """Every lane (of any run) that worked on `item`, in the order they opened."""

    def record_receipt(self, claim: Claim, receipt: Receipt) -> None:
        """Record an agent's receipt under a current claim.

        Raises:
            StaleClaim: the claim is no longer current.
        """

    def receipts(self, run: str) -> list[Receipt]:
        """A run's receipts, in order."""

    def log(
        self, run: str, kind: str, *, lane: str | None = None, detail: str = ""
    ) -> None:
        """Append a row to the ledger."""

    def events(self, run: str | None = None) -> list[Event]:
        """Ledger rows (of `run`, if given), in order."""


def stale(act: str, claim: Claim, current: tuple[int, str] | None) -> StaleClaim:
    """The refusal of `act` under `claim`, given the item's current (epoch, run) if any."""
    now = (
        "released" if current is None else f"held by {current[1]} at epoch {current[0]}"
    )
    return StaleClaim(
        f"{act} refused: the claim on {claim.item} at epoch {claim.epoch} is "
        f"no longer current ({now})"
    )
