"""How a run shows itself: the lines it says, and what each lane is doing now.

On a terminal, each line the run says is printed with its time, and below the lines a
live table is redrawn every `LIVE_EVERY` seconds: per open lane its item, the stage its
agent works on, the time in that stage and the line of the agent's last event (its lane
log, read as `tether.runs._events` renders it: `Bash: pytest -q`, `Bash failed (exit
1): …`, `refused Bash call (…): the person stopped this run …`; a command agent's
plain output as it printed it), with the run's newest line above it. The item, stage
and time columns keep their width (up to `NAME_WIDTH`); the last line gets the rest and
is cut with `…`.

Not on a terminal (a log file, a pipe, CI), the output stays line-oriented: the run's
lines, each flushed at once, and every `progress` seconds (`tether run --progress`,
30 by default; 0: never) one line for each lane whose agent printed a new line since
the last look: `q1: implement for 1m05s, last output: Bash: make`. A quiet lane adds no
line (its `started` and `ended` lines frame it), so the output grows with what the
agents print, bounded by one line per lane per interval.

A look at a lane is cheap either way: one `fstat` of its log, and a read of only what
the log gained since (`tether.runs._tail.LogTail`).
"""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, final

import click

from ._options import seconds_option

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator

    from rich.console import Console, RenderableType
    from rich.live import Live
    from rich.spinner import Spinner

    from ..runs._run import ExitCode, Run
    from ..runs._values import RunStatistics

__all__ = (
    "LIVE_EVERY",
    "NAME_WIDTH",
    "PROGRESS_EVERY",
    "RunView",
    "elapsed_text",
    "progress_option",
    "run_in_view",
    "run_view",
)

LIVE_EVERY = 0.5
"""Seconds between two redraws of the live table on a terminal."""
NAME_WIDTH = 24
"""Columns an item or stage name keeps in the live table before it is cut."""
PROGRESS_EVERY = 30.0
"""Seconds between two looks for progress lines when not on a terminal (the default)."""


progress_option = seconds_option(
    "--progress",
    default=PROGRESS_EVERY,
    zero=True,
    help="When the output is not a terminal: seconds between progress lines (a lane's "
    "stage, time in it and last output line, printed only when that line is new); 0 "
    "for none. A terminal shows a live table instead.",
)
"""`--progress` of `tether run` and `tether takeover`."""


def elapsed_text(seconds: float) -> str:
    """`42s`, `1m05s`, `2h03m`."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole // 60 % 60:02d}m"


@final
class RunView:
    """The lines of one run and, refreshed, what its lanes are doing."""

    def __init__(
        self, *, every: float, console: Console | None = None, live: Live | None = None
    ) -> None:
        from ..runs._events import last_line
        from ..runs._tail import LogTail

        self._every = every
        self._console = console
        self._live = live
        self._tail = LogTail(render=last_line)
        self._last_said = "starting"
        self._spinner: Spinner | None = None
        self._stats: RunStatistics | None = None
        """The lanes as the last refresh found them (on a terminal)."""
        self._shown: dict[str, str] = {}
        """Per lane: the last output line a progress line showed (not on a terminal)."""

    def say(self, line: str) -> None:
        """Print one line of the run (any control sequence in it shown as text)."""
        from .._term import visible

        line = visible(line)
        if self._console is None:
            click.echo(line)
            sys.stdout.flush()
            return
        from rich.markup import escape

        self._last_said = line
        stamp = time.strftime("%H:%M:%S")
        self._console.print(f"[dim]{stamp}[/dim] {escape(line)}", soft_wrap=True)
        if self._live is not None:
            self._live.update(self._table(self._stats), refresh=True)

    def look(self, stats: RunStatistics) -> None:
        """One refresh: redraw the table, or print the progress lines due."""
        if self._live is not None:
            self._stats = stats
            self._live.update(self._table(stats), refresh=True)
            return
        open_lanes: set[str] = set()
        for lane in stats.lanes:
            open_lanes.add(lane.lane)
            if lane.stage is None:
                continue
            last = self._tail.last_line(lane.log)
            if last is None or self._shown.get(lane.lane) == last:
                continue
            self._shown[lane.lane] = last
            self.say(
                f"{lane.item}: {lane.stage} for {elapsed_text(lane.elapsed)}, "
                f"last output: {last}"
            )
        self._forget(open_lanes, stats)

    def _forget(self, open_lanes: set[str], stats: RunStatistics) -> None:
        """Drop what is kept of lanes that are gone."""
        for gone in set(self._shown) - open_lanes:
            del self._shown[gone]
        self._tail.keep(lane.log for lane in stats.lanes)

    def _table(self, stats: RunStatistics | None) -> RenderableType:
        from rich.console import Group
        from rich.spinner import Spinner
        from rich.table import Table
        from rich.text import Text

        from ..runs._tail import clean_line

        text = Text(self._last_said, overflow="ellipsis", no_wrap=True)
        if stats is not None and stats.stop_hold is not None:
            text = Text(clean_line(f"holding: {stats.stop_hold}"), style="yellow")
        if self._spinner is None:
            self._spinner = Spinner("dots")
        # The head is one line whatever its text: a line that wrapped would be counted
        # at one width and cleared at another when the terminal is resized, leaving a
        # spinner line in the scrollback.
        head = Table.grid(padding=(0, 1), expand=True)
        head.add_column(no_wrap=True, width=1)
        head.add_column(no_wrap=True, overflow="ellipsis", ratio=1, min_width=1)
        head.add_row(self._spinner, text)
        if stats is None or not stats.lanes:
            return head
        # The names keep their width (a long last line never squeezes them): the
        # grid takes the whole width and the last column what the others leave.
        table = Table.grid(padding=(0, 2), expand=True)
        for names in (
            [lane.item for lane in stats.lanes],
            [lane.stage or "between stages" for lane in stats.lanes],
        ):
            width = min(NAME_WIDTH, max(len(n) for n in names))
            table.add_column(
                no_wrap=True, overflow="ellipsis", min_width=width, max_width=NAME_WIDTH
            )
        table.add_column(no_wrap=True, justify="right", min_width=6)
        table.add_column(no_wrap=True, overflow="ellipsis", ratio=1, min_width=1)
        for lane in stats.lanes:
            last = self._tail.last_line(lane.log) or ""
            stage = lane.stage or "between stages"
            if lane.note:
                last = clean_line(lane.note)
            table.add_row(
                Text(lane.item, style="bold", overflow="ellipsis", no_wrap=True),
                Text(stage, overflow="ellipsis", no_wrap=True),
                Text(elapsed_text(lane.elapsed), style="dim"),
                Text(
                    last,
                    style="dim" if lane.stage is None else "",
                    overflow="ellipsis",
                    no_wrap=True,
                ),
            )
        self._forget({lane.lane for lane in stats.lanes}, stats)
        return Group(head, table)

    async def follow(self, run: Run) -> None:
        """Refresh from `run` until cancelled (the run ended)."""
        import anyio

        if self._every <= 0:
            return
        while True:
            await anyio.sleep(self._every)
            self.look(run.statistics())


@contextmanager
def _view(progress: float) -> Iterator[RunView]:
    if not sys.stdout.isatty():
        yield RunView(every=progress)
        return
    from rich.live import Live
    from rich.spinner import Spinner

    from .._term import rich_console

    console = rich_console()
    with Live(
        Spinner("dots", "starting"),
        console=console,
        # Redrawn by the view itself (each look, each line): no thread of rich's.
        auto_refresh=False,
        transient=True,
    ) as live:
        yield RunView(every=LIVE_EVERY, console=console, live=live)


@contextmanager
def run_view() -> Iterator[Callable[[str], None]]:
    """Yield the `say` function of a view that only prints lines (the demo's)."""
    with _view(0.0) as view:
        yield view.say


def run_in_view(
    go: Callable[
        [Callable[[str], None], Callable[[Run], Awaitable[None]]], Awaitable[ExitCode]
    ],
    *,
    progress: float = PROGRESS_EVERY,
) -> int:
    """Run `go(say, beside)` (a `run_plan` call) in a view; return its exit code."""
    import anyio

    with _view(progress) as view:
        return int(anyio.run(lambda: go(view.say, view.follow)))
