"""Choosing the folder and the person (`tether setup`), and the board that shows the rule.

The board lists every check of the folder rule with the path that failed, the
filesystem, which folders an age cleaner tends, the current reading with any stop not
honoured, the containment of the process trees tether starts, and plain notes (the same-account caveat, an opted-in filesystem's cost).
Setup records the choice even when a check fails: the board says what to repair, and
runs hold until it is repaired.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import attrs

from ..errors import Refused, StoreError, UsageError
from ._bounded import Hung, Progress
from ._folder import RuleBroken, RuleCheck, fs_type, open_folder, open_uid_dir
from ._folder import untrusted_fs_why as _untrusted
from ._mounts import plan
from ._reader import Place, ReadOutcome, StopReading, read_place, within_bound
from ._reserve import keep_reserve
from ._setup import (
    SetupRecord,
    check_folder_path,
    load_setup,
    save_setup,
    setup_path,
)
from ._stop_store import StopStore, _ensure_own_store
from ._system import INSTALL_ADVICE, binding_path
from ._tmpfiles import AgeCleaner, age_cleaned, cleaner_of

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ("KEEP", "Board", "build_board", "choose_setup", "why_not_change")

T = TypeVar("T")

WRITE_BOUND = 10.0
"""Seconds setup's own looks at a folder may take where a mount may not answer."""

KEEP = Path("\0keep")
"""Sentinel for `choose_setup(folder=...)`: keep the folder already chosen."""


@attrs.frozen(kw_only=True)
class Board:
    """What `tether setup` shows."""

    record: SetupRecord
    """The setup in force."""
    setup_file: Path
    """Where it is recorded."""
    account_uid: int
    """The account that ran setup."""
    checks: tuple[RuleCheck, ...]
    """Every check of the folder rule, in walk order."""
    cleaners: tuple[AgeCleaner, ...]
    """Folders an age cleaner tends on this machine."""
    tended_by: AgeCleaner | None
    """The cleaner tending the chosen folder, if any."""
    reading: StopReading
    """A read made now."""
    notes: tuple[str, ...] = ()
    """Plain notes: what setup did, what a choice costs."""
    containment: tuple[str, str] | None = None
    """The containment of the process trees tether starts here, and why: `namespace`,
    `subreaper` (the fallback) or `refused` (`TETHER_CONTAINMENT` cannot be honoured).
    Filled in by `tether setup` (the host layer knows it; this one does not)."""

    @property
    def ok(self) -> bool:
        """Every check passed and a read is not HOLD."""
        return (
            all(c.ok for c in self.checks)
            and self.reading.outcome is not ReadOutcome.HOLD
        )

    @property
    def same_account(self) -> bool:
        """The agents of this account run as the person."""
        return self.account_uid == self.record.person_uid


def _place(record: SetupRecord) -> Place:
    return Place(
        folder=record.folder,
        store_dir=record.store_dir,
        person_uid=record.person_uid,
        allow_untrusted_fs=record.allow_untrusted_fs,
    )


def _fs_check(fd: int, record: SetupRecord, notes: list[str]) -> RuleCheck:
    where = record.store_dir
    try:
        found = fs_type(fd)
    except RuleBroken as exc:
        return RuleCheck(where, False, str(exc))
    if found is None:
        return RuleCheck(where, True, "filesystem type not checked on this platform")
    why = _untrusted(*found)
    if not why:
        return RuleCheck(where, True, f"filesystem {found[0]}: owners can be trusted")
    if record.folder is None:
        return RuleCheck(where, True, f"filesystem {found[0]} (own store: not judged)")
    if record.allow_untrusted_fs:
        notes.append(
            f"opted in to {found[0]}: {why}. A stop there may be missed or seen late, "
            "and an owner shown may not be who wrote it"
        )
        return RuleCheck(where, True, f"filesystem {found[0]}: allowed at setup")
    return RuleCheck(
        where, False, f"{why}; choose another folder or --allow-untrusted-fs"
    )


def _look(folder: Path, uid_dir: Path, fn: Callable[[Progress | None], T]) -> T:
    """Run `fn` inline on local mounts, else in a worker bounded by `WRITE_BOUND`.

    Raises:
        Hung: a mount on the way did not answer in time.
    """
    mounts = plan(str(folder), str(uid_dir))
    return within_bound(mounts, (folder, uid_dir, "setup"), fn, bound=WRITE_BOUND)


def _rule_checks(
    record: SetupRecord, more: list[str], progress: Progress | None
) -> list[RuleCheck]:
    checks: list[RuleCheck] = []
    try:
        folder_fd = open_folder(
            record.store_dir, record.person_uid, record=checks.append, progress=progress
        )
    except RuleBroken:
        return checks
    try:
        checks.append(_fs_check(folder_fd, record, more))
        try:
            uid_fd = open_uid_dir(
                folder_fd, record.store_dir, record.person_uid, progress=progress
            )
        except RuleBroken as exc:
            checks.append(RuleCheck(record.uid_dir, False, str(exc)))
        else:
            mode = stat.S_IMODE(os.fstat(uid_fd).st_mode)
            os.close(uid_fd)
            detail = f"owned by uid {record.person_uid}, mode {mode:04o}"
            checks.append(RuleCheck(record.uid_dir, True, detail))
    finally:
        os.close(folder_fd)
    return checks


def build_board(
    record: SetupRecord,
    *,
    notes: tuple[str, ...] = (),
    system_dir: Path | None = None,
) -> Board:
    """Check the rule for `record` now and gather what the board shows.

    For an account a system binding binds, the reading is that of every place it
    honours (the bound one first), and the board says so.
    """
    more = list(notes)
    try:
        checks = _look(
            record.store_dir,
            record.uid_dir,
            lambda progress: _rule_checks(record, more, progress),
        )
    except Hung as exc:
        checks = [RuleCheck(record.store_dir, False, str(exc))]
    cleaners = age_cleaned()
    tended = cleaner_of(record.store_dir, cleaners)
    if tended is not None:
        more.append(
            f"{record.store_dir} is under {tended.path}, which an age cleaner empties of "
            f"entries older than {tended.age} ({tended.source}): a long-standing stop "
            "there may vanish; a root-made folder such as /srv/tether avoids it"
        )
    if os.geteuid() == record.person_uid:
        more.append(
            "the agents of this account run as the person (the same account): the stop "
            "then binds only agents that obey the guard; running them under a second "
            "account is what makes it bind"
        )
    reading = read_place(_place(record)).reading
    try:
        store = StopStore.from_setup(record, system_dir=system_dir)
    except StoreError:
        store = None
    if store is not None and store.binding is not None:
        bound = store.binding
        more.append(
            f"this account is bound by {binding_path(system_dir)}: it honours uid "
            f"{bound.person_uid}'s stop in {bound.folder} whatever this record says; "
            "this record can add a stop, never remove one"
        )
        more.append(INSTALL_ADVICE)
        reading = store.read()
    elif store is not None and store.holds:
        more += list(store.holds)
        reading = store.read()
    elif os.geteuid() != record.person_uid:
        more.append(
            "no system binding names this account: it honours the stop only while its "
            "own record says so, and it can change that record; root binds it with "
            "tether setup --system"
        )
    return Board(
        record=record,
        setup_file=setup_path(),
        account_uid=os.geteuid(),
        checks=tuple(checks),
        cleaners=tuple(cleaners),
        tended_by=tended,
        reading=reading,
        notes=tuple(more),
    )


def why_not_change(record: SetupRecord) -> str | None:
    """Why the place of `record` may not be left now: only a clear reading allows it."""
    reading = read_place(_place(record)).reading
    if reading.outcome is ReadOutcome.CLEAR:
        return None
    if reading.outcome is ReadOutcome.STOPPED:
        return f"a stop stands in {record.uid_dir}: run tether lift first"
    try:
        _look(record.store_dir, record.uid_dir, lambda _: os.stat(record.uid_dir))
    except FileNotFoundError:
        return None  # no uid directory (never armed, or gone): no stop can stand there
    except (OSError, Hung):
        pass
    # Cannot verify is not "no stop": a stop that cannot be seen may still stand.
    return (
        f"the stop in {record.uid_dir} cannot be read ({reading.reason}); repair that, "
        "or lift the stop, first"
    )


def _arm(record: SetupRecord) -> list[str]:
    """Make `<folder>/<uid>/` with mode 0755 for the person's own account."""
    try:
        return _look(record.store_dir, record.uid_dir, lambda _: _arm_now(record))
    except Hung as exc:
        return [f"{record.uid_dir} was not made: {exc}"]


def _arm_now(record: SetupRecord) -> list[str]:
    if record.folder is None:
        _ensure_own_store(record.person_uid)
    try:
        folder_fd = open_folder(record.store_dir, record.person_uid)
    except (RuleBroken, OSError) as exc:
        return [f"{record.uid_dir} was not made: {exc}"]
    name = str(record.person_uid)
    notes: list[str] = []
    try:
        try:
            os.mkdir(name, 0o755, dir_fd=folder_fd)
            notes.append(f"made {record.uid_dir} (mode 0755)")
        except FileExistsError:
            pass
        fd = os.open(
            name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=folder_fd
        )
        try:
            st = os.fstat(fd)
            if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) != 0o755:
                os.fchmod(fd, 0o755)
                notes.append(f"set {record.uid_dir} to mode 0755")
            if st.st_uid == os.geteuid():
                keep_reserve(fd)  # room for a stop on a full file system
        finally:
            os.close(fd)
    except OSError as exc:
        notes.append(f"{record.uid_dir} could not be made: {exc.strerror}")
    finally:
        os.close(folder_fd)
    return notes


def choose_setup(
    *, folder: Path | None = KEEP, person_uid: int, allow_untrusted_fs: bool = False
) -> Board:
    """Record the folder and the person, arm the uid directory, and build the board.

    Args:
        folder: the shared folder, None for the own store, `KEEP` for the current one.
        person_uid: the account whose stop this account's runs honour.
        allow_untrusted_fs: opt in to a filesystem whose owners cannot be trusted.

    Raises:
        UsageError: the folder does not exist or is not a directory, or another
            person is named without a shared folder.
        Refused: the folder would change while a stop stands in the current one.
        OSError: the setup record cannot be written.
    """
    try:
        current: SetupRecord | None = load_setup()
    except Exception:  # a broken record is what setup repairs
        current = None
    notes: list[str] = []
    if folder is KEEP:
        chosen = current.folder if current is not None else None
    elif folder is None:
        chosen = None
    else:
        given = Path(os.path.abspath(folder))

        def look(_: Progress | None) -> tuple[Path, os.stat_result]:
            real = Path(os.path.realpath(given))
            return real, os.stat(real)

        try:
            real, st = _look(given, given / str(person_uid), look)
        except Hung as exc:
            raise UsageError(
                f"the shared folder {given} cannot be used: {exc}"
            ) from None
        except OSError as exc:
            raise UsageError(
                f"the shared folder {given} cannot be used ({exc.strerror}); "
                f"as root: install -d -m 1777 -o root {given}"
            ) from None
        if not stat.S_ISDIR(st.st_mode):
            raise UsageError(f"the shared folder {given} is not a directory")
        if real != given:
            notes.append(f"recorded the real path {real} (given: {given})")
        chosen = check_folder_path(real)
    if chosen is None and person_uid != os.geteuid():
        raise UsageError(
            f"honouring uid {person_uid} needs a shared folder (--shared-folder PATH): "
            "the own store reaches this account's runs only"
        )
    record = SetupRecord(
        folder=chosen, person_uid=person_uid, allow_untrusted_fs=allow_untrusted_fs
    )
    if current is not None and (
        current.store_dir != record.store_dir or current.person_uid != record.person_uid
    ):
        # spec 02: the folder (and whose stop is honoured) cannot change while a stop
        # stands, or while the reading cannot tell.
        why = why_not_change(current)
        if why is not None:
            raise Refused(f"{why}, then change the folder or the person")
    save_setup(record)
    if os.geteuid() == person_uid:
        notes += _arm(record)
    return build_board(record, notes=tuple(notes))
