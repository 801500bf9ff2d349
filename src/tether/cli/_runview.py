"""How a run shows itself: rich lines with a live status on a terminal, plain otherwise."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import click

__all__ = ("run_view",)


@contextmanager
def run_view() -> Iterator[Callable[[str], None]]:
    """Yield the `say` function a run writes its lines to.

    On a terminal the lines carry their time and a live status line shows the last one;
    otherwise each line is printed as it is, flushed at once (logs, pipes, tests).
    """
    if not sys.stdout.isatty():

        def plain(line: str) -> None:
            click.echo(line)
            sys.stdout.flush()

        yield plain
        return
    import time

    from rich.markup import escape

    from .._term import rich_console

    console = rich_console()
    with console.status("starting", spinner="dots") as status:

        def fancy(line: str) -> None:
            stamp = time.strftime("%H:%M:%S")
            console.print(f"[dim]{stamp}[/dim] {escape(line)}", soft_wrap=True)
            status.update(escape(line))

        yield fancy
