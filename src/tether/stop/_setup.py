"""The setup record of the recorded stop: the folder (or none) and the person honoured.

One owner-only JSON file per account, `<config dir>/stop-setup.json`, written with
`write_atomic` (mode 0600). With no record the defaults hold: no shared folder, the stop in
the account's own store (`<state dir>/stop/<uid>/stop`), and the person is the calling
account. This module knows where things live; it does not judge folders (`_folder`) or
read stops (`_reader`).
"""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path

import attrs

from .._env import TetherEnv
from .._fs import write_atomic
from ..errors import UsageError
from ._locations import (
    SETUP_FILE_NAME,
    STOP_NAME,
    folder_text,
    own_store_text,
    read_setup_fields,
    setup_text,
)

__all__ = (
    "LIFT_LOG_NAME",
    "MAX_STOP_SIZE",
    "SETUP_FILE_NAME",
    "STOP_NAME",
    "SetupRecord",
    "account_home",
    "load_setup",
    "make_state_dir",
    "own_store",
    "person_uid_from",
    "save_setup",
    "setup_path",
)

LIFT_LOG_NAME = "lifts.jsonl"
"""Name of the lift log (one JSON object a line) inside `<folder>/<uid>/`."""
MAX_STOP_SIZE = 4096
"""A stop file larger than this is malformed and holds (spec 02: a small bound)."""

_RECORD_VERSION = 1


@attrs.frozen(kw_only=True)
class SetupRecord:
    """What one account chose at setup: where the stop lives and whose stop it honours."""

    folder: Path | None = None
    """The shared folder (absolute, canonical), or None for the account's own store."""
    person_uid: int
    """The account whose stop this account's runs honour."""
    allow_untrusted_fs: bool = False
    """Opt-in to a folder on a filesystem whose owners cannot be trusted."""

    @property
    def store_dir(self) -> Path:
        """The directory holding the uid directories: the shared folder or the own store."""
        return self.folder if self.folder is not None else own_store()

    @property
    def uid_dir(self) -> Path:
        """`<folder>/<uid>/`: where the person's stop and lift log live."""
        return self.store_dir / str(self.person_uid)

    @property
    def stop_path(self) -> Path:
        """`<folder>/<uid>/stop`."""
        return self.uid_dir / STOP_NAME

    def to_json(self) -> dict[str, object]:
        """The record as it is stored."""
        return {
            "version": _RECORD_VERSION,
            "folder": None if self.folder is None else str(self.folder),
            "person_uid": self.person_uid,
            "allow_untrusted_fs": self.allow_untrusted_fs,
        }


def setup_path() -> Path:
    """The account's setup record file."""
    return Path(setup_text())


def own_store() -> Path:
    """The account's own store of stops, `<state dir>/stop/`."""
    return Path(own_store_text())


def make_state_dir() -> Path:
    """Make the account's state dir and what is missing above it; return it.

    The home `TETHER_HOME` names is made too if missing; each level is mode 0700.

    No set-up is one rule: `tether stop`, `tether lift` and `tether run` all make it
    before they read, so on an account never set up the stop the person sets is the one
    its runs read (`docs/recorded-stop.md`, "No set-up").

    Raises:
        OSError: it cannot be made (a file in the way, no right to write the parent).
    """
    where = Path(own_store_text()).parent
    missing: list[Path] = []
    level = where
    while not level.is_dir() and level != level.parent:
        missing.append(level)
        level = level.parent
    for level in reversed(missing):
        # Each level owner-only (`Path.mkdir(parents=True)` gives parents the umask's).
        level.mkdir(mode=0o700, exist_ok=True)
    return where


def account_home() -> Path:
    """The root of the account's tether files: `TETHER_HOME`, else the home directory."""
    home = os.environ.get(TetherEnv.HOME)
    return Path(home) if home else Path.home()


def check_folder_path(folder: Path) -> Path:
    """Return `folder` if it is absolute and normal (no `.`, `..` or empty parts).

    Raises:
        UsageError: the path is relative or not normal.
    """
    folder_text(str(folder))
    return folder


def load_setup() -> SetupRecord:
    """Read the account's setup record; the defaults when there is none.

    Raises:
        StoreError: the record breaks the owner-only rule or is not a valid record.
    """
    fields = read_setup_fields()
    if fields is None:
        return SetupRecord(person_uid=os.geteuid())
    folder, person, allow = fields
    return SetupRecord(
        folder=None if folder is None else Path(folder),
        person_uid=person,
        allow_untrusted_fs=allow,
    )


def save_setup(record: SetupRecord) -> Path:
    """Write the setup record (owner-only, atomically); return its path.

    Raises:
        OSError: the config dir cannot be made or the file cannot be written.
    """
    where = setup_path()
    where.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    data = json.dumps(record.to_json(), indent=2, sort_keys=True) + "\n"
    write_atomic(where, data.encode(), mode=0o600)
    return where


def person_uid_from(text: str) -> int:
    """Return the uid of an account named by login name or by number.

    Raises:
        UsageError: no account has that name, or the number is not a uid.
    """
    if text.isascii() and text.isdigit():
        return int(text)
    try:
        return pwd.getpwnam(text).pw_uid
    except KeyError:
        raise UsageError(
            f"no account named {text!r}; give a login name or a numeric uid"
        ) from None
