"""The person's acts: set a stop, lift it, and the checks on who is calling.

Setting and lifting write only inside the uid directory, reached by the same checked walk
a read uses. The stop is written atomically (a temp file made with
`O_CREAT|O_EXCL|O_NOFOLLOW`, fsync, rename, fsync of the directory) with mode 01644: the
sticky bit makes systemd-tmpfiles skip it. A write that fails says so and never claims
success. Choosing the folder (`tether setup`) is `_board`'s.

On a full file system the stop goes into its reserve (`_reserve`).

The caller checks (`check_caller`) refuse a caller with no terminal or inside an agent
session. They are a speed bump for an agent acting by mistake: any process of the same
account can fake a terminal and drop the markers, so only a second account binds.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import attrs

from .._accounts import who
from .._env import TetherEnv
from ..errors import Refused, StoreError
from ._bounded import Hung, Progress
from ._folder import RuleBroken, fs_type, open_folder, open_uid_dir, untrusted_fs_why
from ._lifts import LiftRecord, append_lift, now_utc
from ._mounts import plan
from ._reader import ReadOutcome, StopReading, _kind, within_bound
from ._reserve import (
    NEW_FILE,
    NO_ROOM,
    finish_stop,
    keep_reserve,
    temp_name,
    write_all,
    write_in_reserve,
)
from ._setup import (
    MAX_STOP_SIZE,
    STOP_NAME,
    SetupRecord,
    load_setup,
    make_state_dir,
)
from ._stop_store import StopStore, _ensure_own_store

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = ("AGENT_MARKERS", "LiftResult", "check_caller", "lift_stop", "set_stop")

T = TypeVar("T")

WRITE_BOUND = 10.0
"""Seconds a verb's writes may take where a mount on the way may not answer."""


AGENT_MARKERS: tuple[str, ...] = (
    TetherEnv.AGENT,  # set by tether in every process an agent tool starts
    "CLAUDECODE",  # Claude Code's shells
    "CLAUDE_CODE_ENTRYPOINT",  # Claude Code's subprocesses
    "CLAUDE_CODE_SESSION_ID",
    "CODEX_SANDBOX",  # processes Codex spawns for its shell tool
    "CODEX_SANDBOX_NETWORK_DISABLED",
    "CODEX_CI",
    "GEMINI_CLI",  # Gemini CLI's shell tool
    "AGENT",  # the cross-tool convention AGENT=<name>
)
"""Environment variables whose presence (non-empty) marks an agent host session."""


def check_caller(
    verb: str, *, env: Mapping[str, str] | None = None, stdin_fd: int = 0
) -> None:
    """Refuse a caller that is not a person at a terminal.

    Raises:
        Refused: an agent marker is in the environment, or stdin is not a terminal.
    """
    environ = os.environ if env is None else env
    markers = [name for name in AGENT_MARKERS if environ.get(name)]
    if markers:
        raise Refused(
            f"{verb} refused: this runs inside an agent session ({markers[0]} is "
            "set); stop, lift and setup are the person's acts, run from their own terminal"
        )
    try:
        tty = os.isatty(stdin_fd)
    except OSError:
        tty = False
    if not tty:
        raise Refused(
            f"{verb} refused: stdin is not a terminal; stop, lift and setup are "
            "the person's acts, run from their own terminal"
        )


def _require_person(record: SetupRecord, verb: str) -> None:
    uid = os.geteuid()
    if uid != record.person_uid:
        raise Refused(
            f"{verb} refused: this account is {who(uid)}, but its setup honours "
            f"the stop of {who(record.person_uid)}; run tether {verb} as "
            f"{who(record.person_uid)}, from their own terminal"
        )


def _errtext(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0, "?")
    return f"{os.strerror(exc.errno or 0)} ({name})"


def _open_checked(
    record: SetupRecord, failed: str, progress: Progress | None = None
) -> int:
    """Walk to the person's uid directory as a read does; return its descriptor."""
    if record.folder is None:
        # No set-up: the own store is made here as `tether run` makes it, the home
        # included, so the stop set is the one the account's runs read.
        try:
            make_state_dir()
        except OSError as exc:
            raise StoreError(
                f"{failed}: the account's own store {record.store_dir} cannot be "
                f"made: {_errtext(exc)}"
            ) from None
        _ensure_own_store(record.person_uid)
    try:
        folder_fd = open_folder(record.store_dir, record.person_uid, progress=progress)
    except RuleBroken as exc:
        raise StoreError(f"{failed}: {exc}") from None
    except OSError as exc:
        raise StoreError(f"{failed}: {_errtext(exc)}") from None
    try:
        if record.folder is not None and not record.allow_untrusted_fs:
            found = fs_type(folder_fd)
            if found is not None and (why := untrusted_fs_why(*found)):
                raise StoreError(f"{failed}: {why}")
        return open_uid_dir(
            folder_fd, record.store_dir, record.person_uid, progress=progress
        )
    except RuleBroken as exc:
        raise StoreError(f"{failed}: {exc}") from None
    finally:
        os.close(folder_fd)


def _stop_bytes(reason: str | None, when: datetime) -> bytes:
    text = reason or ""
    while True:
        data = {"set_by_uid": os.geteuid(), "set_at": when.isoformat(), "reason": text}
        raw = (json.dumps(data, sort_keys=True) + "\n").encode()
        if len(raw) <= MAX_STOP_SIZE // 2 or not text:
            return raw
        text = text[: len(text) // 2]


def _clear_the_name(uid_fd: int, where: Path) -> str | None:
    """Make way for the stop: report a foreign entry at its name, remove an empty directory.

    Row D12: a file, FIFO or symlink that is not the person's stop is replaced by the
    rename that follows (reported here); an empty directory is removed; a directory
    with entries is left for a person to look at.

    Raises:
        StoreError: a directory with entries sits at the stop's name.
        OSError: the entry cannot be looked at or removed.
    """
    try:
        st = os.stat(STOP_NAME, dir_fd=uid_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
        return None  # the person's own earlier stop: replaced, nothing to report
    what = f"{_kind(st.st_mode)} owned by uid {st.st_uid}"
    if stat.S_ISREG(st.st_mode):
        what = f"a file owned by uid {st.st_uid} ({st.st_size} bytes)"
    if stat.S_ISDIR(st.st_mode):
        try:
            os.rmdir(STOP_NAME, dir_fd=uid_fd)
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                raise StoreError(
                    f"the stop was NOT set: {where} is {what} with entries in it; "
                    "look at it, remove it by hand, then set the stop again"
                ) from None
            raise
        return f"removed {what} (empty) that was at {where}"
    return f"replaced {what} that was at {where}"


def _fsync_dir(uid_fd: int) -> None:
    dir_fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=uid_fd)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _write_stop(uid_fd: int, data: bytes) -> str | None:
    """Write the stop atomically inside the uid directory (spec 02).

    On a full file system it goes into the reserve's blocks, else without its text.
    Returns a note when the file system was full, None otherwise.
    """
    tmp = temp_name(STOP_NAME)
    note: str | None = None
    try:
        try:
            fd = os.open(tmp, NEW_FILE, 0o644, dir_fd=uid_fd)
            try:
                write_all(fd, data)
                finish_stop(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            if exc.errno not in NO_ROOM:
                raise
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=uid_fd)
            note = write_in_reserve(uid_fd, tmp, data)
        os.rename(tmp, STOP_NAME, src_dir_fd=uid_fd, dst_dir_fd=uid_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=uid_fd)
        raise
    _fsync_dir(uid_fd)
    if note is None:
        keep_reserve(uid_fd)
    return note


def set_stop(
    reason: str | None = None, *, record: SetupRecord | None = None
) -> StopReading:
    """Set the person's stop and return the read that confirms it.

    The caller must be the person (the stop of any other owner is not honoured).

    Raises:
        Refused: this account is not the person its setup honours.
        StoreError: the folder rule fails, or the write failed (full disk, read-only
            filesystem, ...), or the read after the write does not say STOPPED; the
            message says the stop was NOT set.
    """
    rec = record if record is not None else load_setup()
    _require_person(rec, "stop")
    failed = "the stop was NOT set"
    data = _stop_bytes(reason, now_utc())

    def write(progress: Progress | None) -> str | None:
        uid_fd = _open_checked(rec, failed, progress)
        try:
            if progress is not None:
                progress.where = str(rec.stop_path)
            report = _clear_the_name(uid_fd, rec.stop_path)
            full = _write_stop(uid_fd, data)
            if full is not None:
                report = full if report is None else f"{report}; {full}"
        except StoreError:
            raise  # already says what to do (it is an OSError too)
        except OSError as exc:
            raise StoreError(
                f"{failed}: {_errtext(exc)} writing in {rec.uid_dir}"
            ) from None
        finally:
            os.close(uid_fd)
        return report

    report = _bounded_act(rec, write, "the stop may not be set")
    reading = StopStore.from_setup(rec).read()
    if reading.outcome is not ReadOutcome.STOPPED:
        raise StoreError(
            f"the stop was written to {rec.stop_path} but a read of it says {reading}"
        )
    if report is not None:
        reading = attrs.evolve(reading, notes=(report, *reading.notes))
    return reading


def _bounded_act(
    record: SetupRecord, fn: Callable[[Progress | None], T], unsure: str
) -> T:
    """Run a verb's writes within `WRITE_BOUND` where a mount on the way may not answer.

    Raises:
        StoreError: the writes did not finish in time (the message says what hung).
    """
    mounts = plan(str(record.store_dir), str(record.uid_dir))
    key = (record.store_dir, record.person_uid, "write")
    try:
        return within_bound(mounts, key, fn, bound=WRITE_BOUND)
    except Hung as exc:
        raise StoreError(
            f"{exc}; {unsure} (it may still be written if the mount answers later): "
            "check tether status"
        ) from None


@attrs.frozen(kw_only=True)
class LiftResult:
    """What a lift did."""

    stop_path: Path
    """The stop's path."""
    lifted: bool
    """False when there was no stop to lift."""
    lifted_at: datetime
    """When."""
    stop_set_at: datetime | None = None
    """The `st_mtime` of the stop removed."""


def lift_stop(*, record: SetupRecord | None = None) -> LiftResult:
    """Remove the person's stop and append a lift record (who, when) to the lift log.

    Raises:
        Refused: this account is not the person its setup honours.
        StoreError: the folder rule fails, a directory sits at the stop's name, or the
            lift record or the removal could not be written.
    """
    rec = record if record is not None else load_setup()
    _require_person(rec, "lift")
    failed = "the stop was NOT lifted"
    when = now_utc()
    return _bounded_act(
        rec,
        lambda progress: _lift_now(rec, failed, when, progress),
        "it may not be lifted",
    )


def _lift_now(
    rec: SetupRecord, failed: str, when: datetime, progress: Progress | None
) -> LiftResult:
    uid_fd = _open_checked(rec, failed, progress)
    try:
        try:
            st = os.stat(STOP_NAME, dir_fd=uid_fd, follow_symlinks=False)
        except FileNotFoundError:
            return LiftResult(stop_path=rec.stop_path, lifted=False, lifted_at=when)
        if stat.S_ISDIR(st.st_mode):
            raise StoreError(
                f"{failed}: {rec.stop_path} is a directory; remove it by hand"
            )
        stop_id = (st.st_dev, st.st_ino, st.st_mtime_ns)
        entry = LiftRecord(lifted_by_uid=os.geteuid(), lifted_at=when, stop_id=stop_id)
        append_lift(uid_fd, entry)
        os.unlink(STOP_NAME, dir_fd=uid_fd)
        _fsync_dir(uid_fd)
        keep_reserve(uid_fd)
    except StoreError:
        raise  # already says what to do (it is an OSError too)
    except OSError as exc:
        raise StoreError(f"{failed}: {_errtext(exc)} in {rec.uid_dir}") from None
    finally:
        os.close(uid_fd)
    set_at = datetime.fromtimestamp(st.st_mtime_ns / 1e9, when.tzinfo)
    return LiftResult(
        stop_path=rec.stop_path, lifted=True, lifted_at=when, stop_set_at=set_at
    )
