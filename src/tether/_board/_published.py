"""The board's source for another account's runs: the records it publishes for the person.

An agents' account bound to honour the person's stop publishes each run's status record,
its lanes' last lines, the digest and the lanes' bundles in its own directory of the
shared folder (`tether.runs._publish`). `PublishedRuns` reads them with that module's
reader (one descriptor per file, owner and mode judged, bounded in size and time) and
shows them as `BoardSource` does. What a record says is data: its texts come through
`visible`, and are cleaned for a line here.

A lane's work reaches the person as a bundle, fetched into their own repository by
`tether fetch`; the board names it and does not open it.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, final

from ..runs._publish import (
    PublishUnreadable,
    digest_name,
    lines_name,
    published_runs,
    read_text,
)
from ..runs._tail import clean_line
from ._source import STORE_EVERY, LaneCard, RunCard, Step

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..runs._publish import Seat

__all__ = ("PublishedRuns",)

_LINE_BYTES = 64 << 10
"""Bytes of a lane's published lines read for its last line."""


def _at(text: Any) -> float | None:
    """A record's ISO 8601 time as seconds since the epoch; None when it is not one."""
    if not isinstance(text, str):
        return None
    try:
        found = datetime.fromisoformat(text)
    except ValueError:
        return None
    if found.tzinfo is None:
        found = found.replace(tzinfo=UTC)
    return found.timestamp()


def _text(value: Any) -> str:
    return clean_line(value) if isinstance(value, str) else ""


@final
class PublishedRuns:
    """The runs one bound account published for the person (`seat`)."""

    def __init__(
        self, seat: Seat, *, stop_pressed: Callable[[], float | None] | None = None
    ) -> None:
        """Read what `seat`'s account published; `stop_pressed` as `OwnRuns` takes it."""
        self.account = seat.account
        self._seat = seat
        self._stop_pressed = stop_pressed
        self._looked: dict[str, tuple[float, Any]] = {}

    def _recent(self, key: str, look: Callable[[], Any]) -> Any:
        now = time.monotonic()
        kept = self._looked.get(key)
        if kept is not None and now - kept[0] < STORE_EVERY:
            return kept[1]
        found = look()
        self._looked[key] = (now, found)
        return found

    def _records(self) -> list[dict[str, Any]]:
        def look() -> list[dict[str, Any]]:
            try:
                return published_runs(self._seat)
            except PublishUnreadable as exc:
                return [{"id": "-", "error": str(exc)}]

        records: list[dict[str, Any]] = self._recent("", look)
        return records

    def close(self) -> None:
        """Nothing is held open between reads."""

    def runs(self) -> list[RunCard]:
        """The published runs, newest first; one that cannot be read says why."""
        return [self._card(record, lanes=False) for record in self._records()]

    def run(self, run_id: str) -> RunCard | None:
        """One published run with its lanes, their last lines and its stop's timeline."""
        record = next((r for r in self._records() if r.get("id") == run_id), None)
        return None if record is None else self._card(record, lanes=True)

    def _card(self, record: dict[str, Any], *, lanes: bool) -> RunCard:
        run = _text(record.get("id")) or "-"
        if "error" in record:
            return RunCard(
                account=self.account,
                id=run,
                state="unreadable",
                started_at=0.0,
                note=_text(record["error"]),
            )
        shown: list[LaneCard] = []
        for lane in record.get("lanes", []) if lanes else []:
            lane_id = _text(lane.get("lane"))
            bundle = lane.get("bundle")
            work = None
            if isinstance(bundle, dict) and "error" not in bundle:
                work = "bundle: tether fetch"
            shown.append(
                LaneCard(
                    id=lane_id,
                    item=_text(lane.get("item")),
                    state=_text(lane.get("state")),
                    stage=_text(lane.get("stage")) or None,
                    line=self.line(run, lane_id) if lane_id else None,
                    commits=0,
                    saved_ref=_text(lane.get("saved_ref")) or None,
                    work=work,
                )
            )
        return RunCard(
            account=self.account,
            id=run,
            state=_text(record.get("state")) or "unknown",
            started_at=_at(record.get("started_at")) or 0.0,
            lanes=tuple(shown),
            timeline=self._timeline(record) if lanes else (),
        )

    def _timeline(self, record: dict[str, Any]) -> tuple[Step, ...]:
        stop = record.get("stop")
        if not isinstance(stop, dict):
            return ()
        seen = _at(stop.get("seen_at"))
        if seen is None:
            return ()
        steps = [Step(at=seen, what="stop seen", detail=_text(stop.get("detail")))]
        kinds = (
            ("call_ended_at", "call ended"),
            ("saved_at", "saved"),
            ("released_at", "released"),
            ("halted_at", "lane halted"),
            ("done_at", "lane done"),
        )
        for lane in stop.get("lanes", []):
            if not isinstance(lane, dict):
                continue
            for key, what in kinds:
                at = _at(lane.get(key))
                if at is not None:
                    steps.append(Step(at=at, what=what, lane=_text(lane.get("item"))))
        halted = _at(stop.get("halted_at"))
        if halted is not None:
            steps.append(Step(at=halted, what="halted"))
        pressed = self._stop_pressed() if self._stop_pressed is not None else None
        if pressed is not None and pressed <= seen:
            steps.append(Step(at=pressed, what="stop pressed"))
        return tuple(sorted(steps, key=lambda s: s.at))

    def line(self, run_id: str, lane_id: str) -> str | None:
        """The last line of the lane's published lines."""

        def look() -> str | None:
            try:
                text = read_text(
                    self._seat, lines_name(run_id, lane_id), limit=_LINE_BYTES
                )
            except PublishUnreadable as exc:
                return clean_line(f"(unreadable: {exc})")
            if text is None:
                return None
            last = next(
                (clean_line(x) for x in reversed(text.splitlines()) if x.strip()), ""
            )
            return last or None

        found: str | None = self._recent(f"{run_id}/{lane_id}", look)
        return found

    def diff(self, run_id: str, lane_id: str) -> str | None:
        """Where the lane's work is: a bundle `tether fetch` brings into your repository."""
        record = next((r for r in self._records() if r.get("id") == run_id), None)
        lanes = [] if record is None else record.get("lanes", [])
        lane = next((x for x in lanes if x.get("lane") == lane_id), None)
        bundle = None if lane is None else lane.get("bundle")
        if not isinstance(bundle, dict) or "error" in bundle:
            return None
        branch = _text(bundle.get("branch")) or "-"
        return (
            f"{self.account} published this lane's work as a git bundle: branch "
            f"{branch} at {_text(bundle.get('branch_commit')) or '-'}, saved view "
            f"{_text(bundle.get('view_commit')) or '-'}.\n\n"
            "Bring it into your repository as data, then review it with git:\n\n"
            f"  tether fetch --run {run_id}\n"
            f"  git log --oneline main..tether/{self.account}/{_text(lane.get('item') if lane else '')}\n"
        )

    def digest(self) -> str | None:
        """Today's digest the account published."""
        day = datetime.now(UTC).strftime("%Y-%m-%d")
        try:
            return read_text(self._seat, digest_name(day))
        except PublishUnreadable as exc:
            return f"(the digest cannot be read: {exc})"
