"""The root step (`tether setup --system`): bind agents' accounts to a person's stop.

Root records the binding (`_system`), makes the folder and the person's uid directory
when they are missing, and gets a board: the folder rule for the person, and for each
bound account whether it can run the installed tether and could change the code its
runs execute (run as that account: `run_check_reason`; either way its runs hold).
Removing a binding, or moving an account to another folder or person, is refused while
a stop stands where it honours it, as every folder change is.
"""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from ..errors import Refused, UsageError
from ._board import why_not_change
from ._folder import RuleBroken, RuleCheck, open_folder
from ._setup import SetupRecord, check_folder_path
from ._system import (
    INSTALL_ADVICE,
    Binding,
    BindingUnchecked,
    binding_path,
    code_writable_reason,
    load_binding,
    save_binding,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ("SystemBoard", "bind_accounts", "run_check_reason", "unbind_accounts")


@attrs.frozen(kw_only=True)
class SystemBoard:
    """What `tether setup --system` shows."""

    path: Path
    """The binding file."""
    bindings: tuple[Binding, ...]
    """Every binding in force after the act."""
    checks: tuple[RuleCheck, ...] = ()
    """The folder rule for the folder and person just bound."""
    installs: tuple[tuple[int, str | None], ...] = ()
    """Per bound account: why its runs would hold because of its install, or None."""
    notes: tuple[str, ...] = ()
    """What the act did."""


def _require_root(verb: str) -> None:
    if os.geteuid() != 0:
        raise Refused(
            f"{verb} refused: the system binding is root's; run it as root "
            "(e.g. sudo tether setup --system ...)"
        )


def _current(system_dir: Path | None) -> tuple[Binding, ...]:
    try:
        found = load_binding(system_dir)
    except BindingUnchecked as exc:
        raise Refused(
            f"{exc}; as root, remove it, then run tether setup --system again"
        ) from None
    return () if found is None else found.bindings


def _prepare_folder(folder: Path, person_uid: int, notes: list[str]) -> Path:
    given = Path(os.path.abspath(folder))
    if not os.path.lexists(given):
        given.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        os.mkdir(given, 0o755)
        os.chmod(given, 0o1777)  # spec 02: shared, sticky, root's
        notes.append(f"made {given} (root, mode 1777)")
    real = Path(os.path.realpath(given))
    if not os.path.isdir(real):
        raise UsageError(f"the shared folder {given} is not a directory")
    if real != given:
        notes.append(f"recorded the real path {real} (given: {given})")
    folder = check_folder_path(real)
    _uid_dir(folder, person_uid, notes)
    return folder


def _uid_dir(folder: Path, uid: int, notes: list[str]) -> None:
    """Make `<folder>/<uid>` (owned by uid, mode 0755) when it is missing."""
    uid_dir = folder / str(uid)
    if not os.path.lexists(uid_dir):
        os.mkdir(uid_dir, 0o755)
        try:
            gid = pwd.getpwuid(uid).pw_gid
        except KeyError:
            gid = uid
        os.chown(uid_dir, uid, gid)
        os.chmod(uid_dir, 0o755)
        notes.append(f"made {uid_dir} (uid {uid}, mode 0755)")


def _checks(folder: Path, person_uid: int) -> list[RuleCheck]:
    checks: list[RuleCheck] = []
    try:
        fd = open_folder(folder, person_uid, record=checks.append)
    except RuleBroken:
        return checks
    try:
        name = str(person_uid)
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError as exc:
            checks.append(RuleCheck(folder / name, False, f"missing: {exc.strerror}"))
        else:
            ok = (
                stat.S_ISDIR(st.st_mode)
                and st.st_uid == person_uid
                and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
            )
            detail = f"owned by uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o}"
            checks.append(RuleCheck(folder / name, ok, detail))
    finally:
        os.close(fd)
    return checks


RUN_CHECK_TIME = 30.0
"""Seconds the installed tether may take to answer as a bound account."""
_RUN_CHECK = (
    "import sys, pathlib; import tether.stop._system as s; "
    "print(s.code_writable_reason(int(sys.argv[1]), pathlib.Path(sys.argv[2])) or '')"
)
"""What the installed tether runs as a bound account: the code it sees, judged."""


def run_check_reason(
    account: int, where: Path, executable: str | None = None
) -> str | None:
    """Why `account` cannot run the installed tether, or could change it; None if neither.

    The install's interpreter (`executable`, by default the one running this) is run as
    the account itself (its uid, primary group and groups, no capability), with
    isolated mode (`-I`: no environment, no user site), to import tether and judge the
    code that process sees: the interpreter and the folders on its way may be ones the
    account cannot enter (a pyenv under root's 0700 home), which no look at modes from
    root's side tells.
    """
    try:
        entry = pwd.getpwuid(account)
        gid, groups = entry.pw_gid, os.getgrouplist(entry.pw_name, entry.pw_gid)
        home = entry.pw_dir
    except KeyError:
        gid, groups, home = account, [], "/"
    who = f"uid {account}"
    executable = executable or sys.executable
    try:
        done = subprocess.run(
            [executable, "-I", "-c", _RUN_CHECK, str(account), str(where)],
            user=account,
            group=gid,
            extra_groups=groups,
            env={"PATH": "/usr/bin:/bin", "HOME": home, "LC_ALL": "C.UTF-8"},
            cwd="/",
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=RUN_CHECK_TIME,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"{who} is bound by {where}, but the installed tether did not answer as it within {RUN_CHECK_TIME:g} s"
    except OSError as exc:
        return (
            f"{who} is bound by {where}, but it cannot run the installed tether "
            f"({executable}: {exc.strerror}); install tether with an interpreter "
            "every account can run (the system's /usr/bin/python3, not one under "
            "root's home)"
        )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        return (
            f"{who} is bound by {where}, but the installed tether fails as it "
            f"({executable}: {last[:300]}); install tether with an interpreter and "
            "folders every account can read"
        )
    return done.stdout.strip() or None


def _board(
    bindings: tuple[Binding, ...],
    system_dir: Path | None,
    checks: list[RuleCheck],
    notes: list[str],
) -> SystemBoard:
    where = binding_path(system_dir)
    installs = tuple(
        (
            b.account_uid,
            code_writable_reason(b.account_uid, where)
            or run_check_reason(b.account_uid, where),
        )
        for b in bindings
    )
    return SystemBoard(
        path=where,
        bindings=bindings,
        checks=tuple(checks),
        installs=installs,
        notes=(*notes, INSTALL_ADVICE),
    )


def _refuse_if_stopped(binding: Binding, verb: str) -> None:
    record = SetupRecord(
        folder=binding.folder,
        person_uid=binding.person_uid,
        allow_untrusted_fs=binding.allow_untrusted_fs,
    )
    why = why_not_change(record)
    if why is not None:
        raise Refused(f"{verb} refused: {why}, then change the binding")


def bind_accounts(
    *,
    folder: Path,
    person_uid: int,
    accounts: Sequence[int],
    allow_untrusted_fs: bool = False,
    system_dir: Path | None = None,
) -> SystemBoard:
    """Record, as root, that each of `accounts` honours `person_uid`'s stop in `folder`.

    A missing folder is made (root, mode 1777), and so are the person's uid directory
    and each account's, where it publishes its runs for the person (mode 0755). An account bound elsewhere before is moved, unless a stop stands there.

    Raises:
        Refused: not root; the binding on disk cannot be checked; a stop stands where an
            account being moved honoured it.
        UsageError: no account given, an account is the person, or the folder is not
            a directory.
        OSError: the binding cannot be written.
    """
    _require_root("setup --system")
    if not accounts:
        raise UsageError("name the agents' accounts to bind: --account USER")
    if person_uid in accounts:
        raise UsageError(
            f"uid {person_uid} is the person: bind the accounts the agents run as"
        )
    current = _current(system_dir)
    notes: list[str] = []
    real = _prepare_folder(folder, person_uid, notes)
    for uid in dict.fromkeys(accounts):
        # Where the account publishes its runs for the person (it writes no other).
        _uid_dir(real, uid, notes)
    fresh = [
        Binding(
            account_uid=uid,
            person_uid=person_uid,
            folder=real,
            allow_untrusted_fs=allow_untrusted_fs,
        )
        for uid in dict.fromkeys(accounts)
    ]
    for old in current:
        if old.account_uid in accounts and (old.folder, old.person_uid) != (
            real,
            person_uid,
        ):
            _refuse_if_stopped(old, "setup --system")
    kept = tuple(b for b in current if b.account_uid not in accounts)
    bindings = (*kept, *fresh)
    save_binding(bindings, system_dir)
    notes.append(f"recorded {binding_path(system_dir)} (root, mode 0644)")
    return _board(bindings, system_dir, _checks(real, person_uid), notes)


def unbind_accounts(
    *, accounts: Sequence[int] = (), system_dir: Path | None = None
) -> SystemBoard:
    """Take back, as root, the binding of `accounts` (all of them when none is given).

    Raises:
        Refused: not root; the binding cannot be checked; a stop stands (or cannot be
            read) where an account being unbound honours it.
        OSError: the binding cannot be written.
    """
    _require_root("setup --system --remove")
    current = _current(system_dir)
    going = [b for b in current if not accounts or b.account_uid in accounts]
    for binding in going:
        _refuse_if_stopped(binding, "setup --system --remove")
    bindings = tuple(b for b in current if b not in going)
    save_binding(bindings, system_dir)
    notes = [f"unbound uid {b.account_uid}" for b in going] or ["nothing was bound"]
    return _board(bindings, system_dir, [], notes)
