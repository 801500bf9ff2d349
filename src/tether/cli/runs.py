"""`tether runs [show RUN]`: the runs in the ledger and their lanes."""

from __future__ import annotations

import click

from ._output import echo_json

__all__ = ("runs",)

_STORE_HELP = "A SQLite file or postgresql:// URL [env var: TETHER_STORE]."


@click.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON list.")
@click.option("--store", "store_opt", default=None, help=_STORE_HELP)
@click.pass_context
def runs(ctx: click.Context, as_json: bool, store_opt: str | None) -> None:
    """List this account's runs with their state (a dead run is found and shown dead).

    \b
    Examples:
      tether runs
      tether runs --json | jq -r '.[] | select(.state == "halted") | .id'
      tether runs show run_3f9a0c1b2d4e-1 --json
    """
    if ctx.invoked_subcommand is not None:
        return
    from ..runs._views import failures, list_runs

    rows = list_runs(store_opt)
    if as_json:
        echo_json(rows)
    elif not rows:
        click.echo("no runs")
    else:
        failed = failures(store_opt)
        for row in rows:
            click.echo(f"{row['id']}  {row['state']}")
            for line in failed.get(row["id"], ()):
                click.echo(f"  {line}")  # why an item failed


@runs.command("show")
@click.argument("run_id", metavar="RUN")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--store", "store_opt", default=None, help=_STORE_HELP)
def show(run_id: str, as_json: bool, store_opt: str | None) -> None:
    """Show RUN and its lanes: item, state, saved-aside ref, whether it is claimed.

    \b
    Examples:
      tether runs show run_3f9a0c1b2d4e-1
      tether runs show run_3f9a0c1b2d4e-1 --json | jq .lanes
    """
    from ..runs._views import show_run

    shown = show_run(run_id, store_opt)
    if as_json:
        echo_json(shown)
        return
    click.echo(f"run {shown['id']}  {shown['state']}")
    for lane in shown["lanes"]:
        claimed = "claimed" if lane["claimed"] else "released"
        saved = lane["saved_ref"] or "-"
        click.echo(f"  {lane['item']}  {lane['state']}  {claimed}  {saved}")
