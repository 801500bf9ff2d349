"""`tether lift`: the person removes the recorded stop."""

from __future__ import annotations

import click

__all__ = ("lift",)


@click.command()
def lift() -> None:
    """Lift the stop and append a lift record (who, when) to the lift log.

    Runs that honour this account and were waiting on a hold go on at their next read;
    a run that halted stays halted until `tether takeover RUN`. Refused (exit 2)
    without a terminal or inside an agent session.

    \b
    Examples:
      tether lift
      tether status && tether lift
    """
    from ..stop import check_caller, lift_stop
    from ._stopview import emit

    check_caller("lift")
    result = lift_stop()
    if not result.lifted:
        emit([("info", f"no stop to lift at {result.stop_path}")])
        return
    set_at = result.stop_set_at.isoformat() if result.stop_set_at else "?"
    emit(
        [
            ("ok", f"lifted: {result.stop_path} (set at {set_at})"),
            ("info", f"lift recorded at {result.lifted_at.isoformat()}"),
        ]
    )
