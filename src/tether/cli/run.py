"""`tether run PLAN`: work through the plan's items without a person (spec 03)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ._options import seconds_option
from ._runview import progress_option

__all__ = ("run",)


@click.command()
@click.argument("plan", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--takeover",
    "takeover",
    metavar="RUN",
    default=None,
    help="First take over RUN (halted or dead): restore its saved work, then go on.",
)
@click.option(
    "--store",
    "store_opt",
    default=None,
    help="A SQLite file or postgresql:// URL [env var: TETHER_STORE; default: the plan's, "
    "else the embedded SQLite file].",
)
@seconds_option(
    "--poll",
    default=None,
    help="Seconds between reads of the stop while nothing moves [default: the plan's, 2].",
)
@seconds_option(
    "--save-retry",
    default=10.0,
    zero=True,
    help="Seconds a failed save is retried before the run ends with the lane held.",
)
@click.option(
    "--follow",
    is_flag=True,
    help="When nothing is left to claim, wait for new queue items (until a stop).",
)
@progress_option
def run(
    plan: Path,
    takeover: str | None,
    store_opt: str | None,
    poll: float | None,
    save_retry: float,
    follow: bool,
    progress: float,
) -> None:
    """Run PLAN: a lane per item (a git repository of its own), stages handed to agents in order.

    The stop is read before every move. Exit codes: 0 every item done; 3 halted (a
    stop or Ctrl-C); 4 halted with a lane held (its save failed); 130 killed by a
    second Ctrl-C; 2 refused or bad usage; 1 a failure. Reads TETHER_HOME,
    TETHER_STORE and TETHER_LOG_BOUND (bytes a lane log keeps, 8 MiB by default).

    \b
    Examples:
      tether run plan.toml
      tether run plan.toml --takeover run_3f9a0c1b2d4e-1
      tether run queue-plan.toml --follow     serve the queue until a stop
      tether run plan.toml --progress 60 > run.log
      TETHER_STORE=/srv/tether/runs.sqlite3 tether run plan.toml
    """
    from ..runs._entry import run_plan
    from ..runs._lane_log import log_bound
    from ._runview import run_in_view

    log_bound()  # a bad TETHER_LOG_BOUND is refused before anything starts
    code = run_in_view(
        lambda say, beside: run_plan(
            plan,
            say=say,
            beside=beside,
            store_option=store_opt,
            takeover=takeover,
            poll=poll,
            save_retry=save_retry,
            follow=follow,
        ),
        progress=progress,
    )
    sys.exit(code)
