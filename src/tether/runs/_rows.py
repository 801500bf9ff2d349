"""Rows read from either backend, as values: one column order for SQLite and PostgreSQL.

Both stores select these columns in this order, so a row (a tuple from either driver)
turns into its value here, once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._values import (
    AgentSession,
    Claim,
    Event,
    LaneRow,
    LaneState,
    Receipt,
    RunRow,
    RunState,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = (
    "CLAIM_COLS",
    "EVENT_COLS",
    "LANE_COLS",
    "RECEIPT_COLS",
    "RUN_COLS",
    "claim",
    "event",
    "lane",
    "lane_values",
    "receipt",
    "run",
    "session_values",
)

RUN_COLS = (
    "id, state, host, pid, pid_start, started_at, plan, repo, takeover_of, expires"
)
CLAIM_COLS = "item, run, lane, epoch, expires, host, pid"
LANE_COLS = (
    "id, run, item, state, branch, worktree, stage, saved_ref, saved_commit, note, "
    "stage_name, session_stage, session_id, session_transcript, held_reason"
)
RECEIPT_COLS = "run, lane, item, stage, exit_status, log_tail, commits, at"
EVENT_COLS = "seq, at, run, lane, kind, detail"


def run(r: Sequence[Any]) -> RunRow:
    """A `RUN_COLS` row."""
    return RunRow(
        id=str(r[0]),
        state=RunState(str(r[1])),
        host=str(r[2]),
        pid=int(r[3]),
        pid_start=float(r[4]),
        started_at=float(r[5]),
        plan=str(r[6]),
        repo=str(r[7]),
        takeover_of=None if r[8] is None else str(r[8]),
        expires=None if r[9] is None else float(r[9]),
    )


def claim(r: Sequence[Any]) -> Claim:
    """A `CLAIM_COLS` row."""
    return Claim(
        item=r[0], run=r[1], lane=r[2], epoch=r[3], expires=r[4], host=r[5], pid=r[6]
    )


def lane(r: Sequence[Any]) -> LaneRow:
    """A `LANE_COLS` row."""
    return LaneRow(
        id=r[0],
        run=r[1],
        item=r[2],
        state=LaneState(r[3]),
        branch=r[4],
        worktree=r[5],
        stage=r[6],
        saved_ref=r[7],
        saved_commit=r[8],
        note=r[9],
        stage_name=r[10],
        session=None
        if r[12] is None
        else AgentSession(r[11], r[12], None if r[13] is None else Path(r[13])),
        held_reason=r[14],
    )


def lane_values(lane: LaneRow) -> dict[str, Any]:
    """A lane's `LANE_COLS` by name, as both stores insert them."""
    session = lane.session
    return {
        "id": lane.id,
        "run": lane.run,
        "item": lane.item,
        "state": lane.state.value,
        "branch": lane.branch,
        "worktree": lane.worktree,
        "stage": lane.stage,
        "saved_ref": lane.saved_ref,
        "saved_commit": lane.saved_commit,
        "note": lane.note,
        "stage_name": lane.stage_name,
        **session_values(session),
        "held_reason": lane.held_reason,
    }


def session_values(session: AgentSession | None) -> dict[str, str | None]:
    """An agent session's lane columns by name (all None for none)."""
    if session is None:
        return {"session_stage": None, "session_id": None, "session_transcript": None}
    transcript = session.transcript
    return {
        "session_stage": session.stage,
        "session_id": session.session,
        "session_transcript": None if transcript is None else str(transcript),
    }


def receipt(r: Sequence[Any]) -> Receipt:
    """A `RECEIPT_COLS` row (commits kept as a JSON list)."""
    return Receipt(
        run=r[0],
        lane=r[1],
        item=r[2],
        stage=r[3],
        exit_status=r[4],
        log_tail=r[5],
        commits=tuple(json.loads(r[6])),
        at=r[7],
    )


def event(r: Sequence[Any]) -> Event:
    """An `EVENT_COLS` row."""
    return Event(seq=r[0], at=r[1], run=r[2], lane=r[3], kind=r[4], detail=r[5])
