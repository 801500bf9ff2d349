"""The read's walk on names fixed once per place (`_walk`): what it no longer asks
the kernel twice is still asked on every read."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import tether.stop._reader as reader
from tether.stop import ReadOutcome, StopStore
from tether.stop._mounts import Mount, MountPlan, plan, untrusted_fs_why
from tether.stop._read_memo import SETTLED_NS, ReadMemo
from tether.stop._reader import _fs_why, read_place
from tether.stop._statx import look, root_mount

from ._tree import OTHER, PERSON, Tree, make_tree

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from tether.stop._stop_reading import Identity, RawRead


@pytest.fixture
def at_root() -> Iterator[Path]:
    """A base directly below `/`, so the chain's first directory is opened by its
    absolute name (root only: `/` is root's)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to make a directory in /")
    base = Path(f"/tether-walk-{os.getpid()}")
    base.mkdir(mode=0o755)
    yield base
    if base.is_symlink():
        base.unlink()
    shutil.rmtree(base.with_name(base.name + "-real"), ignore_errors=True)
    shutil.rmtree(base, ignore_errors=True)


def _swap_for_link_to_itself(where: Path) -> None:
    """Put a link at `where` to the same directory, renamed: every identity below it
    stays the same, so only the walk's refusal of links can tell."""
    real = where.with_name(where.name + "-real")
    os.rename(where, real)
    os.symlink(real, where)


@pytest.mark.root
@pytest.mark.rule("folder-rule")
@pytest.mark.parametrize("level", ["first", "inner", "folder"])
def test_folder_rule_a_chain_directory_swapped_for_a_link_to_itself_holds_the_next_read(
    at_root: Path, level: str
) -> None:
    """Spec 02: never follow a link. A run's read after a directory of the chain
    (the first below `/`, one further down, the folder itself) was swapped for a link
    to the very same directory holds, though the folder and the uid directory it
    reaches are the ones pinned."""
    tree = make_tree(at_root)
    watch = StopStore(place=tree.place()).watch()
    assert watch.read().outcome is ReadOutcome.CLEAR
    target = {"first": at_root, "inner": tree.parent, "folder": tree.folder}[level]
    _swap_for_link_to_itself(target)
    reading = watch.read()
    assert reading.outcome is ReadOutcome.HOLD, reading
    assert "symlink" in (reading.reason or "")


def _plan_naming(mount_id: int, kind: str) -> MountPlan:
    return MountPlan((Mount("/", kind, "rw", mount_id),), frozenset(), local=True)


@pytest.mark.rule("folder-rule")
def test_folder_rule_the_folder_is_judged_by_the_mount_its_descriptor_is_on(
    tmp_path: Path,
) -> None:
    """The file system is told by the mount id the kernel gives for the folder's
    descriptor: the table's entry for that id is what is judged, and an id the table
    does not list is asked of the kernel again (`fstatfs`), never taken as trusted."""
    tree: Tree = make_tree(tmp_path)
    fd = os.open(tree.folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        seen = look(fd)
        if seen is None or seen[12] < 0:
            pytest.skip("needs statx with a mount id (Linux 5.8 and later)")
        mount_id = seen[12]
        assert "network" in _fs_why(fd, mount_id, _plan_naming(mount_id, "nfs4"))
        assert _fs_why(fd, mount_id, _plan_naming(mount_id, "ext4")) == ""
        # Not listed: the kernel's own answer for the descriptor (a local test dir).
        assert _fs_why(fd, mount_id, _plan_naming(mount_id + 1, "nfs4")) == ""
        assert _fs_why(fd, mount_id, None) == ""
    finally:
        os.close(fd)


def _later() -> int:
    """A clock past the settling window, so the folder's listing is kept at once."""
    return time.time_ns() + 10 * SETTLED_NS


class _Run:
    """A run's reads of one place, as a watch makes them (pins, memo), counting the
    reads that were made in full (`_read_now`) rather than by the plain pass."""

    def __init__(self, tree: Tree, monkeypatch: pytest.MonkeyPatch) -> None:
        if root_mount() is None:
            pytest.skip("needs statx with a unique mount id (Linux 6.8 and later)")
        self.place = tree.place()
        self.memo = ReadMemo(clock=_later, root_mount=root_mount())
        self.pins: tuple[Identity | None, Identity | None] = (None, None)
        self.full = 0
        full = reader._read_now

        def counted(*args: object) -> RawRead:
            self.full += 1
            return full(*args)  # type: ignore[arg-type]

        monkeypatch.setattr(reader, "_read_now", counted)

    def read(self) -> RawRead:
        raw = read_place(self.place, pins=self.pins, memo=self.memo)
        if raw.reading.outcome is not ReadOutcome.HOLD and self.pins == (None, None):
            self.pins = (raw.folder_id, raw.uid_dir_id)
        return raw


def _replace(where: Path) -> None:
    os.rename(where, where.with_name(where.name + "-old"))
    where.mkdir(mode=0o755)
    if os.geteuid() == 0:
        os.chown(where, PERSON, PERSON)


def _swap_for_link(tree: Tree) -> None:
    tree.stop.unlink()
    os.symlink("/etc/passwd", tree.stop)


def _fifo_at_stop(tree: Tree) -> None:
    tree.stop.unlink()
    os.mkfifo(tree.stop)
    if os.geteuid() == 0:
        os.chown(tree.stop, PERSON, PERSON)


def _set_again(tree: Tree) -> None:
    tree.stop.unlink()
    os.utime(tree.set_stop(), ns=(10**18, 10**18))


def _foreign_stop(tree: Tree) -> None:
    other = tree.folder / str(OTHER)
    other.mkdir(mode=0o755)
    (other / "stop").touch()
    if os.geteuid() == 0:
        os.chown(other, OTHER, OTHER)
        os.chown(other / "stop", OTHER, OTHER)


_CHANGES: dict[str, tuple[Callable[[Tree], None], str, str]] = {
    "parent writable by others": (
        lambda tree: os.chmod(tree.parent, 0o757),
        "HOLD",
        "without the sticky bit",
    ),
    "uid dir writable by its group": (
        lambda tree: os.chmod(tree.uid_dir, 0o775),
        "HOLD",
        "writable by group or others",
    ),
    "uid dir replaced": (lambda tree: _replace(tree.uid_dir), "HOLD", "replaced"),
    "parent swapped for a link to itself": (
        lambda tree: _swap_for_link_to_itself(tree.parent),
        "HOLD",
        "symlink",
    ),
    "folder swapped for a link to itself": (
        lambda tree: _swap_for_link_to_itself(tree.folder),
        "HOLD",
        "symlink",
    ),
    "stop lifted": (lambda tree: tree.stop.unlink(), "CLEAR", ""),
    "stop touched": (
        lambda tree: os.utime(tree.stop, ns=(10**18, 10**18)),
        "STOPPED",
        "2001-",
    ),
    "stop swapped for a FIFO": (_fifo_at_stop, "HOLD", "a FIFO"),
    "stop set again": (_set_again, "STOPPED", "2001-"),
    "stop swapped for a link": (
        _swap_for_link,
        "HOLD",
        "a symlink",
    ),
    "another account's stop": (_foreign_stop, "STOPPED", f"owner_uid={OTHER}"),
    "parent replaced": (lambda tree: _replace(tree.parent), "HOLD", "shared"),
    "folder replaced": (lambda tree: _replace(tree.folder), "HOLD", "not the folder"),
    "stop made writable by others": (
        lambda tree: os.chmod(tree.stop, 0o1646),
        "STOPPED",
        "writable by others",
    ),
    "stop given to another account": (
        lambda tree: os.chown(tree.stop, OTHER, OTHER),
        "CLEAR",
        f"owned by uid {OTHER}",
    ),
    "stop grown past the bound": (
        lambda tree: os.truncate(tree.stop, 5000),
        "HOLD",
        "more than a stop's",
    ),
}


@pytest.mark.root
@pytest.mark.rule("folder-rule")
@pytest.mark.parametrize("change", sorted(_CHANGES))
def test_folder_rule_a_change_after_plain_reads_is_seen_by_the_next_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    """Spec 02: the chain's checks are cache-free. Reads of a run that find what the
    read before found take the plain pass (`_fast_read`); each change of the folder, the
    uid directory or the stop is seen by the very next read all the same."""
    tree = make_tree(tmp_path)
    tree.set_stop()
    run = _Run(tree, monkeypatch)
    for _ in range(4):
        assert run.read().reading.outcome is ReadOutcome.STOPPED
    # The later reads took the plain pass, whatever another test mounts meanwhile.
    assert run.full == 1
    assert run.memo.anchors is not None  # the third and fourth through its anchors
    make, outcome, said = _CHANGES[change]
    make(tree)
    reading = run.read().reading
    assert reading.outcome == outcome, reading
    shown = f"{reading.reason} {reading.set_at} {reading.not_honoured} {reading.notes}"
    assert said in shown


@pytest.mark.rule("folder-rule")
def test_folder_rule_a_mount_the_table_no_longer_trusts_holds_a_plain_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file system is judged on every read, the plain pass's too: once the mount
    table says the folder's mount cannot be trusted, the next read holds."""
    tree = make_tree(tmp_path)
    run = _Run(tree, monkeypatch)
    for _ in range(3):
        assert run.read().reading.outcome is ReadOutcome.CLEAR
    assert run.full == 1
    mounts = plan(run.place.route.store_text, run.place.route.uid_text)
    assert mounts is not None
    fd = os.open(tree.folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        seen = look(fd)
    finally:
        os.close(fd)
    assert seen is not None
    mount_id = seen[12]
    was = mounts.whys[mount_id]
    mounts.whys[mount_id] = untrusted_fs_why("nfs4", "rw")  # the plan is the table's
    try:
        reading = run.read().reading
    finally:
        mounts.whys[mount_id] = was
    assert reading.outcome is ReadOutcome.HOLD
    assert "network filesystem" in (reading.reason or "")


@pytest.mark.root
@pytest.mark.rule("folder-rule")
def test_folder_rule_a_mount_elsewhere_leaves_a_run_on_the_plain_pass_and_an_unmount_in_the_folder_is_seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mounted: list[Path]
) -> None:
    """A regression and a rule. A mount or unmount anywhere else changes the mount
    table but not what it says of the place: the next read still takes the plain pass
    (it took a full read while any test elsewhere mounted something). A mount point in
    the folder hides what is below it from the scan; once it is unmounted, the next
    read reports the stop of another account that it hid, though the folder's own look
    did not change."""
    tree = make_tree(tmp_path)
    hidden = tree.folder / str(OTHER)
    hidden.mkdir(mode=0o755)
    (hidden / "stop").touch()
    os.chown(hidden / "stop", OTHER, OTHER)
    os.chown(hidden, OTHER, OTHER)
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(hidden)], check=True)
    mounted.append(hidden)
    run = _Run(tree, monkeypatch)
    for _ in range(3):
        reading = run.read().reading
        assert reading.outcome is ReadOutcome.CLEAR, reading
        assert reading.not_honoured == ()  # the stop below the mount is hidden
    assert run.memo.anchors is not None
    anchors = run.memo.anchors
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for _ in range(2):
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(elsewhere)], check=True)
        assert run.read().reading.not_honoured == ()
        subprocess.run(["umount", str(elsewhere)], check=True)
        assert run.read().reading.not_honoured == ()
    assert run.full == 1
    assert run.memo.anchors is anchors
    subprocess.run(["umount", str(hidden)], check=True)
    mounted.remove(hidden)
    reading = run.read().reading
    assert reading.outcome is ReadOutcome.CLEAR, reading
    assert [n.owner_uid for n in reading.not_honoured] == [OTHER]
    assert run.full == 2
