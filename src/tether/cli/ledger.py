"""`tether ledger`: what happened to each tool call, read from a SQLite ledger file."""

from __future__ import annotations

import datetime
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

import click

from .._mcptasks import CallStateValue
from ..errors import UsageError
from ._output import echo_json

if TYPE_CHECKING:
    from ..runtime import CallRecord

__all__ = ("ledger",)

_STATES = get_args(CallStateValue)


def _when(at: float | None) -> str:
    if at is None:
        return "-"
    return datetime.datetime.fromtimestamp(at).strftime("%Y-%m-%d %H:%M:%S")


def _record_json(r: CallRecord) -> dict[str, Any]:
    import attrs

    out = attrs.asdict(r)
    out["state"] = str(r.state)
    out["code"] = None if r.code is None else str(r.code)
    out["settled"] = r.settled
    return out


def _sessions(records: list[CallRecord]) -> list[dict[str, Any]]:
    by_session: dict[str, list[CallRecord]] = {}
    for r in records:
        by_session.setdefault(r.session_id, []).append(r)
    return [
        {
            "session_id": sid,
            "turns": len({r.turn_id for r in calls}),
            "calls": len(calls),
            "first_call_at": min(r.requested_at for r in calls),
            "states": dict(Counter(str(r.state) for r in calls)),
        }
        for sid, calls in by_session.items()
    ]


def _one_line(text: str | None, width: int = 60) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _show_calls(records: list[CallRecord]) -> None:
    turn = None
    for r in records:
        if r.turn_id != turn:
            turn = r.turn_id
            click.echo(f"turn {turn}  (session {r.session_id})")
        code = f" {r.code}" if r.code else ""
        click.echo(
            f"  {r.call_id}  {r.tool}  {r.state}{code}  {_when(r.requested_at)}"
            f"  input {_one_line(r.input) or '-'}"
        )
        if r.abort_source is not None:
            reason = f" ({r.abort_reason})" if r.abort_reason else ""
            click.echo(
                f"    stopped by {r.abort_source}{reason} at {_when(r.stopped_at)}"
            )
        if r.error:
            click.echo(f"    error: {_one_line(r.error, 100)}")
        elif r.output:
            click.echo(f"    output: {_one_line(r.output, 100)}")


def _pick_session(records: list[CallRecord], session: str) -> str:
    ids = list(dict.fromkeys(r.session_id for r in records))
    if session in ids:
        return session
    matches = [sid for sid in ids if sid.startswith(session)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise UsageError(
            f"no session {session!r} in the ledger; `tether ledger` lists the sessions"
        )
    raise UsageError(f"{session!r} names {len(matches)} sessions; give more of the id")


def default_ledger() -> Path:
    """The account's ledger file (the one `tether chat` writes)."""
    from .chat import ledger_path

    return ledger_path()


@click.command()
@click.argument("session", required=False)
@click.option(
    "--file",
    "file",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="A ledger file (Runtime(ledger=...)); default: the account's ledger.",
)
@click.option(
    "--state",
    type=click.Choice(_STATES),
    multiple=True,
    help="Only calls in this state (repeatable).",
)
@click.option("--tool", "tools", multiple=True, help="Only calls of this tool.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def ledger(
    session: str | None,
    file: Path | None,
    state: tuple[str, ...],
    tools: tuple[str, ...],
    as_json: bool,
) -> None:
    """Show what happened to each tool call: sessions, turns and calls.

    Without SESSION, the sessions of the ledger (with --state or --tool, the matching
    calls of every session). With SESSION (or a unique start of its id), its calls turn
    by turn: the call id, tool, final state and code, its input, who stopped it and
    when, and the head of its output or its error. --json gives every field, with the
    output's head and tail as the ledger keeps them.

    \b
    Examples:
      tether ledger
      tether ledger session_1f2e --state aborted
      tether ledger --file ledger.sqlite --tool Bash --json
    """
    from ..runtime._ledger import read_ledger_file

    path = file if file is not None else default_ledger()
    if file is None and not path.exists() and not session:
        # A fresh home: the default ledger is not made yet, so there is nothing in it.
        if as_json:
            echo_json({"ledger": str(path), "sessions": []})
        else:
            click.echo(f"Ledger {path}: 0 sessions (nothing has run yet)")
        return
    if not path.is_file():
        raise UsageError(
            f"no ledger at {path}; name one with --file "
            "(Runtime(ledger=...) and `tether chat` write them)"
        )
    records = read_ledger_file(path)
    picked = _pick_session(records, session) if session else None
    calls = [
        r
        for r in records
        if (picked is None or r.session_id == picked)
        and (not state or str(r.state) in state)
        and (not tools or r.tool in tools)
    ]
    listing_sessions = picked is None and not state and not tools
    if as_json:
        if listing_sessions:
            echo_json({"ledger": str(path), "sessions": _sessions(records)})
        else:
            echo_json(
                {
                    "ledger": str(path),
                    "session_id": picked,
                    "calls": [_record_json(r) for r in calls],
                }
            )
        return
    if listing_sessions:
        sessions = _sessions(records)
        click.echo(f"Ledger {path}: {len(sessions)} sessions")
        for s in sessions:
            states = ", ".join(f"{k} {v}" for k, v in sorted(s["states"].items()))
            click.echo(
                f"  {s['session_id']}  {_when(s['first_call_at'])}  "
                f"{s['turns']} turns, {s['calls']} calls: {states}"
            )
        return
    if not calls:
        click.echo("No call matches.")
        return
    _show_calls(calls)
