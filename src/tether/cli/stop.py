"""`tether stop`: the person sets the recorded stop."""

from __future__ import annotations

import sys
import threading
import time
from typing import TYPE_CHECKING, Any

import click

from ._options import seconds_option

if TYPE_CHECKING:
    from ..runs._publish import Seat
    from ..stop import StopReading

__all__ = ("stop",)

WAIT_EVERY = 0.2
"""Seconds between looks at the runs with `--wait`."""
_quiet = threading.Event()
"""Never set: its bounded wait spaces the looks."""


@click.command()
@click.option(
    "--reason", metavar="TEXT", help="Why (kept in the stop file for people)."
)
@click.option(
    "--wait",
    is_flag=True,
    help="Then wait until every run that honours the stop has halted, printing its "
    "progress.",
)
@seconds_option(
    "--timeout",
    default=600.0,
    zero=True,
    help="With --wait: seconds to wait at most.",
)
def stop(reason: str | None, wait: bool, timeout: float) -> None:
    """Set the stop: every run that honours this account halts before its next move.

    The stop is written atomically into <folder>/<uid>/stop (mode 01644). A full disk or
    a read-only filesystem fails with exit code 1; nothing claims success unless a read
    of the stop says STOPPED. Refused (exit 2) without a terminal or inside an agent
    session (CLAUDECODE, CODEX_SANDBOX, TETHER_AGENT, ...). It ends by naming the
    accounts whose runs honour it (this one, and those root bound to it with tether
    setup --system).

    With --wait it then waits until every run of those accounts has halted (or was
    done), printing each step of the halt as the runs publish it: exit 0 once they
    all have; exit 1 when --timeout passed first (the runs still working are named;
    the stop stands).

    \b
    Examples:
      tether stop
      tether stop --reason "leaving for the weekend"
      tether stop --wait --timeout 120
    """
    from ..stop import check_caller, set_stop, stop_reason
    from ._stopview import emit, reading_lines

    check_caller("stop")
    reading = set_stop(reason)
    emit([("alarm", "stop set"), *reading_lines(reading, stop_reason(reading))])
    bound, elsewhere = _honouring(reading)
    names = ["this account"] + [f"{s.account} (uid {s.account_uid})" for s in bound]
    click.echo("honoured by the runs of: " + ", ".join(names))
    for seat in elsewhere:
        click.echo(
            f"not honoured by {seat.account}: root bound it to your stop in "
            f"{seat.folder}, not here"
        )
    if wait and not _wait(bound, timeout):
        sys.exit(1)


def _honouring(reading: StopReading) -> tuple[list[Seat], list[Seat]]:
    from ..runs._publish import PublishUnreadable, seats

    try:
        found = seats()
    except PublishUnreadable as exc:
        click.echo(f"tether: the bound accounts cannot be read: {exc}", err=True)
        return [], []
    here = [s for s in found if s.folder == reading.folder]
    return here, [s for s in found if s not in here]


def _honouring_runs(bound: list[Seat]) -> tuple[list[dict[str, Any]], list[str]]:
    """This account's runs and the bound accounts' published ones."""
    from ..errors import TetherError
    from ..runs import account_runs
    from ._seatview import all_runs

    notes: list[str] = []
    try:
        own = account_runs()
    except TetherError as exc:
        own, notes = [], [f"this account's runs cannot be read: {exc}"]
    runs, more = all_runs(own)
    accounts = {s.account for s in bound}
    me = runs[: len(own)]
    theirs = [r for r in runs[len(own) :] if r.get("account") in accounts]
    return me + theirs, notes + more


def _wait(bound: list[Seat], timeout: float) -> bool:
    """Wait until no run that honours the stop is working; False at the timeout."""
    from ._seatview import progress_lines, run_line, unfinished

    deadline = time.monotonic() + timeout
    said: set[str] = set()
    watched: set[str] = set()
    while True:
        runs, notes = _honouring_runs(bound)
        working = unfinished(runs)
        watched.update(str(r["id"]) for r in working)
        for text in notes:
            if text not in said:
                said.add(text)
                click.echo(f"tether: {text}", err=True)
        for record in runs:
            if record["id"] not in watched:
                continue
            for text in [run_line(record), *progress_lines(record)]:
                if text not in said:
                    said.add(text)
                    click.echo(text)
        if not working:
            click.echo("every run that honours the stop has halted")
            return True
        if time.monotonic() >= deadline:
            shown = ", ".join(run_line(r) for r in working)
            click.echo(
                f"tether: still working after {timeout:g} s: {shown}; the stop "
                "stands: tether status shows their progress",
                err=True,
            )
            return False
        _quiet.wait(WAIT_EVERY)
