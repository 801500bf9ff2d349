"""The person's seat in the terminal: the runs of every account that honours their stop.

`tether status`, `tether runs` and `tether stop` show this account's runs (from its
ledger) beside the runs bound accounts published for it (`tether.runs._publish`), each
named by its account. Nothing here decides anything; a record that cannot be read is
said, never allowed to hide the rest.
"""

from __future__ import annotations

import os
import time
from datetime import datetime
from typing import Any, Final

from ..runs._publish import (
    FINAL_STATES,
    PublishUnreadable,
    Seat,
    account_name,
    published_runs,
    seats,
)

__all__ = (
    "STALE_AFTER",
    "all_runs",
    "progress_lines",
    "run_line",
    "seat_runs",
    "unfinished",
)

STALE_AFTER: Final = 60.0
"""Seconds without a rewrite after which a working run's record is said to be stale."""


def _age(record: dict[str, Any]) -> float | None:
    try:
        at = datetime.fromisoformat(str(record.get("updated_at")))
    except ValueError:
        return None
    return time.time() - at.timestamp()


def seat_runs(
    only: Seat | None = None,
) -> tuple[list[Seat], list[dict[str, Any]], list[str]]:
    """Every bound account's published runs, newest first, and what could not be read."""
    notes: list[str] = []
    try:
        found = seats() if only is None else [only]
    except PublishUnreadable as exc:
        return [], [], [f"the runs of bound accounts cannot be read: {exc}"]
    records: list[dict[str, Any]] = []
    for seat in found:
        try:
            mine = published_runs(seat)
        except PublishUnreadable as exc:
            notes.append(str(exc))
            continue
        for record in mine:
            if "error" in record:
                notes.append(f"{seat.account}: run {record['id']}: {record['error']}")
                continue
            age = _age(record)
            record["stale"] = bool(
                record.get("state") not in FINAL_STATES
                and age is not None
                and age > STALE_AFTER
            )
            records.append(record)
    return found, records, notes


def all_runs(
    own: list[dict[str, str]],
) -> tuple[list[dict[str, Any]], list[str]]:
    """This account's runs (`{"id", "state"}`) named by account, then the published ones."""
    me = account_name(os.geteuid())
    _, published, notes = seat_runs()
    return [{**row, "account": me} for row in own] + published, notes


def unfinished(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs that may still do something (not halted, done, dead or taken over)."""
    return [r for r in runs if r.get("state") not in FINAL_STATES]


def run_line(record: dict[str, Any]) -> str:
    """`<id> <state> (<account>)`, with what each working lane is at."""
    text = f"{record['id']} {record.get('state')} ({record.get('account')})"
    stages = [
        f"{lane.get('item')}: {lane.get('stage')}"
        for lane in record.get("lanes") or ()
        if lane.get("state") == "in-call" and lane.get("stage")
    ]
    if stages:
        text += " [" + ", ".join(stages) + "]"
    if record.get("stale"):
        text += f" (no word for more than {STALE_AFTER:g} s: is it still alive?)"
    return text


def _clock(at: object) -> str:
    if not isinstance(at, str):
        return "-"
    try:
        return datetime.fromisoformat(at).strftime("%H:%M:%S.%f")[:-3]
    except ValueError:
        return "?"


def progress_lines(record: dict[str, Any]) -> list[str]:
    """A stop's progress in a published run: seen, each call ended, saved, released, halted."""
    stop = record.get("stop")
    if not isinstance(stop, dict):
        return []
    lines = [
        f"  {record['id']} ({record.get('account')}): stop seen {_clock(stop.get('seen_at'))}"
        + (
            f", halted {_clock(stop.get('halted_at'))}"
            if stop.get("halted_at")
            else ", halting"
        )
    ]
    for lane in stop.get("lanes") or ():
        if not isinstance(lane, dict):
            continue
        steps = []
        if lane.get("in_call"):
            steps.append(f"call ended {_clock(lane.get('call_ended_at'))}")
        if lane.get("done_at"):
            lines.append(f"    {lane.get('item')}: " + ", ".join([*steps, "done"]))
            continue
        steps += [
            f"saved {_clock(lane.get('saved_at'))}",
            f"released {_clock(lane.get('released_at'))}",
            f"halted {_clock(lane.get('halted_at'))}",
        ]
        lines.append(f"    {lane.get('item')}: " + ", ".join(steps))
    return lines
