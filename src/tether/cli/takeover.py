"""`tether takeover RUN`: reserve a halted or dead run's work again and step on."""

from __future__ import annotations

import sys

import click

from ._options import seconds_option
from ._runview import progress_option

__all__ = ("takeover",)


@click.command()
@click.argument("run_id", metavar="RUN")
@click.option(
    "--store",
    "store_opt",
    default=None,
    help="A SQLite file or postgresql:// URL [env var: TETHER_STORE].",
)
@seconds_option(
    "--poll",
    default=None,
    help="Seconds between reads of the stop while nothing moves [default: the plan's].",
)
@progress_option
def takeover(
    run_id: str, store_opt: str | None, poll: float | None, progress: float
) -> None:
    """Take over RUN: save its worktrees, re-claim what is free, restore, go on.

    Refused (exit 2) while a stop stands or while RUN is alive. Prints the new run's id
    as `run <id>`, then behaves as `tether run` with RUN's plan (same exit codes).

    \b
    Examples:
      tether takeover run_3f9a0c1b2d4e-1
    """
    from ..runs._entry import run_plan
    from ._runview import run_in_view

    code = run_in_view(
        lambda say, beside: run_plan(
            None,
            say=say,
            beside=beside,
            store_option=store_opt,
            takeover=run_id,
            poll=poll,
        ),
        progress=progress,
    )
    sys.exit(code)
