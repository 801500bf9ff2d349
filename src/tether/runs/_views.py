"""What the views print: runs with their state, one run with its lanes (spec 03 shapes)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ._lane_paths import lane_log
from ._liveness import effective_state
from ._open import default_store_path, open_store, store_url

if TYPE_CHECKING:
    from ._values import Event, LaneRow

__all__ = ("account_runs", "failures", "lane_log", "list_runs", "show_run")


def _lane_details(
    lane: LaneRow, run: str, events: list[Event], saves: dict[str, list[str]]
) -> dict[str, Any]:
    """A lane's `stage`, `started_at`, `log` and `saved_refs`.

    `stage` is the last one started, `started_at` (when its `lane-open` was recorded)
    is ISO 8601 in UTC, and `saved_refs` holds every save's view, oldest first.
    """
    mine = [e for e in events if e.lane == lane.id]
    stage = lane.stage_name
    opened = next((e.at for e in mine if e.kind == "lane-open"), None)
    return {
        "stage": stage,
        "started_at": None
        if opened is None
        else datetime.fromtimestamp(opened, UTC).isoformat(timespec="seconds"),
        "log": str(lane_log(run, lane.id)),
        "saved_refs": saves.get(lane.id, []),
    }


def list_runs(store_option: str | None = None) -> list[dict[str, str]]:
    """Every run of the store as `{"id", "state"}`, dead ones found and marked dead."""
    store = open_store(store_url(store_option))
    try:
        return [
            {"id": row.id, "state": effective_state(store, row).value}
            for row in store.runs()
        ]
    finally:
        store.close()


def failures(store_option: str | None = None) -> dict[str, list[str]]:
    """Per run, `ITEM: STAGE failed, exit N: why` for each lane whose item failed."""
    store = open_store(store_url(store_option))
    try:
        found: dict[str, list[str]] = {}
        for row in store.runs():
            for lane in store.lanes(row.id):
                if lane.state.value == "done" and lane.note:
                    found.setdefault(row.id, []).append(f"{lane.item}: {lane.note}")
        return found
    finally:
        store.close()


def account_runs() -> list[dict[str, str]]:
    """This account's runs for `tether status`; none when the account never ran one."""
    url = store_url()
    if url == str(default_store_path()) and not default_store_path().exists():
        return []
    return list_runs()


def show_run(run_id: str, store_option: str | None = None) -> dict[str, Any]:
    """A run and its lanes, as `tether runs show` prints them.

    The shape: `{"id", "state", "lanes": [{"item", "state", "saved_ref", "claimed",
    "stage", "started_at", "log", "saved_refs"}]}`.

    Raises:
        UsageError: no such run.
    """
    store = open_store(store_url(store_option))
    try:
        row = store.run(run_id)
        if row is None:
            raise UsageError(f"no run {run_id} in {store.url}; see `tether runs`")
        claimed = {(c.item, c.lane) for c in store.claims(run_id)}
        events = store.events(run_id)
        saves = store.saved_refs(run_id)
        return {
            "id": row.id,
            "state": effective_state(store, row).value,
            "lanes": [
                {
                    "item": lane.item,
                    "state": lane.state.value,
                    "saved_ref": lane.saved_ref,
                    "claimed": (lane.item, lane.id) in claimed,
                    **_lane_details(lane, run_id, events, saves),
                }
                for lane in store.lanes(run_id)
            ],
        }
    finally:
        store.close()
