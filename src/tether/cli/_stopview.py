"""Text and JSON for the stop's verbs: the board, a reading, `status --json`.

Lines carry a style named for what they mean (`ok`, `alarm` for a stop set, `fail` for
a failure only, `warn`, `head`, `info`); `emit` prints them with rich on a terminal and
as plain text otherwise. Nothing here decides an outcome.
"""

from __future__ import annotations

import pwd
import sys
from typing import Literal

import click

from ..stop import Board, ReadOutcome, StopReading, StopStore, SystemBoard
from ..stop._system import binding_path

__all__ = (
    "Line",
    "binding_lines",
    "board_json",
    "board_lines",
    "emit",
    "reading_lines",
    "status_json",
    "system_board_json",
    "system_board_lines",
)

Style = Literal["ok", "alarm", "fail", "warn", "head", "info"]
"""How a line is shown."""
Line = tuple[Style, str]

_RICH_STYLE: dict[Style, str] = {
    "ok": "green",
    "alarm": "bold red",
    "fail": "bold red",
    "warn": "yellow",
    "head": "bold",
    "info": "",
}


def _who(uid: int | None) -> str:
    if uid is None:
        return "uid ?"
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def reading_lines(reading: StopReading, stop_reason: str | None = None) -> list[Line]:
    """The reading as the board and `tether status` show it.

    It carries the person's `--reason` when the caller read it.
    """
    lines: list[Line] = []
    match reading.outcome:
        case ReadOutcome.CLEAR:
            lines.append(("ok", f"CLEAR: no stop at {reading.stop_path}"))
        case ReadOutcome.STOPPED:
            assert reading.set_at is not None
            assert reading.ctime is not None
            lines.append(("alarm", f"STOPPED: stop at {reading.stop_path}"))
            lines.append(("info", f"  set by {_who(reading.set_by_uid)}"))
            if stop_reason is not None:
                lines.append(("info", f"  reason {stop_reason}"))
            lines.append(("info", f"  set at {reading.set_at.isoformat()} (mtime)"))
            lines.append(("info", f"  changed {reading.ctime.isoformat()} (ctime)"))
            lines.append(("info", f"  links {reading.nlink}"))
        case ReadOutcome.HOLD:
            lines.append(("warn", f"HOLD: {reading.reason}"))
    lines.extend(("warn", str(item)) for item in reading.not_honoured)
    lines.extend(("warn", note) for note in reading.notes)
    return lines


def binding_lines(store: StopStore) -> list[Line]:
    """What `tether status` says about the system binding of this account."""
    bound = store.binding
    if bound is None:
        return []
    return [
        (
            "info",
            f"bound by {binding_path(store.system_dir)}: this account honours "
            f"{_who(bound.person_uid)}'s stop in {bound.folder}",
        )
    ]


def status_json(
    reading: StopReading, stop_reason: str | None = None
) -> dict[str, object]:
    """`tether status --json`: exactly the shape of spec 02."""
    stopped = reading.outcome is ReadOutcome.STOPPED
    return {
        "outcome": str(reading.outcome),
        "reason": reading.reason if reading.outcome is ReadOutcome.HOLD else None,
        "set_by_uid": reading.set_by_uid if stopped else None,
        "set_at": reading.set_at.isoformat() if stopped and reading.set_at else None,
        "stop_reason": stop_reason if stopped else None,
        "folder": None if reading.folder is None else str(reading.folder),
        "not_honoured": [
            {"path": str(n.path), "owner_uid": n.owner_uid, "why": n.why}
            for n in reading.not_honoured
        ],
        "runs": [],
    }


def board_lines(board: Board) -> list[Line]:
    """The setup board."""
    rec = board.record
    where = "own store (no shared folder)" if rec.folder is None else str(rec.folder)
    lines: list[Line] = [
        ("head", "tether setup"),
        ("info", f"  recorded in   {board.setup_file}"),
        ("info", f"  folder        {where}: {rec.store_dir}"),
        (
            "info",
            f"  person        {_who(rec.person_uid)}: this account honours their stop",
        ),
        ("info", f"  this account  {_who(board.account_uid)}"),
        ("head", "folder rule"),
    ]
    for check in board.checks:
        mark = "pass" if check.ok else "FAIL"
        lines.append(
            ("ok" if check.ok else "fail", f"  {mark}  {check.path}: {check.detail}")
        )
    lines.append(("head", "age cleaners"))
    lines.extend(
        ("info", f"  {c.path} older than {c.age} ({c.source})") for c in board.cleaners
    )
    lines.append(("head", "now"))
    lines.extend(reading_lines(board.reading))
    if board.containment is not None:
        kind, reason = board.containment
        shown: dict[str, Style] = {"namespace": "ok", "subreaper": "warn"}
        style = shown.get(kind, "fail")
        lines.append(("head", "containment of process trees"))
        lines.append((style, f"  {kind}: {reason}"))
    if board.notes:
        lines.append(("head", "notes"))
        lines.extend(("warn", f"  {note}") for note in board.notes)
    return lines


def board_json(board: Board) -> dict[str, object]:
    """`tether setup --json`."""
    rec = board.record
    return {
        "setup_file": str(board.setup_file),
        "folder": None if rec.folder is None else str(rec.folder),
        "store_dir": str(rec.store_dir),
        "person_uid": rec.person_uid,
        "account_uid": board.account_uid,
        "allow_untrusted_fs": rec.allow_untrusted_fs,
        "same_account": board.same_account,
        "ok": board.ok,
        "checks": [
            {"path": str(c.path), "ok": c.ok, "detail": c.detail} for c in board.checks
        ],
        "age_cleaned": [
            {"path": str(c.path), "age": c.age, "source": c.source}
            for c in board.cleaners
        ],
        "tended_by_age_cleaner": board.tended_by is not None,
        "status": status_json(board.reading),
        "notes": list(board.notes),
        "containment": None
        if board.containment is None
        else {"kind": board.containment[0], "reason": board.containment[1]},
    }


def system_board_lines(board: SystemBoard) -> list[Line]:
    """The board of `tether setup --system`."""
    lines: list[Line] = [
        ("head", "tether setup --system"),
        ("info", f"  recorded in   {board.path}"),
        ("head", "bound accounts"),
    ]
    if not board.bindings:
        lines.append(("info", "  none: every account honours only its own setup"))
    lines.extend(
        (
            "info",
            f"  {_who(b.account_uid)} honours {_who(b.person_uid)}'s stop in {b.folder}",
        )
        for b in board.bindings
    )
    if board.checks:
        lines.append(("head", "folder rule"))
        for check in board.checks:
            mark = "pass" if check.ok else "FAIL"
            style: Style = "ok" if check.ok else "fail"
            lines.append((style, f"  {mark}  {check.path}: {check.detail}"))
    if board.installs:
        lines.append(("head", "install"))
    for uid, why in board.installs:
        if why is None:
            lines.append(
                ("ok", f"  pass  {_who(uid)} cannot change the code its runs execute")
            )
        else:
            lines.append(("fail", f"  FAIL  {why}; until then its runs hold"))
    lines.append(("head", "notes"))
    lines.extend(("warn", f"  {note}") for note in board.notes)
    return lines


def system_board_json(board: SystemBoard) -> dict[str, object]:
    """`tether setup --system --json`."""
    installs = dict(board.installs)
    return {
        "binding_file": str(board.path),
        "bindings": [
            {
                **binding.to_json(),
                "install_ok": installs.get(binding.account_uid) is None,
                "install_reason": installs.get(binding.account_uid),
            }
            for binding in board.bindings
        ],
        "checks": [
            {"path": str(c.path), "ok": c.ok, "detail": c.detail} for c in board.checks
        ],
        "notes": list(board.notes),
    }


def emit(lines: list[Line], *, err: bool = False) -> None:
    """Print lines: rich on a terminal, plain text otherwise."""
    stream = sys.stderr if err else sys.stdout
    if stream.isatty():
        from rich.text import Text

        from .._term import rich_console

        console = rich_console(stream)
        for style, text in lines:
            console.print(Text(text, style=_RICH_STYLE[style]))
        return
    for _, text in lines:
        click.echo(text, err=err)
