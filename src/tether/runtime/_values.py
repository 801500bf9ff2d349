"""Frozen values the runtime hands out: results, abort reports and events."""

from __future__ import annotations

import enum
import math
from typing import TypeAlias, assert_never

import attrs

from ..errors import ErrorCode
from ..host import AbortSource, StopClass
from ._ledger import CallRecord, CallState

__all__ = (
    "AbortReport",
    "CallChanged",
    "PendingCall",
    "PendingPhase",
    "RuntimeEvent",
    "StopRequest",
    "ToolProgress",
    "ToolResult",
    "TurnSettled",
)


@attrs.frozen(kw_only=True, slots=False)  # built per call: see `CallKey`
class ToolResult:
    """What a finished call returned; `is_error` with a `code` when it failed."""

    output: str
    is_error: bool = False
    code: ErrorCode | None = None
    call_id: str = ""
    tool: str = ""


@attrs.frozen(kw_only=True)
class StopRequest:
    """Who stopped a turn, why, and when (in the runtime's clock)."""

    source: AbortSource
    reason: str | None
    at: float

    def __str__(self) -> str:
        return f"stopped by {self.source}" + (f": {self.reason}" if self.reason else "")


class PendingPhase(enum.StrEnum):
    """Where a call still running stands, and what its end waits for.

    Each phase belongs to a moment of the stop (spec 01): before it (`RUNNING`); while
    the host is asked (`STOP_SENT`, `ASKING_IF_STARTED`, `ASKING_ABOUT_PROCESSES`); after
    a silent host (`STOP_UNCONFIRMED`, `START_UNCONFIRMED`); waiting for a real end
    (`STARTED`, `FINISHED`, `TERMINATING`, `REAPING`); after the grace window or a second
    stop (`KILL_SENT`, `KILLED`, `ENDING_UNKNOWN`); and after the host was lost
    (`HOST_LOST`, `SURVIVED_KILL`).
    """

    RUNNING = "running"
    """No stop was requested for the call."""
    STOP_SENT = "stop_sent"
    """The stop is on its way to the host; its answer decides what comes next."""
    ASKING_IF_STARTED = "asking_if_started"
    """A READ_ONLY call not seen running: only the host can say whether it started."""
    ASKING_ABOUT_PROCESSES = "asking_about_processes"
    """A READ_ONLY call stopped while running (its caller is answered): the host is
    asked whether it started processes that are still being killed."""
    START_UNCONFIRMED = "start_unconfirmed"
    """A READ_ONLY call whose caller was answered before the host said whether it
    started (the host did not answer within the bound)."""
    STOP_UNCONFIRMED = "stop_unconfirmed"
    """The host did not answer the stop within the bound: its result decides."""
    REAPING = "reaping"
    """Stopped; waiting for the `trees` process trees it started to be reaped (S13)."""
    FINISHED = "finished"
    """The host had finished the call when the stop came; its result is on the way."""
    TERMINATING = "terminating"
    """A PROCESS call in its grace window: `seconds_left` before its tree is killed."""
    STARTED = "started"
    """A started MUTATING or EXTENSION call (or an unknown tool's): its real result is
    waited for; `question` is the question to the person the stop withdrew, if any."""
    KILL_SENT = "kill_sent"
    """The grace window closed: the kill was sent, the host has not confirmed it."""
    KILLED = "killed"
    """Killed; waiting for the process tree to be reaped."""
    ENDING_UNKNOWN = "ending_unknown"
    """A second stop gave up on a silent server: the call ended `end_unknown` and the
    host is ending it."""
    HOST_LOST = "host_lost"
    """The host went away; waiting for the processes it started to be reaped."""
    SURVIVED_KILL = "survived_kill"
    """The host went away and the processes `survivors` survived a kill."""


def shown_seconds(seconds: float) -> float:
    """Seconds left as a report shows them: rounded up, whole seconds above one."""
    if seconds > 1:
        return float(math.ceil(seconds - 1e-6))
    return math.ceil(seconds * 100 - 1e-6) / 100


@attrs.frozen(kw_only=True)
class PendingCall:
    """A call that is still running after a stop: its class, its phase, and why.

    `why` is the text a person reads, made from the other fields; it starts with the
    stop class in lower case (spec 01, S6). Code reads `stop_class` and `phase`.
    """

    call_id: str
    tool: str
    stop_class: StopClass
    """The class the stop treats the call by (a tool the runtime does not know is
    treated as MUTATING)."""
    phase: PendingPhase
    seconds_left: float | None = None
    """`TERMINATING`: the grace window's seconds left, as shown (see `why`)."""
    trees: int = 0
    """`REAPING`: process trees the call started that are still being reaped."""
    question: str = ""
    """`STARTED`: the question to the person the stop withdrew ("": none)."""
    survivors: tuple[int, ...] = ()
    """`SURVIVED_KILL`: the process ids left alive after the kill."""
    why: str = attrs.field(init=False)
    """Why the call still runs: `process: terminating, at most 3 s left`."""

    @why.default
    def _why(self) -> str:
        return f"{self.stop_class}: {_what(self)}"


def _what(p: PendingCall) -> str:
    match p.phase:
        case PendingPhase.RUNNING:
            return "running, no stop requested"
        case PendingPhase.STOP_SENT:
            return "stop sent, waiting for the host to answer"
        case PendingPhase.ASKING_IF_STARTED:
            return "stop sent, asking the host whether it started"
        case PendingPhase.ASKING_ABOUT_PROCESSES:
            return "stopped, asking the host about its processes"
        case PendingPhase.START_UNCONFIRMED:
            return "stopped, the host has not said whether it started"
        case PendingPhase.STOP_UNCONFIRMED:
            return "stop not confirmed by the host, waiting for result"
        case PendingPhase.REAPING:
            trees = "tree" if p.trees == 1 else "trees"
            return f"stopped, waiting for the {p.trees} process {trees} it started to be reaped"
        case PendingPhase.FINISHED:
            return "finished, waiting for its result"
        case PendingPhase.TERMINATING:
            left = p.seconds_left or 0.0
            shown = f"{left:.0f}" if left > 1 else f"{left:g}"
            return f"terminating, at most {shown} s left"
        case PendingPhase.STARTED:
            # spec 01: a pending prompt is withdrawn by the stop.
            withdrawn = (
                f"; its question was withdrawn ({p.question})" if p.question else ""
            )
            return "started, waiting for result" + withdrawn
        case PendingPhase.KILL_SENT:
            return "kill sent, not confirmed by the host"
        case PendingPhase.KILLED:
            return "killed, waiting for the process tree to be reaped"
        case PendingPhase.ENDING_UNKNOWN:
            return "ended unknown, the host is ending the call"
        case PendingPhase.HOST_LOST:
            return "host lost, waiting for its processes to be reaped"
        case PendingPhase.SURVIVED_KILL:
            return f"host lost, processes {list(p.survivors)} survive a kill"
        case _:  # pragma: no cover - every phase is named above
            assert_never(p.phase)


@attrs.frozen(kw_only=True)
class AbortReport:
    """The truth about a turn when `Session.abort()` returned.

    `settled` is true only when the ledger says every call of the turn has settled;
    `pending` names each call still running and why; `calls` is the ledger's view of the
    turn at that moment, so the report and the ledger agree.
    """

    session_id: str
    turn_id: str | None
    source: AbortSource
    reason: str | None
    settled: bool
    pending: tuple[PendingCall, ...]
    calls: tuple[CallRecord, ...]
    elapsed: float
    """Seconds `abort()` took."""
    outliving: tuple[str, ...] = ()
    """Tools whose stopped calls' workers still run in the runtime's process (they
    ignore the stop), with their count: the calls have ended, the work has not."""

    def __str__(self) -> str:
        head = (
            f"turn {self.turn_id or '-'} {'settled' if self.settled else 'not settled'}"
        )
        head += f" ({self.source}{': ' + self.reason if self.reason else ''})"
        lines = [head]
        lines += [f"  {p.call_id} {p.tool}: {p.why}" for p in self.pending]
        lines += [f"  {line}" for line in self.outliving]
        return "\n".join(lines)


@attrs.frozen
class ToolProgress:
    """A call reported progress output."""

    session_id: str
    call_id: str
    tool: str
    text: str


@attrs.frozen
class CallChanged:
    """A call moved to another state in the ledger."""

    session_id: str
    call_id: str
    tool: str
    state: CallState
    code: ErrorCode | None
    settled: bool = False
    """Whether the call has settled (the last event of a call has it true)."""


@attrs.frozen
class TurnSettled:
    """`turn.settled`: no call of the turn can change anything any more."""

    session_id: str
    turn_id: str
    stopped: bool


RuntimeEvent: TypeAlias = ToolProgress | CallChanged | TurnSettled
