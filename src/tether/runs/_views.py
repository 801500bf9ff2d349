"""What the views print: runs with their state, one run with its lanes (spec 03 shapes)."""

from __future__ import annotations

from typing import Any

from ..errors import UsageError
from ._open import default_store_path, open_store, store_url
from ._takeover import effective_state

__all__ = ("account_runs", "list_runs", "show_run")


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


def account_runs() -> list[dict[str, str]]:
    """This account's runs for `tether status`; none when the account never ran one."""
    url = store_url()
    if url == str(default_store_path()) and not default_store_path().exists():
        return []
    return list_runs()


def show_run(run_id: str, store_option: str | None = None) -> dict[str, Any]:
    """`{"id", "state", "lanes": [{"item", "state", "saved_ref", "claimed"}]}`.

    Raises:
        UsageError: no such run.
    """
    store = open_store(store_url(store_option))
    try:
        row = store.run(run_id)
        if row is None:
            raise UsageError(f"no run {run_id} in {store.url}; see `tether runs`")
        claimed = {(c.item, c.lane) for c in store.claims(run_id)}
        return {
            "id": row.id,
            "state": effective_state(store, row).value,
            "lanes": [
                {
                    "item": lane.item,
                    "state": lane.state.value,
                    "saved_ref": lane.saved_ref,
                    "claimed": (lane.item, lane.id) in claimed,
                }
                for lane in store.lanes(run_id)
            ],
        }
    finally:
        store.close()
