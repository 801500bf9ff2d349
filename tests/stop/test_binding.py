"""The system binding with real accounts: root binds the agents' account to the person's
stop, and nothing that account can write (its record, TETHER_HOME, HOME, its own setup)
takes the stop away; unbound, the account's own setup decides, as documented."""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from tests.accounts import LAUNCH, searchable_dir
from tests.pty_run import run_in_pty

import tether.stop._system as system_module
from tether.errors import Refused
from tether.stop import (
    AGENT_MARKERS,
    ReadOutcome,
    SetupRecord,
    StopStore,
    bind_accounts,
    install_hold_reason,
    load_binding,
    protected_paths,
    unbind_accounts,
)
from tether.stop._setup import SETUP_FILE_NAME

from ._child import in_child

if TYPE_CHECKING:
    from collections.abc import Iterator

PERSON = 1001
"""The person: their stop is in `<folder>/1001/stop`."""
AGENT = 1002
"""The account the agents run as."""

pytestmark = [
    pytest.mark.root,
    pytest.mark.slow,
    # The agents' account runs the CLI through setpriv.
    pytest.mark.skipif(
        shutil.which("setpriv") is None,
        reason="needs setpriv (Debian package util-linux) to act as another account",
    ),
]

_CLONE_NEWUSER = 0x10000000
_PR_SET_DUMPABLE = 4


@pytest.fixture
def base() -> Iterator[Path]:
    """A root-owned directory every account can search."""
    with searchable_dir("tether-binding-") as where:
        yield where


@pytest.fixture
def system_dir(base: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A root-owned system dir of this test, put in place of /etc/tether in-process."""
    where = base / "etc-tether"
    monkeypatch.setattr(system_module, "SYSTEM_DIR", where)
    return where


@pytest.fixture
def folder(base: Path) -> Path:
    return base / "srv" / "tether"


@pytest.fixture
def agent_home(base: Path) -> Path:
    """The agents' account's TETHER_HOME, owned by it, with a record naming the person."""
    home = base / "agent-home"
    (home / "config").mkdir(parents=True)
    for path in (home, home / "config"):
        os.chown(path, AGENT, AGENT)
        os.chmod(path, 0o700)
    return home


def _write_record(home: Path, folder: Path | None, person: int) -> Path:
    where = home / "config" / SETUP_FILE_NAME
    data = SetupRecord(folder=folder, person_uid=person).to_json()
    where.write_text(json.dumps(data), encoding="utf-8")
    os.chown(where, AGENT, AGENT)
    os.chmod(where, 0o600)
    return where


def _set_person_stop(folder: Path) -> Path:
    stop = folder / str(PERSON) / "stop"
    fd = os.open(stop, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.fchown(fd, PERSON, PERSON)
    os.fchmod(fd, 0o1644)
    os.close(fd)
    return stop


def _env(**values: str) -> dict[str, str]:
    unset = ("TETHER_HOME", "HOME", "PYTHONPATH", *AGENT_MARKERS)
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env.update(values)
    return env


def _as_agent(
    system_dir: Path, *args: str, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """Run the CLI as the agents' account (setpriv), with no terminal."""
    return subprocess.run(
        [
            "setpriv",
            f"--reuid={AGENT}",
            f"--regid={AGENT}",
            "--clear-groups",
            sys.executable,
            "-c",
            LAUNCH,
            str(system_dir),
            *args,
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
        timeout=60,
        check=False,
    )


def _status(system_dir: Path, env: dict[str, str]) -> dict[str, object]:
    done = _as_agent(system_dir, "status", "--json", env=env)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert isinstance(data, dict)
    return data


def _in_pty(
    system_dir: Path, *args: str, env: dict[str, str], uid: int | None = None
) -> tuple[int, str]:
    """Run the CLI with a pseudo-terminal (as `uid` through setpriv, else as root)."""
    prefix = []
    if uid is not None:
        prefix = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
    return run_in_pty(
        [*prefix, sys.executable, "-c", LAUNCH, str(system_dir), *args],
        env=env,
        cwd="/",
        timeout=60,
    )


@pytest.mark.rule("system-binding")
def test_system_binding_holds_whatever_the_bound_account_does_to_its_own_setup(
    system_dir: Path, folder: Path, agent_home: Path, base: Path, everyones_python: Path
) -> None:
    """Bound by root, the agents' account reads STOPPED after it deletes its record,
    edits it, points TETHER_HOME or HOME elsewhere, or runs `setup --no-shared-folder`."""
    board = bind_accounts(folder=folder, person_uid=PERSON, accounts=[AGENT])
    assert all(why is None for _, why in board.installs), board.installs
    record = _write_record(agent_home, folder, PERSON)
    _set_person_stop(folder)
    env = _env(TETHER_HOME=str(agent_home))
    assert _status(system_dir, env)["outcome"] == "STOPPED"

    record.unlink()
    assert _status(system_dir, env)["outcome"] == "STOPPED"

    _write_record(agent_home, None, AGENT)
    assert _status(system_dir, env)["outcome"] == "STOPPED"

    elsewhere = base / "empty-home"
    elsewhere.mkdir()
    os.chown(elsewhere, AGENT, AGENT)
    assert _status(system_dir, _env(TETHER_HOME=str(elsewhere)))["outcome"] == "STOPPED"
    assert _status(system_dir, _env(HOME=str(elsewhere)))["outcome"] == "STOPPED"

    code, out = _in_pty(system_dir, "setup", "--no-shared-folder", env=env, uid=AGENT)
    assert code in (0, 2), out
    status = _status(system_dir, env)
    assert status["outcome"] == "STOPPED"
    assert status["set_by_uid"] == PERSON
    assert status["folder"] == str(folder)


@pytest.mark.rule("system-binding")
def test_system_binding_absent_the_agents_account_follows_its_own_setup(
    system_dir: Path, folder: Path, agent_home: Path
) -> None:
    """Unbound (the documented behaviour, unchanged): the account honours the person's
    stop while its record says so, and deleting the record unbinds it."""
    bind_accounts(folder=folder, person_uid=PERSON, accounts=[AGENT])
    unbind_accounts()
    assert load_binding() is None
    _write_record(agent_home, folder, PERSON)
    _set_person_stop(folder)
    env = _env(TETHER_HOME=str(agent_home))
    assert _status(system_dir, env)["outcome"] == "STOPPED"
    (agent_home / "config" / SETUP_FILE_NAME).unlink()
    assert _status(system_dir, env)["outcome"] == "CLEAR"


def _in_agent_child(fn_text: str, system_dir: Path, home: Path) -> str:
    """Run `fn_text` (code that prints) as the agents' account in a fresh interpreter."""
    done = subprocess.run(
        [
            "setpriv",
            f"--reuid={AGENT}",
            f"--regid={AGENT}",
            "--clear-groups",
            sys.executable,
            "-c",
            "import sys, pathlib, tether.stop._system as s; "
            "s.SYSTEM_DIR = pathlib.Path(sys.argv[1]); " + fn_text,
            str(system_dir),
        ],
        capture_output=True,
        text=True,
        env=_env(TETHER_HOME=str(home)),
        cwd="/",
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.rule("system-binding")
def test_system_binding_a_runs_watch_stays_stopped_when_the_record_goes(
    system_dir: Path, folder: Path, agent_home: Path
) -> None:
    """A run's `StopWatch` of the bound account reads STOPPED, and still STOPPED after
    the account deletes its record mid-run; the guard's paths include the bound stop."""
    bind_accounts(folder=folder, person_uid=PERSON, accounts=[AGENT])
    record = _write_record(agent_home, None, AGENT)
    _set_person_stop(folder)
    code = (
        "from tether.stop import StopStore, protected_paths; import os; "
        "w = StopStore.from_setup().watch(); a = w.read().outcome; "
        f"os.unlink({str(record)!r}); b = w.read().outcome; "
        "print(a, b, *protected_paths(), sep='|')"
    )
    first, after, *paths = _in_agent_child(code, system_dir, agent_home).split("|")
    assert (first, after) == ("STOPPED", "STOPPED")
    assert str(folder / str(PERSON)) in paths
    assert str(system_dir / "binding.json") in paths


@pytest.mark.rule("system-binding")
@pytest.mark.parametrize("damage", ["owner", "mode", "unreadable", "garbage"])
def test_system_binding_that_cannot_be_checked_holds(
    system_dir: Path, folder: Path, agent_home: Path, damage: str
) -> None:
    """A binding not root's, writable by others, unreadable or malformed holds every
    reading of every account (it cannot tell whom it binds)."""
    bind_accounts(folder=folder, person_uid=PERSON, accounts=[AGENT])
    where = system_dir / "binding.json"
    if damage == "owner":
        os.chown(where, AGENT, AGENT)
    elif damage == "mode":
        os.chmod(where, 0o666)
    elif damage == "unreadable":
        os.chmod(where, 0o600)
    else:
        where.write_text("{not json", encoding="utf-8")
    _write_record(agent_home, None, AGENT)
    status = _status(system_dir, _env(TETHER_HOME=str(agent_home)))
    assert status["outcome"] == "HOLD", status
    assert str(where) in str(status["reason"])


@pytest.mark.rule("system-binding")
def test_system_binding_holds_a_run_whose_code_the_account_can_change(
    system_dir: Path, folder: Path, agent_home: Path, base: Path
) -> None:
    """Where the bound account can write a directory its interpreter imports from (here
    through PYTHONPATH), `install_hold_reason` says so and its readings hold."""
    bind_accounts(folder=folder, person_uid=PERSON, accounts=[AGENT])
    assert install_hold_reason(AGENT) is None
    _write_record(agent_home, None, AGENT)
    mine = base / "agent-lib"
    mine.mkdir()
    os.chown(mine, AGENT, AGENT)
    env = _env(TETHER_HOME=str(agent_home), PYTHONPATH=str(mine))
    status = _status(system_dir, env)
    assert status["outcome"] == "HOLD", status
    assert str(mine) in str(status["reason"])
    assert "install tether system-wide" in str(status["reason"])
    assert install_hold_reason(PERSON) is None  # not bound: nothing to say


@pytest.mark.rule("system-binding")
def test_system_binding_holds_a_run_with_a_library_the_account_can_change(
    system_dir: Path, folder: Path, agent_home: Path, base: Path
) -> None:
    """A shared library the bound account owns, loaded into the run (here through
    `LD_PRELOAD`, which its own environment files could set), holds its readings."""
    zlib = next(
        (p for p in map(Path, ("/lib/x86_64-linux-gnu/libz.so.1", "/usr/lib/libz.so.1",
                               "/lib64/libz.so.1")) if p.exists()),
        None,
    )  # fmt: skip
    if zlib is None:
        pytest.skip("needs a zlib shared library to preload")
    bind_accounts(folder=folder, person_uid=PERSON, accounts=[AGENT])
    _write_record(agent_home, None, AGENT)
    mine = base / "agent-lib"
    mine.mkdir()
    copy = mine / "libz.so.1"
    shutil.copyfile(zlib, copy)
    os.chown(copy, AGENT, AGENT)
    os.chmod(mine, 0o755)
    env = _env(TETHER_HOME=str(agent_home), LD_PRELOAD=str(copy))
    status = _status(system_dir, env)
    assert status["outcome"] == "HOLD", status
    assert str(copy) in str(status["reason"])


@pytest.mark.rule("system-binding")
def test_system_binding_setup_system_through_a_terminal_and_remove_refused_while_stopped(
    system_dir: Path, folder: Path, everyones_python: Path
) -> None:
    """`tether setup --system` as root at a terminal records a root-owned binding, makes
    the folder and the uid dir, and says which install satisfies it; `--remove` is
    refused while a stop stands and takes the binding back after the lift."""
    env = _env(TETHER_HOME=str(folder.parent.parent / "root-home"))
    code, out = _in_pty(
        system_dir, "setup", "--system", "--shared-folder", str(folder),
        "--person", str(PERSON), "--account", str(AGENT), env=env,
    )  # fmt: skip
    assert code == 0, out
    assert "system-wide, root-owned install" in out
    # `uid 1002`, and its name when the machine has one
    assert re.search(rf"uid {AGENT}( \(\S+\))? cannot change the code its runs", out)
    st = os.stat(system_dir / "binding.json")
    assert (st.st_uid, st.st_mode & 0o777) == (0, 0o644)
    uid_dir = os.stat(folder / str(PERSON))
    assert (uid_dir.st_uid, uid_dir.st_mode & 0o7777) == (PERSON, 0o755)
    stop = _set_person_stop(folder)
    code, out = _in_pty(system_dir, "setup", "--system", "--remove", env=env)
    assert code == 2, out
    assert "run tether lift first" in out
    assert load_binding() is not None
    stop.unlink()
    code, out = _in_pty(system_dir, "setup", "--system", "--remove", env=env)
    assert code == 0, out
    assert load_binding() is None


@pytest.mark.rule("system-binding")
def test_system_binding_is_root_s_act(
    system_dir: Path, folder: Path, agent_home: Path
) -> None:
    """The agents' account cannot bind or unbind (exit 2, one line), nor write the
    binding's folder; in-process, a caller that is not root is refused too."""
    bind_accounts(folder=folder, person_uid=PERSON, accounts=[AGENT])
    env = _env(TETHER_HOME=str(agent_home))
    code, out = _in_pty(system_dir, "setup", "--system", "--remove", env=env, uid=AGENT)
    assert code == 2, out
    assert "refused" in out
    assert load_binding() is not None
    done = subprocess.run(
        ["setpriv", f"--reuid={AGENT}", f"--regid={AGENT}", "--clear-groups",
         "rm", "-f", str(system_dir / "binding.json")],
        capture_output=True, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert load_binding() is not None


def test_system_binding_refuses_a_non_root_caller_in_process(
    system_dir: Path, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`bind_accounts` checks the effective uid before anything is made."""
    monkeypatch.setattr(os, "geteuid", lambda: AGENT)
    with pytest.raises(Refused, match="run it as root"):
        bind_accounts(folder=folder, person_uid=PERSON, accounts=[AGENT])
    assert not folder.exists()


def test_system_binding_paths_the_guard_protects_for_an_unbound_account(
    system_dir: Path,
) -> None:
    """Every account's guard protects the binding file itself; an unbound one no more."""
    paths = protected_paths()
    assert system_dir / "binding.json" in paths
    assert StopStore.from_setup().binding is None


@pytest.mark.rule("system-binding")
def test_system_binding_a_user_namespace_of_the_account_reads_no_clear(
    system_dir: Path, folder: Path, agent_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside a user namespace where the bound account is "root" (what `unshare -Ur`
    makes), root's files show the overflow owner: the binding cannot be checked, and
    the reading holds instead of reading CLEAR."""
    bind_accounts(folder=folder, person_uid=PERSON, accounts=[AGENT])
    _write_record(agent_home, None, AGENT)
    monkeypatch.setenv("TETHER_HOME", str(agent_home))
    libc = ctypes.CDLL(None, use_errno=True)

    def as_root_of_its_own() -> str:
        os.setgroups([])
        os.setresgid(AGENT, AGENT, AGENT)
        os.setresuid(AGENT, AGENT, AGENT)
        libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)  # its /proc/self files are its own
        if libc.unshare(_CLONE_NEWUSER) != 0:
            return f"SKIP|{os.strerror(ctypes.get_errno())}"
        for name, line in (("setgroups", "deny"), ("uid_map", f"0 {AGENT} 1"),
                           ("gid_map", f"0 {AGENT} 1")):  # fmt: skip
            fd = os.open(f"/proc/self/{name}", os.O_WRONLY)
            os.write(fd, line.encode())  # no codec to import past this point
            os.close(fd)
        reading = StopStore.from_setup().read()
        return f"{os.geteuid()}|{reading.outcome}|{reading.reason}"

    text = in_child(as_root_of_its_own)
    if text.startswith("SKIP|"):
        pytest.skip(f"needs unprivileged user namespaces ({text[5:]})")
    assert not text.startswith("child failed"), text
    euid, outcome, reason = text.split("|", 2)
    assert euid == "0", text  # "root" in its own namespace
    assert outcome == "HOLD", reason
    assert "65534" in reason, reason  # the overflow owner it sees on root's files


@pytest.mark.rule("system-binding")
def test_system_binding_board_json_and_status_text_name_the_binding(
    system_dir: Path, folder: Path, agent_home: Path, everyones_python: Path
) -> None:
    """`setup --system --json` lists each bound account with its install verdict, and
    the bound account's `tether status` says it is bound, by which file."""
    from tether.cli._stopview import system_board_json

    board = bind_accounts(folder=folder, person_uid=PERSON, accounts=[AGENT, 1003])
    data = system_board_json(board)
    assert data["binding_file"] == str(system_dir / "binding.json")
    bindings = data["bindings"]
    assert isinstance(bindings, list)
    assert [b["account_uid"] for b in bindings] == [AGENT, 1003]
    assert all(b["person_uid"] == PERSON and b["install_ok"] for b in bindings)
    _write_record(agent_home, None, AGENT)
    done = _as_agent(system_dir, "status", env=_env(TETHER_HOME=str(agent_home)))
    assert done.returncode == 0, done.stderr
    assert f"bound by {system_dir / 'binding.json'}" in done.stdout
    assert f"uid {PERSON}'s stop in {folder}" in done.stdout


@pytest.mark.rule("system-binding")
def test_system_binding_a_run_holds_only_when_its_own_binding_changes(
    system_dir: Path, folder: Path
) -> None:
    """A run's watch is not disturbed when root binds another account, and holds with
    "the setting changed" once root binds this account (or the binding breaks)."""
    watch = StopStore.from_setup().watch()
    assert watch.read().outcome is ReadOutcome.CLEAR
    bind_accounts(folder=folder, person_uid=PERSON, accounts=[AGENT])
    assert watch.read().outcome is ReadOutcome.CLEAR
    bind_accounts(folder=folder, person_uid=PERSON, accounts=[AGENT, os.geteuid()])
    reading = watch.read()
    assert reading.outcome is ReadOutcome.HOLD
    assert "the system binding" in (reading.reason or "")
    assert "setting changed" in (reading.reason or "")


@pytest.mark.rule("bounded-read")
def test_system_binding_on_a_mount_that_never_answers_holds_within_the_bound(
    system_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The binding's own reading is bounded: a system dir on a mount that never answers
    holds every reading within the bound, naming what hung."""
    from tests.stop._mounts import hung_mount

    monkeypatch.setattr(system_module, "READ_BOUND", 0.3)
    with hung_mount(system_dir):
        start = time.monotonic()
        store = StopStore.from_setup()
        reading = store.read()
        assert time.monotonic() - start < 0.3 + 3.0
    assert reading.outcome is ReadOutcome.HOLD
    assert "did not finish" in (reading.reason or "")
    assert str(system_dir) in (reading.reason or "")
