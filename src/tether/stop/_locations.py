"""Where the stop's own files are, as text, and the setup record's fields as read.

The setup record (`<config dir>/stop-setup.json`), the account's own store of stops
(`<state dir>/stop/`) and the system binding (`<system dir>/binding.json`): their
places, and the checked fields of the setup record. `_setup` and `_system` build their
`Path`s and attrs records on these; `_protected` lists the protected paths from them.

Why text: the per-call hook (`tether guard --claude-hook`, spec 05: at most 3x a bare
interpreter's start) lists the protected paths on every agent tool call, and attrs,
`pathlib` and platformdirs cost it more than the rest of its start
(`docs/benchmarks.md`, "Guard hook start-up"). Every text is what `str(Path(...))`
of the same place gives (`tether._dirs.path_text`), so the two compare alike.
"""

from __future__ import annotations

import functools
import json
import os
import posixpath
import sys

from .._dirs import config_dir, path_text, state_dir

__all__ = (
    "BINDING_NAME",
    "SETUP_FILE_NAME",
    "STOP_NAME",
    "SYSTEM_DIR_TEXT",
    "folder_text",
    "joined",
    "own_store_text",
    "read_setup_fields",
    "setup_text",
    "system_dir_text",
)

SETUP_FILE_NAME = "stop-setup.json"
"""File name of the setup record inside the account's config dir."""
STOP_NAME = "stop"
"""Name of the stop file inside `<folder>/<uid>/`."""
BINDING_NAME = "binding.json"
"""The binding's file name inside the system dir."""
SYSTEM_DIR_TEXT = "/etc/tether"
"""Where root records the binding: fixed here, never from the environment."""

_RECORD_VERSION = 1
_MAX_RECORD_BYTES = 64 * 1024


def joined(folder: str, name: str) -> str:
    """`str(Path(folder) / name)`."""
    return path_text(posixpath.join(folder, name))


def setup_text() -> str:
    """The account's setup record file."""
    return joined(config_dir(), SETUP_FILE_NAME)


def own_store_text() -> str:
    """The account's own store of stops, `<state dir>/stop/`."""
    return joined(state_dir(), "stop")


def system_dir_text(system_dir: str | os.PathLike[str] | None) -> str:
    """The system dir with its parent resolved (`/etc` is a link on macOS).

    None: `_system.SYSTEM_DIR` once `_system` is loaded (tests put a folder of their
    own in its place in-process), else the constant it holds, `SYSTEM_DIR_TEXT`.
    """
    if system_dir is None:
        loaded = sys.modules.get(f"{__package__}._system")
        system_dir = SYSTEM_DIR_TEXT if loaded is None else loaded.SYSTEM_DIR
    return _resolved(path_text(os.fspath(system_dir)))


@functools.lru_cache(maxsize=8)
def _resolved(given: str) -> str:
    # Resolved once: `realpath` costs more than the rest of a reading's look at the
    # binding. `str(Path(realpath(parent)) / name)`, as pathlib splits `given`.
    parent, name = posixpath.split(given)
    return joined(path_text(os.path.realpath(parent or ".")), name)


def folder_text(text: str) -> str:
    """`text` as a path if it is absolute and normal (no `.`, `..` or empty parts).

    Raises:
        UsageError: the path is relative or not normal.
    """
    text = path_text(text)
    if not text.startswith("/") or os.path.normpath(text) != text or "\0" in text:
        from ..errors import UsageError

        raise UsageError(
            f"the shared folder must be an absolute, normal path, not {text!r}"
        )
    return text


def read_setup_fields() -> tuple[str | None, int, bool] | None:
    """The account's setup record as (folder, person_uid, allow_untrusted_fs).

    None when there is none (the defaults hold).

    Raises:
        StoreError: the record breaks the owner-only rule or is not a valid record.
    """
    where = setup_text()
    try:
        st = os.stat(where, follow_symlinks=False)
    except FileNotFoundError:
        return None  # the common case: the checks below are not even imported
    except OSError as exc:
        from ..errors import StoreError

        raise StoreError(f"cannot check the setup record {where}: {exc}") from None
    from .._fs import judge_owner_only
    from ..errors import StoreError

    try:
        judge_owner_only(st, where)  # `_fs.check_owner_only`, on the stat above
    except OSError as exc:
        raise StoreError(f"cannot check the setup record {where}: {exc}") from None
    try:
        fd = os.open(where, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            # Judge what was opened, not only the name a moment before.
            judge_owner_only(os.fstat(fd), where)
            raw = os.read(fd, _MAX_RECORD_BYTES + 1)
        finally:
            os.close(fd)
        if len(raw) > _MAX_RECORD_BYTES:
            raise StoreError(f"{where} is too large to be a setup record")
        data = json.loads(raw)
    except (OSError, ValueError) as exc:
        raise StoreError(f"cannot read the setup record {where}: {exc}") from None
    return _fields_from(data, where)


def _fields_from(data: object, where: str) -> tuple[str | None, int, bool]:
    from ..errors import StoreError, UsageError

    if not isinstance(data, dict):
        raise StoreError(
            f"{where} is not a setup record (a JSON object); run tether setup"
        )
    folder = data.get("folder")
    person = data.get("person_uid")
    allow = data.get("allow_untrusted_fs", False)
    if data.get("version") != _RECORD_VERSION:
        raise StoreError(f"{where} has an unknown version; run tether setup again")
    if folder is not None and not isinstance(folder, str):
        raise StoreError(f"{where}: folder must be a path or null; run tether setup")
    if not isinstance(person, int) or isinstance(person, bool) or person < 0:
        raise StoreError(f"{where}: person_uid must be a uid; run tether setup")
    if not isinstance(allow, bool):
        raise StoreError(f"{where}: allow_untrusted_fs must be true or false")
    try:
        path = None if folder is None else folder_text(folder)
    except UsageError as exc:
        raise StoreError(f"{where}: {exc}; run tether setup") from None
    return path, person, allow
