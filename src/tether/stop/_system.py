"""The system binding: a root-owned record that an agents' account honours a person's stop.

An account's own setup record is writable by that account, so on its own it cannot bind
it. `tether setup --system`, run by root, records in `<system dir>/binding.json`
(`/etc/tether/` by default) which accounts honour which person's stop in which folder.
Every reading of a bound account reads this record first; its own record and
`TETHER_HOME`/`HOME` may add stops, never remove one.

Where the record lives is a constant of the package, never taken from the environment
or from a file the account writes; the Python API takes it as a keyword argument
(tests pass a folder of their own), which only code the account runs itself can change,
and a bound account's runs hold when it could change tether's code (`install_hold_reason`).

A record that cannot be checked (not root's, writable by others, unreadable, malformed)
raises `BindingUnchecked`, which every reading turns into HOLD. This module reads and
writes the record; it does not read stops (`_reader`) or choose an account's own setup
(`_board`).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import grp
import json
import os
import pwd
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING, final

import attrs

from .._fs import write_atomic
from ..errors import TetherError
from ._bounded import Hung, Progress
from ._folder import DIR_FLAGS, RuleBroken, open_folder
from ._locations import BINDING_NAME, SYSTEM_DIR_TEXT, system_dir_text
from ._mounts import Table, plan
from ._reader import READ_BOUND, within_bound
from ._setup import check_folder_path
from ._statx import stamp as look_stamp

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = (
    "BINDING_NAME",
    "INSTALL_ADVICE",
    "SYSTEM_DIR",
    "Binding",
    "BindingLook",
    "BindingUnchecked",
    "SystemBinding",
    "binding_path",
    "binding_stamp",
    "code_writable_reason",
    "install_hold_reason",
    "load_binding",
    "save_binding",
)

SYSTEM_DIR = Path(SYSTEM_DIR_TEXT)
"""Where root records the binding: fixed here, never from the environment."""
INSTALL_ADVICE = (
    "a bound account's runs need a system-wide, root-owned install of tether that the "
    "account cannot write: as root, from a clone of tether, python3 -m venv /opt/tether "
    "&& /opt/tether/bin/pip install . ; the account then runs /opt/tether/bin/tether"
)
"""Which install satisfies a binding; the board and the docs say it."""

_VERSION = 1
_MAX_BYTES = 256 * 1024
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


class BindingUnchecked(TetherError):
    """The system binding exists but cannot be checked; the message says why."""


@attrs.frozen(kw_only=True)
class Binding:
    """One bound account: it honours the person's stop in the folder."""

    account_uid: int
    """The agents' account bound."""
    person_uid: int
    """The person whose stop it honours."""
    folder: Path
    """The shared folder (absolute, normal)."""
    allow_untrusted_fs: bool = False
    """Root opted in to a folder on a filesystem whose owners cannot be trusted."""

    def to_json(self) -> dict[str, object]:
        """The entry as it is stored."""
        return {
            "account_uid": self.account_uid,
            "person_uid": self.person_uid,
            "folder": str(self.folder),
            "allow_untrusted_fs": self.allow_untrusted_fs,
        }


@attrs.frozen(kw_only=True)
class SystemBinding:
    """The whole record: every bound account."""

    path: Path
    """Where it was read."""
    bindings: tuple[Binding, ...]
    """One entry per bound account."""

    def for_account(self, uid: int) -> Binding | None:
        """The binding of `uid`, or None when that account is not bound."""
        for binding in self.bindings:
            if binding.account_uid == uid:
                return binding
        return None


def _real_dir(system_dir: Path | None) -> Path:
    # Read at each call, so a test can put a folder of its own in its place in-process.
    # The parent (`/etc`) is root's; on macOS it is a link to /private/etc.
    return Path(system_dir_text(SYSTEM_DIR if system_dir is None else system_dir))


def binding_path(system_dir: Path | None = None) -> Path:
    """The file of the system binding."""
    return _real_dir(system_dir) / BINDING_NAME


def _uid(value: object, what: str, where: Path) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise BindingUnchecked(
            f"{where}: {what} must be a uid; root must run setup again"
        )
    return value


def _entries(data: object, where: Path) -> tuple[Binding, ...]:
    if not isinstance(data, dict) or data.get("version") != _VERSION:
        raise BindingUnchecked(f"{where} is not a binding tether knows (version)")
    items = data.get("bindings")
    if not isinstance(items, list):
        raise BindingUnchecked(f"{where}: bindings must be a list")
    found: list[Binding] = []
    for item in items:
        if not isinstance(item, dict):
            raise BindingUnchecked(f"{where}: each binding must be an object")
        folder = item.get("folder")
        allow = item.get("allow_untrusted_fs", False)
        if not isinstance(folder, str) or not isinstance(allow, bool):
            raise BindingUnchecked(f"{where}: a binding names no folder")
        try:
            path = check_folder_path(Path(folder))
        except Exception as exc:
            raise BindingUnchecked(f"{where}: {exc}") from None
        found.append(
            Binding(
                account_uid=_uid(item.get("account_uid"), "account_uid", where),
                person_uid=_uid(item.get("person_uid"), "person_uid", where),
                folder=path,
                allow_untrusted_fs=allow,
            )
        )
    return tuple(found)


def _judge_root_only(st: os.stat_result, where: Path, kind: str) -> None:
    if st.st_uid != 0:
        raise BindingUnchecked(
            f"{where} is owned by uid {st.st_uid}, not root: it cannot bind anyone; "
            "root must remove it and run tether setup --system again"
        )
    if st.st_mode & _OTHERS_WRITE:
        raise BindingUnchecked(
            f"{where} is writable by group or others; as root: chmod go-w {where}"
        )
    if kind == "dir" and not stat.S_ISDIR(st.st_mode):
        raise BindingUnchecked(f"{where} is not a directory")
    if kind == "file" and not stat.S_ISREG(st.st_mode):
        raise BindingUnchecked(f"{where} is not a regular file")


def load_binding(system_dir: Path | None = None) -> SystemBinding | None:
    """Read the system binding; None when there is none.

    Only `ENOENT` on the system dir or on the file, after every directory above passed
    the folder rule for root, means "no binding".

    Raises:
        BindingUnchecked: the binding or a directory above it is not root's, is writable
            by others, cannot be read, or is not a valid record.
    """
    real = _real_dir(system_dir)
    try:
        return within_bound(
            plan(str(real.parent), str(real)),
            ("binding", real),
            lambda progress: _load(real, progress),
            bound=READ_BOUND,
        )
    except Hung as exc:
        raise BindingUnchecked(f"the system binding cannot be checked: {exc}") from None


def binding_stamp(
    system_dir: Path | None = None,
) -> tuple[bytes, ...] | tuple[int, ...] | None:
    """`lstat` of the binding file (identity, times, size, mode, owner), within a bound.

    A value that compares alike exactly when those fields do (`_statx.stamp`); None when
    there is no file; a tuple with a negative first field when the look failed (so
    that it differs from any real stamp).
    """
    return BindingLook(system_dir).stamp()


@final
class BindingLook:
    """The look at one binding file, its paths fixed once: what a watch repeats."""

    __slots__ = ("_folder", "_key", "_parent", "_where")

    def __init__(self, system_dir: Path | None = None) -> None:
        real = _real_dir(system_dir)
        self._parent, self._folder, where = _strings(real)
        self._where = os.fsencode(where)
        self._key = ("binding", real)

    def stamp(
        self, now: Table | None = None
    ) -> tuple[bytes, ...] | tuple[int, ...] | None:
        """As `binding_stamp`; `now`: the mount table just looked at (None: look)."""
        try:
            mounts = plan(self._parent, self._folder, now)
            if mounts is not None and mounts.local:
                return look_stamp(self._where)  # local kernel filesystems: it returns
            return within_bound(mounts, self._key, self._look, bound=READ_BOUND)
        except Hung:
            return (-2,)
        except OSError as exc:
            return (-1, exc.errno or 0)

    def _look(self, _: Progress | None) -> tuple[bytes, ...] | None:
        return look_stamp(self._where)


@functools.lru_cache(maxsize=8)
def _strings(real: Path) -> tuple[str, str, str]:
    return str(real.parent), str(real), str(real / BINDING_NAME)


def _load(real: Path, progress: Progress | None) -> SystemBinding | None:
    where = real / BINDING_NAME
    fds: list[int] = []
    try:
        try:
            fds.append(open_folder(real.parent, 0, progress=progress))
        except RuleBroken as exc:
            raise BindingUnchecked(
                f"the system binding cannot be checked: {exc}"
            ) from None
        if progress is not None:
            progress.where = str(real)
        try:
            fds.append(os.open(real.name, DIR_FLAGS, dir_fd=fds[-1]))
        except FileNotFoundError:
            return None
        _judge_root_only(os.fstat(fds[-1]), real, "dir")
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        if progress is not None:
            progress.where = str(where)
        try:
            gate = os.stat(BINDING_NAME, dir_fd=fds[-1], follow_symlinks=False)
        except FileNotFoundError:
            return None
        _judge_root_only(gate, where, "file")  # never opens a FIFO or a device
        fds.append(os.open(BINDING_NAME, flags, dir_fd=fds[-1]))
        st = os.fstat(fds[-1])
        _judge_root_only(st, where, "file")
        raw = os.read(fds[-1], _MAX_BYTES + 1)
        if len(raw) > _MAX_BYTES:
            raise BindingUnchecked(f"{where} is too large to be a binding")
        data = json.loads(raw)
    except OSError as exc:
        name = errno.errorcode.get(exc.errno or 0, "?")
        raise BindingUnchecked(
            f"the system binding {where} cannot be read: {os.strerror(exc.errno or 0)} "
            f"({name})"
        ) from None
    except ValueError as exc:
        raise BindingUnchecked(f"{where} is not valid JSON: {exc}") from None
    finally:
        for fd in reversed(fds):
            # Nothing was written; what was read was judged already.
            with contextlib.suppress(OSError):
                os.close(fd)
    return SystemBinding(path=where, bindings=_entries(data, where))


def save_binding(bindings: Iterable[Binding], system_dir: Path | None = None) -> Path:
    """Write the binding (root-owned, mode 0644) atomically, or remove it when empty.

    Raises:
        OSError: the system dir cannot be made or the file cannot be written.
    """
    real = _real_dir(system_dir)
    where = real / BINDING_NAME
    items = sorted(bindings, key=lambda b: b.account_uid)
    if not items:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(where)
        return where
    real.mkdir(mode=0o755, parents=True, exist_ok=True)
    data = {"version": _VERSION, "bindings": [b.to_json() for b in items]}
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    write_atomic(where, text.encode(), mode=0o644, owner=(0, 0))
    return where


def _groups(uid: int) -> frozenset[int]:
    try:
        entry = pwd.getpwuid(uid)
    except KeyError:
        return frozenset()
    found = {entry.pw_gid}
    found.update(g.gr_gid for g in grp.getgrall() if entry.pw_name in g.gr_mem)
    return frozenset(found)


def _writable(st: os.stat_result, uid: int, groups: frozenset[int]) -> bool:
    if st.st_uid == uid or st.st_mode & stat.S_IWOTH:
        return True
    return bool(st.st_mode & stat.S_IWGRP) and st.st_gid in groups


def _chain_writable(path: Path, uid: int, groups: frozenset[int]) -> Path | None:
    """The first of `path` and its parents that `uid` could change or replace."""
    current = path
    child_owner: int | None = None
    while True:
        try:
            st = os.stat(current, follow_symlinks=False)
        except OSError:
            return None
        kind = stat.S_IFMT(st.st_mode)
        if child_owner is None and kind not in (
            stat.S_IFREG,
            stat.S_IFDIR,
            stat.S_IFLNK,
        ):
            return None  # a device or a socket mapped in (/dev/zero) is not code
        if stat.S_ISDIR(st.st_mode) and child_owner is not None:
            # Write on a directory lets an account rename what is in it, unless the
            # sticky bit keeps it to its own entries.
            if _writable(st, uid, groups) and (
                not st.st_mode & stat.S_ISVTX or child_owner == uid or st.st_uid == uid
            ):
                return current
        elif _writable(st, uid, groups) and not stat.S_ISLNK(st.st_mode):
            return current
        if current.parent == current:
            return None
        child_owner = st.st_uid
        current = current.parent


def _code_paths() -> list[Path]:
    package = Path(__file__).resolve().parents[1]  # the `tether` package
    found = [Path(sys.executable), Path(os.path.realpath(sys.executable)), package]
    for root, dirs, files in os.walk(package):
        found += [Path(root, name) for name in dirs + files]
    found += [Path(entry) for entry in sys.path if entry and os.path.isdir(entry)]
    return found + _mapped_files()


def _mapped_files() -> list[Path]:
    """Every file mapped into this process: shared libraries, `LD_PRELOAD` included."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            lines = maps.read().splitlines()
    except OSError:
        return []
    found: dict[str, None] = {}
    for line in lines:
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and parts[5].startswith("/"):
            found[parts[5].removesuffix(" (deleted)")] = None
    return [Path(name) for name in found]


def install_hold_reason(
    uid: int | None = None, *, system_dir: Path | None = None
) -> str | None:
    """Why a run of `uid` (default: this account) must hold because of its install.

    Where a system binding binds `uid`, the code a run executes — the `tether` package,
    the interpreter, every directory on `sys.path` and every file mapped into the
    process (shared libraries, `LD_PRELOAD`) — must not be writable by that
    account (owner, group or other write, on it or on a directory above it): an account
    that can edit its reader can unbind itself. Returns None when `uid` is not bound or
    the install satisfies this (a system-wide, root-owned install); a binding that
    cannot be checked is a reason too. Unattended runs call this at start.
    """
    account = os.geteuid() if uid is None else uid
    try:
        binding = load_binding(system_dir)
    except BindingUnchecked as exc:
        return str(exc)
    if binding is None or binding.for_account(account) is None:
        return None
    return code_writable_reason(account, binding.path)


def code_writable_reason(account: int, where: Path) -> str | None:
    """Why `account`, bound by `where`, could change the code it runs; None if it cannot."""
    groups = _groups(account)
    for path in _code_paths():
        hit = _chain_writable(path, account, groups)
        if hit is not None:
            return (
                f"uid {account} is bound by {where}, but it can change the code "
                f"its runs execute ({hit} is writable by it, for {path}); install tether "
                "system-wide as root (a root-owned interpreter and site-packages)"
            )
    return None
