"""`tether stop`: the person sets the recorded stop."""

from __future__ import annotations

import click

__all__ = ("stop",)


@click.command()
@click.option(
    "--reason", metavar="TEXT", help="Why (kept in the stop file for people)."
)
def stop(reason: str | None) -> None:
    """Set the stop: every run that honours this account halts before its next move.

    The stop is written atomically into <folder>/<uid>/stop (mode 01644). A full disk or
    a read-only filesystem fails with exit code 1; nothing claims success unless a read
    of the stop says STOPPED. Refused (exit 2) without a terminal or inside an agent
    session (CLAUDECODE, CODEX_SANDBOX, TETHER_AGENT, ...).

    \b
    Examples:
      tether stop
      tether stop --reason "leaving for the weekend"
    """
    from ..stop import check_caller, set_stop, stop_reason
    from ._stopview import emit, reading_lines

    check_caller("stop")
    reading = set_stop(reason)
    emit([("fail", "stop set"), *reading_lines(reading, stop_reason(reading))])
