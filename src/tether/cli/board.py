"""`tether board`: the person's read-only web page of runs, on loopback, behind a token."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from .._board._source import BoardSource

__all__ = ("board",)

_STORE_HELP = "A SQLite file or postgresql:// URL [env var: TETHER_STORE]."


@click.command()
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8765,
    show_default=True,
    help="The port on 127.0.0.1 (0: any free one).",
)
@click.option("--store", "store_opt", default=None, help=_STORE_HELP)
def board(port: int, store_opt: str | None) -> None:
    """Serve a read-only web page of runs on 127.0.0.1, until Ctrl-C.

    It shows this account's runs and those of every account bound to honour its stop
    (tether setup --system), from the records they publish. The page shows each run's
    lanes with the line each agent printed last (live), a
    stop's timeline (pressed, each call's end, saved, released, halted), each lane's
    diff and today's digest. It changes nothing: stop, lift and take over in a
    terminal. It answers only requests that carry the token in the URL it prints
    (then a cookie); the token is new at each start and kept owner-only in the board
    folder of the state dir, which walled trees cannot see.

    \b
    Examples:
      tether board                  serve on http://127.0.0.1:8765/?token=...
      tether board --port 0         any free port (the URL says which)
      tether board --store postgresql://tether@db/runs
    """
    from .. import _extras
    from ..errors import UsageError

    if not _extras.installed("board"):
        raise UsageError(_extras.missing("board", "tether board"))
    from .._board._published import PublishedRuns
    from .._board._serve import board_socket, serve
    from .._board._source import OwnRuns, standing_stop_at
    from ..runs._publish import PublishUnreadable, seats

    sock = board_socket(port)
    sources: list[BoardSource] = [OwnRuns(store_opt, stop_pressed=standing_stop_at)]
    try:
        bound = seats()
    except PublishUnreadable as exc:
        bound = []
        click.echo(f"tether: other accounts' runs are not shown: {exc}", err=True)
    sources += [PublishedRuns(seat, stop_pressed=standing_stop_at) for seat in bound]

    def announce(url: str) -> None:
        click.echo(f"tether board (read-only): {url}", nl=True)
        names = ", ".join(s.account for s in sources)
        click.echo(f"showing the runs of {names}; Ctrl-C to end it", err=True)

    serve(sources, sock, announce=announce)
