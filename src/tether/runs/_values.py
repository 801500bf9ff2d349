"""The values of the run coordinator: states, claims, lanes, receipts, ledger rows.

All frozen; the store hands them out and takes them back. The two state enums are the
spec's fixed vocabularies (spec 03, observable results): their values travel in JSON.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import final

import attrs

from ..errors import TetherError

__all__ = (
    "LANE_MOVES_INTO",
    "RUN_MOVES_INTO",
    "AgentSession",
    "Claim",
    "Event",
    "LaneRow",
    "LaneState",
    "LaneStatistics",
    "QueueItem",
    "Receipt",
    "RunRow",
    "RunState",
    "RunStatistics",
    "StaleClaim",
    "refused_move",
)


class RunState(enum.StrEnum):
    """A run's state; the stores keep its moves to `RUN_MOVES_INTO`.

    A run that is `held` is paused by its stop (a read answered HOLD); a lane that is
    `held` (`LaneState.HELD`, and so a run `halt-held`) is kept for a person because
    its save failed. The values are the spec's and stay as they are.

    ```
    running <-> held                    a read of the stop holds, and reads clear again
    held -> held                        it holds for another reason
    running | held -> halting           a stop (or a Ctrl-C) is taken
    halting -> halted | halt-held       every lane halted (or one's save failed)
    running | held -> done              nothing is left that it may claim
    running | held | halting -> dead    the restart path found its process gone (or it
                                        was killed by a second Ctrl-C)
    halted | halt-held | dead
                      -> taken-over     a take-over reserved its work
    ```

    taken-over and done are final. A store refuses any other move (`StoreError`): a run
    a peer found dead cannot come back by writing its own state, and two take-overs of
    one run cannot both mark it.
    """

    RUNNING = "running"
    """Making moves."""
    HELD = "held"
    """Paused by the stop: a read of it answered HOLD (neither clear nor stopped). No
    move is made and nothing is let go until a read is clear again."""
    HALTING = "halting"
    """A stop was taken: agents finish their calls, lanes are saved, claims released."""
    HALTED = "halted"
    """Every lane saved and released; stays so after a lift until a take-over."""
    HALT_HELD = "halt-held"
    """Halted, except a lane whose save failed (`LaneState.HELD`) keeps its worktree
    and claims."""
    DONE = "done"
    """Every item it could claim is finished."""
    DEAD = "dead"
    """Its process is gone or its leases expired (the restart path found it)."""
    TAKEN_OVER = "taken-over"
    """Another run reserved its work."""


ACTIVE_RUN_STATES = frozenset({RunState.RUNNING, RunState.HELD, RunState.HALTING})
"""States in which a run's process should be alive."""

RUN_MOVES_INTO: dict[RunState, frozenset[RunState]] = {
    RunState.RUNNING: frozenset({RunState.HELD}),
    RunState.HELD: frozenset({RunState.RUNNING, RunState.HELD}),
    RunState.HALTING: frozenset({RunState.RUNNING, RunState.HELD}),
    RunState.HALTED: frozenset({RunState.HALTING}),
    RunState.HALT_HELD: frozenset({RunState.HALTING}),
    RunState.DONE: frozenset({RunState.RUNNING, RunState.HELD}),
    RunState.DEAD: ACTIVE_RUN_STATES,
    RunState.TAKEN_OVER: frozenset(
        {RunState.HALTED, RunState.HALT_HELD, RunState.DEAD}
    ),
}
"""For each state a run may be moved to, the states it may be moved from."""


class LaneState(enum.StrEnum):
    """A lane's state; the stores keep its moves to `LANE_MOVES_INTO`.

    ```
    open <-> in-call                 an agent starts in it, and ends
    open | in-call -> done           its last stage ended, or it failed (or its item
                                     was found finished by the restart path)
    open | in-call -> saved          saved aside (a halt, a kill, a fenced claim, the
                                     restart path); its claim is not released yet
    open | in-call -> held           its save failed: worktree and claim kept
    held -> held | saved | done      a retry failed again, or saved it
    saved -> halted                  its claim released
    open | in-call | held -> halted  nothing to save: it never got a directory
    ```

    done and halted are final. A store refuses any other move (`StoreError`): two
    processes acting on one lane at once cannot leave it in a state neither meant.
    """

    OPEN = "open"
    """Has a worktree and a claim; between agents."""
    IN_CALL = "in-call"
    """An agent is running in it."""
    SAVED = "saved"
    """Its uncommitted work is saved aside; its claim is not yet released."""
    HALTED = "halted"
    """Saved aside and released."""
    HELD = "held"
    """Kept for a person: its save failed, so its worktree and claim are kept (not a
    pause, as a run's `RunState.HELD` is)."""
    DONE = "done"
    """Every stage ran; its branch is left for the person."""


_ACTIVE = (LaneState.OPEN, LaneState.IN_CALL)
LANE_MOVES_INTO: dict[LaneState, frozenset[LaneState]] = {
    LaneState.OPEN: frozenset({LaneState.IN_CALL}),
    LaneState.IN_CALL: frozenset({LaneState.OPEN}),
    LaneState.DONE: frozenset({*_ACTIVE, LaneState.HELD}),
    LaneState.SAVED: frozenset({*_ACTIVE, LaneState.HELD}),
    LaneState.HELD: frozenset({*_ACTIVE, LaneState.HELD}),
    LaneState.HALTED: frozenset({*_ACTIVE, LaneState.HELD, LaneState.SAVED}),
}
"""For each state a lane may be moved to, the states it may be moved from."""


class StaleClaim(TetherError):
    """A lane's claim is no longer current (re-claimed with a newer epoch, or released).

    The lane's receipt, renewal, release or finish is refused.
    """


@final
@attrs.frozen(kw_only=True)
class Claim:
    """A lease on a work item, fenced by its epoch."""

    item: str
    """The work item."""
    run: str
    """The owner run."""
    lane: str
    """The owner lane."""
    epoch: int
    """Grows with each take; only the current epoch may act."""
    expires: float
    """Wall-clock time (seconds since the epoch) after which the lease is expired."""
    host: str
    """Host name of the owner."""
    pid: int
    """Process id of the owner."""


@final
@attrs.frozen(kw_only=True)
class QueueItem:
    """A work item in the store."""

    id: str
    """Unique in the store."""
    brief: str
    """What to do."""
    state: str
    """`queued`, `done` or `failed`."""
    claimed_by: str | None = None
    """The run whose claim it is, if any."""


@final
@attrs.frozen(kw_only=True)
class RunRow:
    """A run as the store knows it."""

    id: str
    """`run_...`."""
    state: RunState
    """See `RunState`."""
    host: str
    """Where its process runs."""
    pid: int
    """Its process id."""
    pid_start: float
    """Its process's start time (as psutil reports it), to tell a recycled pid."""
    started_at: float
    """Wall-clock time it started."""
    plan: str
    """The plan file's path."""
    repo: str
    """The repository its lanes branch from."""
    takeover_of: str | None = None
    """The run whose work it took over."""
    expires: float | None = None
    """Until when its last heartbeat says it lives, on the store's clock (None before
    its first); another host judges it by this and its claims' leases."""


@final
@attrs.frozen(kw_only=True)
class LaneRow:
    """A lane as the store knows it."""

    id: str
    """`lane_...`."""
    run: str
    """Its run."""
    item: str
    """Its work item."""
    state: LaneState
    """See `LaneState`."""
    branch: str
    """Its git branch."""
    worktree: str
    """Its worktree's path."""
    stage: int = 0
    """Index of the next stage to hand out."""
    saved_ref: str | None = None
    """`refs/tether/saved/<run>/<lane>` once saved aside."""
    saved_commit: str | None = None
    """The commit the saved ref points at."""
    note: str | None = None
    """Why it is `held` (its save failed) or failed, if it is."""
    stage_name: str | None = None
    """The name of the stage it started last; None before its first."""
    session: AgentSession | None = None
    """The agent session it recorded last (`Store.record_session`), if any."""
    held_reason: str | None = None
    """Why its last save failed, if one did: what the lane reports once it is
    `LaneState.HELD` (the name is the stores' column's)."""


@final
@attrs.frozen(kw_only=True)
class Receipt:
    """What an agent handed back when its call ended."""

    run: str
    """Its run."""
    lane: str
    """Its lane."""
    item: str
    """Its work item."""
    stage: str
    """The stage's name."""
    exit_status: int
    """The agent's exit code (negative: a signal)."""
    log_tail: str
    """The end of its output."""
    commits: tuple[str, ...] = ()
    """Commits it added to the lane's branch, oldest first."""
    at: float = 0.0
    """Wall-clock time recorded."""


@final
@attrs.frozen
class AgentSession:
    """A stage agent's session, recorded on its lane for a take-over to resume.

    The store keeps its parts as columns of the lane (`Store.record_session`), so a
    stage named `write tests` or a transcript path with a space reads back as written.
    """

    stage: str
    """The stage's name."""
    session: str
    """The agent's session id."""
    transcript: Path | None = None
    """The builtin agent's transcript; None for a preset (its CLI keeps its session)."""


@attrs.frozen(kw_only=True)
class Event:
    """One row of the ledger."""

    seq: int
    """Order of recording in the store."""
    at: float
    """Wall-clock time."""
    run: str
    """The run it belongs to."""
    lane: str | None
    """The lane, if any."""
    kind: str
    """What happened (`run-start`, `claim`, `stage-start`, `receipt`, `saved`, ...)."""
    detail: str = ""
    """A line of detail."""


@final
@attrs.frozen(kw_only=True)
class LaneStatistics:
    """What one lane of a live run is doing now (`Run.statistics()`)."""

    item: str
    """The work item."""
    lane: str
    """The lane id."""
    stage: str | None
    """The stage its agent works on now; None between stages (opening, saving)."""
    elapsed: float
    """Seconds in that stage (between stages: since the last one started, or since
    the lane opened)."""
    log: Path
    """The lane log its agents write to."""
    note: str | None = None
    """What the lane waits for (a usage window), if anything."""


@final
@attrs.frozen(kw_only=True)
class RunStatistics:
    """A live run's lanes and why its stop pauses it, for a view that refreshes."""

    lanes: tuple[LaneStatistics, ...]
    """The lanes open now, in the order they opened."""
    stop_hold: str | None = None
    """Why a read of the stop holds the run (`RunState.HELD`: paused), if it does."""
    halting: bool = False
    """Whether it took a stop and is halting."""


def refused_move(key: str, now: str | None, to: LaneState | RunState) -> str:
    """The message of a move a store refused (`LANE_MOVES_INTO`, `RUN_MOVES_INTO`)."""
    what = "lane" if isinstance(to, LaneState) else "run"
    if now is None:
        return f"{what} {key} is not in the store: it cannot become {to.value}"
    return (
        f"{what} {key} is {now}: it cannot become {to.value} (see {type(to).__name__})"
    )
