"""`tether logs RUN [ITEM]`: what a run's agents did, lane by lane.

By default each line of a lane's log is shown as the agent's events, one line each
(`tether.runs._events`: `Bash: pytest -q`, `Bash failed (exit 1): …`, `refused Bash
call (…): the person stopped this run …`; a command agent's plain output and tether's
own `tether: …` lines as they are). What an agent wrote is data (spec 01 S16): no
control sequence of it reaches the terminal (`tether._term.visible`: every escape shown
as text from a visible `␛`). `--json` prints the events as JSON lines; `--raw` prints
the log as the agent wrote it (Claude Code's or Codex's JSON stream, byte for byte,
terminal escapes included). A log is followed across its rewrites
(`tether.runs._lane_log.LogReader`).
"""

from __future__ import annotations

import codecs
import json
import sys
import threading
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from pathlib import Path

    from ..runs._events import AgentEvent
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
    help="Print the log as the agent wrote it: its CLI's JSON event stream, byte for "
    "byte, terminal escapes included (by default each event is one line, every "
    "escape shown as text).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print the events as JSON lines: {"item", "lane", "kind", ...} each.',
)
@click.option("--store", "store_opt", default=None, help=_STORE_HELP)
def logs(
    run_id: str,
    which: str | None,
    follow: bool,
    raw: bool,
    as_json: bool,
    store_opt: str | None,
) -> None:
    """Print what each lane of RUN did, or ITEM's lane, headed by item and lane.

    Each event of the agent is one line: its text, a tool call and its input in
    brief, the call's result, a refusal by the stop, its end. ITEM is an item or lane
    id, or a unique prefix of one. A run of an account bound to this account's stop
    (tether setup --system) prints the lines it published: each lane's last lines.

    \b
    Examples:
      tether logs run_3f9a0c1b2d4e-1
      tether logs run_3f9a0c1b2d4e-1 fix-typo
      tether logs run_3f9a0c1b2d4e-1 fix-typo --follow
      tether logs run_3f9a0c1b2d4e-1 fix-typo --json
      tether logs run_3f9a0c1b2d4e-1 fix-typo --raw > fix-typo.jsonl
    """
    from ..errors import UsageError
    from ..runs import open_store, store_url
    from ..runs._lane_log import LogReader
    from ..runs._liveness import effective_state
    from ..runs._views import lane_log

    if raw and as_json:
        raise UsageError("give --raw or --json, not both")
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
        files = [(x.item, x.id, lane_log(run_id, x.id)) for x in lanes]
        how = "raw" if raw else "json" if as_json else "lines"
        readers = {
            path: _Lane(LogReader(), how, item, lane) for item, lane, path in files
        }
        while True:
            for _, _, path in files:
                readers[path].print_new(path, headed=len(files) > 1)
            if not follow or effective_state(store, row).value not in _ACTIVE:
                for _, _, path in files:
                    readers[path].print_events(readers[path].events.close())
                break
            # Another process appends to the files: look again, as `tail -f` does.
            _quiet.wait(_FOLLOW_EVERY)
            row = store.run(run_id) or row
    finally:
        store.close()


class _Lane:
    """What was printed of one lane's log: how far, and a line or character cut in two."""

    def __init__(self, reader: LogReader, how: str, item: str, lane: str) -> None:
        from ..runs._events import EventReader

        self.reader = reader
        self.how = how
        self.item = item
        self.lane = lane
        self.started = False
        self.decoder: Any = codecs.getincrementaldecoder("utf-8")("replace")
        self.events = EventReader()

    def print_new(self, path: Path, *, headed: bool) -> None:
        from ..errors import UsageError

        title = f"{self.item} ({self.lane})"
        try:
            data = self.reader.read(path)
        except OSError as exc:
            raise UsageError(f"cannot read the log of {title}: {exc}") from None
        if not data:
            return
        if headed and not self.started and self.how != "json":
            click.echo(f"== {title} ==")
        self.started = True
        if self.how == "raw":
            sys.stdout.flush()
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
            return
        self.print_events(self.events.feed(self.decoder.decode(data)))

    def print_events(self, events: list[AgentEvent]) -> None:
        from ..runs._events import event_dict, render_line

        if self.how == "raw":
            return
        for event in events:
            if self.how == "json":
                shape = {"item": self.item, "lane": self.lane, **event_dict(event)}
                click.echo(json.dumps(shape, ensure_ascii=False))
            else:
                click.echo(render_line(event))


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
