"""`tether logs RUN [ITEM]`: what a run's agents printed, lane by lane."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ("logs",)

_STORE_HELP = "A SQLite file or postgresql:// URL [env var: TETHER_STORE]."
_ACTIVE = ("running", "held", "halting")
_FOLLOW_EVERY = 0.2
"""Seconds between looks at the logs with `--follow`."""
_quiet = threading.Event()
"""Never set: its bounded wait spaces the looks."""


@click.command()
@click.argument("run_id", metavar="RUN")
@click.argument("which", metavar="[ITEM]", required=False)
@click.option("--follow", "-f", is_flag=True, help="Keep printing while the run works.")
@click.option("--store", "store_opt", default=None, help=_STORE_HELP)
def logs(run_id: str, which: str | None, follow: bool, store_opt: str | None) -> None:
    """Print the log of each lane of RUN, or of ITEM's lane, headed by item and lane.

    ITEM is an item or lane id, or a unique prefix of one.

    \b
    Examples:
      tether logs run_3f9a0c1b2d4e-1
      tether logs run_3f9a0c1b2d4e-1 fix-typo
      tether logs run_3f9a0c1b2d4e-1 fix-typo --follow
    """
    from ..errors import UsageError
    from ..runs import open_store, store_url
    from ..runs._takeover import effective_state
    from ..runs._views import lane_log

    store = open_store(store_url(store_opt))
    try:
        row = store.run(run_id)
        if row is None:
            raise UsageError(f"no run {run_id} in {store.url}; see `tether runs`")
        lanes = store.lanes(run_id)
        if which is not None:
            exact = [x for x in lanes if which in (x.item, x.id)]
            chosen = exact or [
                x for x in lanes if x.item.startswith(which) or x.id.startswith(which)
            ]
            if len({x.id for x in chosen}) != 1:
                names = ", ".join(x.item for x in lanes) or "none"
                what = "matches no lane" if not chosen else "matches several lanes"
                raise UsageError(f"{which!r} {what} of {run_id} (its items: {names})")
            lanes = chosen
        files = [(f"{x.item} ({x.id})", lane_log(run_id, x.id)) for x in lanes]
        offsets = {path: 0 for _, path in files}
        while True:
            for title, path in files:
                offsets[path] = _print_new(title, path, offsets[path], len(files) > 1)
            if not follow or effective_state(store, row).value not in _ACTIVE:
                break
            # Another process appends to the files: look again, as `tail -f` does.
            _quiet.wait(_FOLLOW_EVERY)
            row = store.run(run_id) or row
    finally:
        store.close()


def _print_new(title: str, path: Path, offset: int, headed: bool) -> int:
    try:
        with path.open("rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return offset
    if data:
        if headed and offset == 0:
            click.echo(f"== {title} ==")
        click.echo(data.decode("utf-8", "replace"), nl=False)
    return offset + len(data)
