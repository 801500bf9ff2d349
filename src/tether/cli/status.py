"""`tether status`: what a read of the stop says now (anyone may look)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

from ._output import echo_json

if TYPE_CHECKING:
    from ..stop import StopReading

__all__ = ("status",)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def status(as_json: bool) -> None:
    """Show the reading: CLEAR, STOPPED (who set it, when) or HOLD (why).

    Also lists stops of other accounts that are not honoured and this account's runs.
    An account bound by root (tether setup --system) reads the bound stop first, whatever
    its own setup says. A reading that does not finish within its bound holds, naming
    what hung. The exit code is 0 for every outcome; 1 only when status itself failed.
    Needs no terminal. Reads TETHER_HOME for the account's setup.

    \b
    Examples:
      tether status
      tether status --json | jq -r .outcome
    """
    from ..errors import StoreError
    from ..stop import ReadOutcome, StopReading, StopStore, setup_path, stop_reason
    from ._stopview import binding_lines, emit, reading_lines, status_json

    store: StopStore | None = None
    try:
        store = StopStore.from_setup(create=False)
        reading = store.read()
    except StoreError as exc:
        # A broken setup record is a reason to hold, and status reports it.
        reading = StopReading(
            outcome=ReadOutcome.HOLD,
            reason=str(exc),
            person_uid=os.geteuid(),
            stop_path=setup_path(),
        )
    from ..errors import UsageError
    from ..runs import account_runs

    try:
        runs = account_runs()
        unread = None
    except (StoreError, UsageError) as exc:
        # The stop's reading stands on its own; a store of runs that cannot be read
        # (a PostgreSQL server down) is said, not allowed to hide the reading.
        runs, unread = [], f"runs: cannot be read: {exc}"
    from ._seatview import all_runs, progress_lines, run_line, unfinished

    shown_runs, seat_notes = all_runs(runs)
    why = stop_reason(reading)  # display only: read after the judgment, bounded
    if as_json:
        echo_json({**status_json(reading, why), "runs": shown_runs})
        for note in ([] if unread is None else [unread]) + seat_notes:
            click.echo(f"tether: {note}", err=True)
        return
    lines = reading_lines(reading, why)
    if store is not None:
        lines += binding_lines(store)
    if unread is not None:
        lines.append(("warn", unread))
    working = unfinished(shown_runs)
    shown = ", ".join(run_line(r) for r in working) or "none working"
    rest = len(shown_runs) - len(working)
    lines.append(("info", f"runs: {shown}" + (f"; {rest} finished" if rest else "")))
    for record in shown_runs:
        if record in working or _under(record, reading):
            lines += [("info", text) for text in progress_lines(record)]
    lines += [("warn", note) for note in seat_notes]
    emit(lines)


def _under(record: dict[str, object], reading: StopReading) -> bool:
    """Whether `record` saw the stop that stands now."""
    stop = record.get("stop")
    if reading.set_at is None or not isinstance(stop, dict):
        return False
    return str(stop.get("seen_at") or "") >= reading.set_at.isoformat()
