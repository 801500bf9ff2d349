"""`tether setup`: choose the shared folder (or none) and the person honoured."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
import click

from ._output import echo_json

if TYPE_CHECKING:
    from ..stop import Board

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
    help="Accept a folder on vfat/ntfs/NFS/SMB/FUSE/... (the board says what it costs).",
)
@click.option(
    "--system",
    is_flag=True,
    help="As root: bind agents' accounts (--account) to the person's stop, in /etc/tether.",
)
@click.option(
    "--account",
    "accounts",
    multiple=True,
    metavar="USER",
    help="With --system: an account the agents run as (repeat for several).",
)
@click.option(
    "--remove",
    is_flag=True,
    help="With --system: take the binding back (of --account, or of every account).",
)
def setup(
    shared_folder: Path | None,
    no_shared_folder: bool,
    person: str | None,
    as_json: bool,
    allow_untrusted_fs: bool,
    system: bool,
    accounts: tuple[str, ...],
    remove: bool,
) -> None:
    """Record where the stop lives and whose stop this account honours; show the board.

    The board lists every check of the folder rule (pass/fail with the path), the
    folders an age cleaner tends, the reading now and any stop not honoured. Run by the
    person, it makes <folder>/<uid>/ with mode 0755. The folder cannot change while a
    stop stands in it (lift first). Refused (exit 2) without a terminal or inside an
    agent session. TETHER_HOME roots the account's setup record.

    An account's own record is its own to change, so it cannot bind it: root binds the
    agents' accounts once with --system (recorded in /etc/tether/binding.json, never
    taken from the environment). A bound account honours the person's stop whatever
    its own record says, and its runs hold while it could change tether's code.

    \b
    Examples:
      tether setup                                   own store, this account
      tether setup --shared-folder /srv/tether       the person's account
      tether setup --shared-folder /srv/tether --person alice   an agents' account
      tether setup --no-shared-folder --json
      sudo tether setup --system --shared-folder /srv/tether --person alice --account agents
      sudo tether setup --system --remove
    """
    from ..errors import UsageError
    from ..stop import check_caller, choose_setup
    from ..stop._board import KEEP
    from ..stop._setup import person_uid_from
    from ._stopview import board_json, board_lines, emit

    if shared_folder is not None and no_shared_folder:
        raise UsageError("give --shared-folder PATH or --no-shared-folder, not both")
    if system or accounts or remove:
        if not system:
            raise UsageError("--account and --remove go with --system")
        _system(shared_folder, person, accounts, remove, allow_untrusted_fs, as_json)
        return
    check_caller("setup")
    folder: Path | None = KEEP
    if shared_folder is not None:
        folder = shared_folder
    elif no_shared_folder:
        folder = None
    uid = person_uid_from(person) if person is not None else os.geteuid()
    board = with_containment(
        choose_setup(
            folder=folder, person_uid=uid, allow_untrusted_fs=allow_untrusted_fs
        )
    )
    if as_json:
        echo_json(board_json(board))
        return
    emit(board_lines(board))


def with_containment(board: Board) -> Board:
    """The board with the containment process trees get here, and why.

    `refused`, with the reason, when `TETHER_CONTAINMENT` cannot be honoured (every
    process tree would fail to start).
    """
    from ..errors import UsageError
    from ..host import containment

    try:
        found = containment()
    except UsageError as exc:
        return attrs.evolve(board, containment=("refused", str(exc)))
    return attrs.evolve(board, containment=(found.kind, found.reason))


def _system(
    shared_folder: Path | None,
    person: str | None,
    accounts: tuple[str, ...],
    remove: bool,
    allow_untrusted_fs: bool,
    as_json: bool,
) -> None:
    """`tether setup --system`: root binds (or unbinds) the agents' accounts."""
    from ..errors import UsageError
    from ..stop import check_caller
    from ..stop._setup import person_uid_from
    from ..stop._sysboard import bind_accounts, unbind_accounts
    from ._stopview import emit, system_board_json, system_board_lines

    uids = [person_uid_from(name) for name in accounts]
    if remove:
        if shared_folder is not None or person is not None:
            raise UsageError(
                "--remove takes only --account (or nothing: every account)"
            )
        check_caller("setup --system")
        board = unbind_accounts(accounts=uids)
    else:
        if shared_folder is None or person is None or not uids:
            raise UsageError(
                "setup --system needs --shared-folder PATH, --person USER and at least "
                "one --account USER"
            )
        check_caller("setup --system")
        board = bind_accounts(
            folder=shared_folder,
            person_uid=person_uid_from(person),
            accounts=uids,
            allow_untrusted_fs=allow_untrusted_fs,
        )
    if as_json:
        echo_json(system_board_json(board))
        return
    emit(system_board_lines(board))
