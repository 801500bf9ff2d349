"""`tether logs RUN [ITEM]`: what a run's agents printed, lane by lane.

What an agent printed is data (spec 01 S16): by default no control sequence of it
reaches the terminal (`tether._term.visible`: colours dropped, every other escape shown
as text from a visible `␛`); `--raw` gives the bytes as they are. A log is followed
across its rewrites (`tether.runs._lane_log.LogReader`).
"""

from __future__ import annotations

import codecs
import sys
import threading
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from pathlib import Path

    from ..runs._lane_log import LogReader

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
@click.option(
    "--raw",
    is_flag=True,
    help="Print the agents' bytes as they are, terminal escapes included (by "
    "default colours are dropped and every other escape is shown as text).",
)
@click.option("--store", "store_opt", default=None, help=_STORE_HELP)
def logs(
    run_id: str, which: str | None, follow: bool, raw: bool, store_opt: str | None
) -> None:
    """Print the log of each lane of RUN, or of ITEM's lane, headed by item and lane.

    ITEM is an item or lane id, or a unique prefix of one. A run of an account bound to
    this account's stop (tether setup --system) prints the lines it published: each
    lane's last lines.

    \b
    Examples:
      tether logs run_3f9a0c1b2d4e-1
      tether logs run_3f9a0c1b2d4e-1 fix-typo
      tether logs run_3f9a0c1b2d4e-1 fix-typo --follow
      tether logs run_3f9a0c1b2d4e-1 fix-typo --raw | less -R
    """
    from ..errors import UsageError
    from ..runs import open_store, store_url
    from ..runs._lane_log import LogReader
    from ..runs._takeover import effective_state
    from ..runs._views import lane_log

    if store_opt is None and _published(run_id, which):
        return
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
        readers = {path: _Lane(LogReader(), raw) for _, path in files}
        while True:
            for title, path in files:
                readers[path].print_new(title, path, headed=len(files) > 1)
            if not follow or effective_state(store, row).value not in _ACTIVE:
                break
            # Another process appends to the files: look again, as `tail -f` does.
            _quiet.wait(_FOLLOW_EVERY)
            row = store.run(run_id) or row
    finally:
        store.close()


class _Lane:
    """What was printed of one lane's log: how far, and a character cut in two."""

    def __init__(self, reader: LogReader, raw: bool) -> None:
        self.reader = reader
        self.raw = raw
        self.started = False
        self.decoder: Any = codecs.getincrementaldecoder("utf-8")("replace")

    def print_new(self, title: str, path: Path, *, headed: bool) -> None:
        from .._term import visible
        from ..errors import UsageError

        try:
            data = self.reader.read(path)
        except OSError as exc:
            raise UsageError(f"cannot read the log of {title}: {exc}") from None
        if not data:
            return
        if headed and not self.started:
            click.echo(f"== {title} ==")
        self.started = True
        if self.raw:
            sys.stdout.flush()
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
            return
        click.echo(visible(self.decoder.decode(data)), nl=False)


def _published(run_id: str, which: str | None) -> bool:
    """Print the lines a bound account published for `run_id`; False if it has none.

    The person reads the lines of runs under another account this way (what the run
    published: each lane's last lines, as this command prints them).
    """
    from ..errors import UsageError
    from ..runs._publish import PublishUnreadable, read_text, seats
    from ._seatview import seat_runs

    try:
        found = seats()
    except PublishUnreadable:
        return False
    for seat in found:
        _, records, _ = seat_runs(seat)
        record = next((r for r in records if r.get("id") == run_id), None)
        if record is None:
            continue
        lanes = [
            lane
            for lane in record.get("lanes") or ()
            if which is None or which in (lane.get("item"), lane.get("lane"))
        ]
        if not lanes:
            raise UsageError(f"{which!r} matches no lane of {run_id}")
        for lane in lanes:
            try:
                text = read_text(seat, str(lane.get("lines")))
            except PublishUnreadable as exc:
                raise UsageError(
                    f"cannot read the lines of {lane.get('item')}: {exc}"
                ) from None
            if len(lanes) > 1:
                click.echo(f"== {lane.get('item')} ({lane.get('lane')}) ==")
            click.echo(text or "", nl=False)
        return True
    return False
