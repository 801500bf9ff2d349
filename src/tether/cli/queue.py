"""`tether queue add/list`: work items in the store, shared by every run that uses it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from ._output import echo_json

if TYPE_CHECKING:
    from ..runs import Store

__all__ = ("queue",)

_STORE_HELP = (
    "The store: a SQLite file path or a postgresql:// URL "
    "[env var: TETHER_STORE; default: the embedded SQLite file]."
)


@click.group()
def queue() -> None:
    """Add work items to the store, list them, or queue failed ones again.

    A plan with no [[item]] works through this queue.

    \b
    Examples:
      tether queue add fix-typo --brief "Fix the typo in README.md"
      tether queue list --json
      tether queue retry fix-typo
    """


@queue.command("add")
@click.argument("item")
@click.option("--brief", required=True, help="What to do, handed to agents as {brief}.")
@click.option("--store", "store_opt", default=None, help=_STORE_HELP)
def add(item: str, brief: str, store_opt: str | None) -> None:
    """Queue ITEM with its brief (exit 2 when an item of that id is already there).

    \b
    Examples:
      tether queue add fix-typo --brief "Fix the typo in README.md"
    """
    from ..errors import UsageError
    from ..runs import open_store, store_url
    from ..runs._plan import check_item_id

    check_item_id(item)
    if not brief.strip():
        raise UsageError("--brief must say what to do")
    store = open_store(store_url(store_opt))
    try:
        if not store.add_item(item, brief):
            raise UsageError(
                f"item {item!r} is already in the store; choose another id"
            )
    finally:
        store.close()
    click.echo(f"queued {item}")


@queue.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON list.")
@click.option("--store", "store_opt", default=None, help=_STORE_HELP)
def list_(as_json: bool, store_opt: str | None) -> None:
    """List the work items: id, state (queued, done, failed), the run holding it.

    \b
    Examples:
      tether queue list
      tether queue list --json | jq -r '.[].id'
    """
    from ..runs import open_store, store_url

    store = open_store(store_url(store_opt))
    try:
        items = store.items()
    finally:
        store.close()
    if as_json:
        rows = [
            {"id": i.id, "brief": i.brief, "state": i.state, "claimed_by": i.claimed_by}
            for i in items
        ]
        echo_json(rows)
        return
    if not items:
        click.echo("the queue is empty")
        return
    for i in items:
        held = f"  (claimed by {i.claimed_by})" if i.claimed_by else ""
        click.echo(f"{i.id}  {i.state}{held}  {i.brief}")


@queue.command("retry")
@click.argument("item", required=False)
@click.option("--all-failed", is_flag=True, help="Every failed item.")
@click.option(
    "--from-start",
    is_flag=True,
    help="Run every stage again (on the branch as it is), not only the failed one "
    "and those after it.",
)
@click.option("--store", "store_opt", default=None, help=_STORE_HELP)
def retry(
    item: str | None, all_failed: bool, from_start: bool, store_opt: str | None
) -> None:
    """Put a failed ITEM back in the queue, for the next `tether run` to take up.

    The next lane starts from the branch `tether/ITEM` (the work of the stages that
    succeeded) at the stage that failed: the stages before it do not run again.
    `--from-start` runs every stage again. Exit 2 when ITEM is not failed.

    \b
    Examples:
      tether queue retry fix-typo
      tether queue retry fix-typo --from-start
      tether queue retry --all-failed
    """
    from ..errors import UsageError
    from ..runs import open_store, store_url

    if (item is None) == (not all_failed):
        raise UsageError("give one ITEM or --all-failed")
    store = open_store(store_url(store_opt))
    try:
        if all_failed:
            failed = [i.id for i in store.items() if i.state == "failed"]
            again = [i for i in failed if _retry(store, i, from_start)]
            click.echo(
                f"queued again: {len(again)} item(s)"
                + (f" ({', '.join(again)})" if again else "")
            )
            return
        assert item is not None
        known = {i.id: i.state for i in store.items()}
        if item not in known:
            raise UsageError(
                f"no item {item!r} in {store.url}; see `tether queue list`"
            )
        if not _retry(store, item, from_start):
            raise UsageError(
                f"item {item!r} is {known[item]}, not failed: only a failed item is "
                "queued again"
            )
    finally:
        store.close()
    click.echo(f"queued again: {item}" + (" (every stage)" if from_start else ""))


def _retry(store: Store, item: str, from_start: bool) -> bool:
    """Queue `item` again; with `from_start`, its next lane starts at the first stage."""
    failed = any(i.id == item and i.state == "failed" for i in store.items())
    lanes = store.item_lanes(item) if failed and from_start else []
    if lanes and lanes[-1].state.value == "done":
        # The failed lane's stage is where the next lane starts (`retry_stage`).
        store.update_lane(lanes[-1].id, stage=0)
    return store.retry(item)
