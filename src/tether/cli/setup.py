"""`tether setup`: choose the shared folder (or none) and the person honoured."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

__all__ = ("setup",)


@click.command()
@click.option(
    "--shared-folder",
    type=click.Path(path_type=Path),
    metavar="PATH",
    help="A folder the person and the agents' accounts share (e.g. /srv/tether).",
)
@click.option(
    "--no-shared-folder",
    is_flag=True,
    help="Keep the stop in this account's own store.",
)
@click.option(
    "--person",
    metavar="USER",
    help="Login name or uid whose stop this account honours [default: this account].",
)
@click.option("--json", "as_json", is_flag=True, help="Print the board as JSON.")
@click.option(
    "--allow-untrusted-fs",
    is_flag=True,
    help="Accept a folder on vfat/ntfs/NFS/SMB/sshfs/... (the board says what it costs).",
)
def setup(
    shared_folder: Path | None,
    no_shared_folder: bool,
    person: str | None,
    as_json: bool,
    allow_untrusted_fs: bool,
) -> None:
    """Record where the stop lives and whose stop this account honours; show the board.

    The board lists every check of the folder rule (pass/fail with the path), the
    folders an age cleaner tends, the reading now and any stop not honoured. Run by the
    person, it makes <folder>/<uid>/ with mode 0755. The folder cannot change while a
    stop stands in it (lift first). Refused (exit 2) without a terminal or inside an
    agent session. TETHER_HOME roots the account's setup record.

    \b
    Examples:
      tether setup                                   own store, this account
      tether setup --shared-folder /srv/tether       the person's account
      tether setup --shared-folder /srv/tether --person alice   an agents' account
      tether setup --no-shared-folder --json
    """
    from ..errors import UsageError
    from ..stop import check_caller, choose_setup
    from ..stop._board import KEEP
    from ..stop._render import board_json, board_lines, emit
    from ..stop._setup import person_uid_from

    if shared_folder is not None and no_shared_folder:
        raise UsageError("give --shared-folder PATH or --no-shared-folder, not both")
    check_caller("setup")
    folder: Path | None = KEEP
    if shared_folder is not None:
        folder = shared_folder
    elif no_shared_folder:
        folder = None
    uid = person_uid_from(person) if person is not None else os.geteuid()
    board = choose_setup(
        folder=folder, person_uid=uid, allow_untrusted_fs=allow_untrusted_fs
    )
    if as_json:
        sys.stdout.write(json.dumps(board_json(board), indent=2) + "\n")
        return
    emit(board_lines(board))
