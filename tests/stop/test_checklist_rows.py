"""Rows of the stop folder's checklist that need more than a table entry: ACLs (A16), a
broken `/` (A17), a stop unlinked mid-read (C16), a flapping stop (C18), another mount
namespace (D9) and a foreign entry at the stop's name (D12)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
import threading
from pathlib import Path

import pytest
from tests.machine import missing, which

import tether.stop._stop_store as store_module
from tether.errors import StoreError
from tether.stop import ReadOutcome, StopStore, set_stop
from tether.stop._reader import Place, read_place
from tether.stop._statx import root_mount

from ._child import in_child
from ._tree import OTHER, PERSON, make_tree, read_within


@pytest.mark.root
@pytest.mark.rule("folder-rule")
@pytest.mark.parametrize("target", ["parent", "uid_dir"])
def test_folder_rule_an_acl_granting_write_holds(tmp_path: Path, target: str) -> None:
    """Row A16: an ACL that grants another account write shows in the group bits (the
    mask), so the reading holds though `chmod` bits alone would pass."""
    setfacl = which("setfacl")
    if setfacl is None:
        missing("the ACL rows", "needs setfacl to set an ACL: apt-get install acl")
    tree = make_tree(tmp_path)
    tree.set_stop()
    assert read_within(tree.place()).reading.outcome is ReadOutcome.STOPPED
    path = tree.parent if target == "parent" else tree.uid_dir
    subprocess.run([setfacl, "-m", f"u:{OTHER}:rwx", str(path)], check=True)
    reading = read_within(tree.place()).reading
    assert reading.outcome is ReadOutcome.HOLD, reading
    assert str(path) in (reading.reason or "")


@pytest.mark.root
@pytest.mark.rule("folder-rule")
@pytest.mark.parametrize("broken", ["writable", "not-root"])
def test_folder_rule_a_root_directory_writable_by_others_or_not_roots_holds(
    tmp_path: Path, broken: str
) -> None:
    """Row A17: where `/` itself is writable by others without the sticky bit, or not
    owned by root (broken images), every reading holds. A chroot makes such a `/`."""
    root = tmp_path / "root"
    root.mkdir()
    tree = make_tree(root)
    tree.set_stop()
    if broken == "writable":
        os.chmod(root, 0o777)
    else:
        os.chown(root, OTHER, OTHER)
    inside = Path("/") / tree.folder.relative_to(root)
    place = Place(folder=inside, store_dir=inside, person_uid=PERSON, bound=5.0)

    def read_in_chroot() -> str:
        os.chroot(root)
        os.chdir("/")
        reading = read_place(place).reading
        return f"{reading.outcome}|{reading.reason}"

    outcome, _, reason = in_child(read_in_chroot).partition("|")
    assert outcome == "HOLD", reason
    assert reason.startswith("/ is ")


@pytest.mark.root
@pytest.mark.rule("one-descriptor")
def test_one_descriptor_a_stop_unlinked_between_open_and_fstat_is_honoured(
    tmp_path: Path,
) -> None:
    """Row C16: the stop existed at the open, so the reading is STOPPED; the next
    reading is CLEAR."""
    tree = make_tree(tmp_path)
    tree.set_stop()
    raw = read_within(tree.place(), after_open=lambda fd: os.unlink(tree.stop))
    assert raw.reading.outcome is ReadOutcome.STOPPED, raw.reading
    assert raw.reading.set_by_uid == PERSON
    assert read_within(tree.place()).reading.outcome is ReadOutcome.CLEAR


@pytest.mark.root
@pytest.mark.rule("read-outcomes")
def test_read_outcomes_a_flapping_stop_is_judged_alone_on_every_reading(
    tmp_path: Path,
) -> None:
    """Row C18: while a thread sets and removes the stop as fast as it can, each reading
    is STOPPED or CLEAR (never a HOLD, never an error), and every stop that went away
    between two readings is reported."""
    tree = make_tree(tmp_path)
    watch = StopStore(place=tree.place()).watch()
    done = threading.Event()

    def flap() -> None:
        tmp = tree.uid_dir / ".flap"
        while not done.is_set():
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.fchown(fd, PERSON, PERSON)
            os.close(fd)
            os.rename(tmp, tree.stop)
            done.wait(0.0005)  # each state lasts a little: both get read
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tree.stop)
            done.wait(0.0005)

    flapper = threading.Thread(target=flap, daemon=True)
    flapper.start()
    outcomes: list[ReadOutcome] = []
    try:
        changes = 0
        while changes < 20 and len(outcomes) < 20000:
            before = outcomes[-1] if outcomes else None
            reading = watch.read()
            assert reading.outcome in (ReadOutcome.STOPPED, ReadOutcome.CLEAR), reading
            if before is ReadOutcome.STOPPED and reading.outcome is ReadOutcome.CLEAR:
                assert any("vanished" in note for note in reading.notes), reading
                changes += 1
            outcomes.append(reading.outcome)
    finally:
        done.set()
        flapper.join(5)
    assert changes == 20, f"only {changes} changes seen in {len(outcomes)} readings"


_CLONE_NEWNS = 0x00020000
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18


@pytest.mark.root
@pytest.mark.rule("folder-rule")
@pytest.mark.parametrize("cover", [False, True])
@pytest.mark.parametrize("pinned", ["root mount", "namespace link"])
def test_folder_rule_a_reader_moved_into_another_mount_namespace_holds(
    tmp_path: Path, cover: bool, pinned: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Row D9: a watch started in one mount namespace holds when its reader is moved into
    another (an empty directory bind-mounted over the folder there, or not), though
    what it sees there is no stop. Where the kernel gives mounts unique ids the walk's
    look at `/` tells it; elsewhere each read reads the namespace link: both hold."""
    if pinned == "namespace link":
        monkeypatch.setattr(store_module, "root_mount", lambda: None)
    elif root_mount() is None:
        pytest.skip("needs statx with STATX_MNT_ID_UNIQUE (Linux 6.8) to pin /")
    tree = make_tree(tmp_path)
    tree.set_stop()
    empty = tmp_path / "empty"
    empty.mkdir()
    libc = ctypes.CDLL(None, use_errno=True)

    def move_and_read() -> str:
        watch = StopStore(place=tree.place()).watch()
        first = watch.read().outcome
        os.unlink(tree.stop)  # what the reader would see next is no stop at all
        if libc.unshare(_CLONE_NEWNS) != 0:
            return f"SKIP|unshare: {os.strerror(ctypes.get_errno())}"
        libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None)
        if cover:
            libc.mount(
                str(empty).encode(), str(tree.folder).encode(), None, _MS_BIND, None
            )
        reading = watch.read()
        return f"{first}|{reading.outcome}|{reading.reason}"

    text = in_child(move_and_read)
    if text.startswith("SKIP|"):
        pytest.skip(f"needs CAP_SYS_ADMIN for a mount namespace ({text})")
    first, outcome, reason = text.split("|", 2)
    assert first == "STOPPED"
    assert outcome == "HOLD", reason
    assert "another mount namespace" in reason


def _make(kind: str, where: Path) -> str:
    if kind == "fifo":
        os.mkfifo(where)
    elif kind == "symlink":
        os.symlink("/etc/passwd", where)
    elif kind == "file":
        where.write_bytes(b"x" * 10)
    elif kind == "empty-dir":
        where.mkdir()
    else:
        where.mkdir()
        (where / "inside").touch()
    if os.geteuid() == 0:
        os.lchown(where, OTHER, OTHER)
    return kind


@pytest.mark.rule("atomic-stop")
@pytest.mark.parametrize(
    ("kind", "said"),
    [
        ("fifo", "replaced a FIFO"),
        ("symlink", "replaced a symlink"),
        ("file", "replaced a file"),
        ("empty-dir", "removed a directory"),
    ],
)
def test_atomic_stop_a_foreign_entry_at_the_stop_name_is_replaced_with_a_report(
    kind: str, said: str
) -> None:
    """Row D12: whatever sits at the stop's name (a FIFO, a link, another's file, an
    empty directory) gives way to the person's stop, and `set_stop` reports what was
    there."""
    store = StopStore.from_setup()
    _make(kind, store.place.stop_path)
    reading = set_stop()
    assert reading.outcome is ReadOutcome.STOPPED
    assert any(note.startswith(said) for note in reading.notes), reading.notes


@pytest.mark.rule("atomic-stop")
def test_atomic_stop_a_directory_with_entries_at_the_stop_name_is_left_alone() -> None:
    """Row D12: a directory with entries at the stop's name is not removed; `set_stop`
    fails saying what to do, and nothing claims the stop was set."""
    store = StopStore.from_setup()
    _make("full-dir", store.place.stop_path)
    with pytest.raises(StoreError, match=r"NOT set.*remove it by hand"):
        set_stop()
    assert (store.place.stop_path / "inside").exists()
