"""`tether runs [show RUN]`: the runs in the ledger and their lanes."""

from __future__ import annotations

from typing import Any

import click

from ._output import echo_json

__all__ = ("runs",)

_STORE_HELP = "A SQLite file or postgresql:// URL [env var: TETHER_STORE]."


@click.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON list.")
@click.option("--store", "store_opt", default=None, help=_STORE_HELP)
@click.pass_context
def runs(ctx: click.Context, as_json: bool, store_opt: str | None) -> None:
    """List the runs with their state, this account's and the bound accounts'.

    This account's come from its ledger (a dead run is found and shown dead); then
    those of every account root bound to honour its stop (tether setup --system), as
    they published them, with each lane's stage and a stop's progress.

    \b
    Examples:
      tether runs
      tether runs --json | jq -r '.[] | select(.state == "halted") | .id'
      tether runs show run_3f9a0c1b2d4e-1 --json
    """
    if ctx.invoked_subcommand is not None:
        return
    from ..runs._views import failures, list_runs
    from ._seatview import all_runs, progress_lines

    rows, notes = all_runs(list_runs(store_opt))
    for note in notes:
        click.echo(f"tether: {note}", err=True)
    if as_json:
        echo_json(rows)
    elif not rows:
        click.echo("no runs")
    else:
        failed = failures(store_opt)
        for row in rows:
            click.echo(f"{row['id']}  {row['state']}  {row['account']}")
            for line in progress_lines(row):
                click.echo(line)
            for line in failed.get(row["id"], ()):
                click.echo(f"  {line}")  # why an item failed


@runs.command("show")
@click.argument("run_id", metavar="RUN")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--store", "store_opt", default=None, help=_STORE_HELP)
def show(run_id: str, as_json: bool, store_opt: str | None) -> None:
    """Show RUN and its lanes: item, state, saved-aside ref, whether it is claimed.

    A run of an account bound to this account's stop is shown as it published it
    (its record: lanes, stages, a stop's progress).

    \b
    Examples:
      tether runs show run_3f9a0c1b2d4e-1
      tether runs show run_3f9a0c1b2d4e-1 --json | jq .lanes
    """
    from ..errors import UsageError
    from ..runs._views import show_run

    try:
        shown = show_run(run_id, store_opt)
    except UsageError:
        published = _published(run_id)
        if published is None:
            raise
        if as_json:
            echo_json(published)
            return
        from ._seatview import progress_lines, run_line

        click.echo(f"run {run_line(published)}")
        for lane in published.get("lanes") or ():
            click.echo(
                f"  {lane.get('item')}  {lane.get('state')}  {lane.get('stage')}"
            )
        for line in progress_lines(published):
            click.echo(line)
        return
    if as_json:
        echo_json(shown)
        return
    click.echo(f"run {shown['id']}  {shown['state']}")
    for lane in shown["lanes"]:
        claimed = "claimed" if lane["claimed"] else "released"
        saved = lane["saved_ref"] or "-"
        click.echo(f"  {lane['item']}  {lane['state']}  {claimed}  {saved}")


def _published(run_id: str) -> dict[str, Any] | None:
    """The record a bound account published for `run_id`, if any."""
    from ._seatview import seat_runs

    _, records, _ = seat_runs()
    return next((r for r in records if r.get("id") == run_id), None)
