"""A run's reads through the chain held open (`_read_memo.Anchors`): what a name that no
longer leads to its directory does, and that the descriptors held are let go."""

from __future__ import annotations

import gc
import os
import subprocess
import threading
from typing import TYPE_CHECKING

import pytest

from tether.stop._read_memo import ReadMemo
from tether.stop._reader import ReadOutcome, read_place
from tether.stop._statx import root_mount

from ._tree import PERSON, Tree, make_tree

if TYPE_CHECKING:
    from pathlib import Path

    from tether.stop._stop_reading import Identity, RawRead


def _later() -> int:
    return 10**20  # every listing is of a folder settled long before


class _Run:
    """A run's reads of one place, as a watch makes them: pins and a memo."""

    def __init__(self, tree: Tree) -> None:
        if root_mount() is None:
            pytest.skip("needs statx with a unique mount id (Linux 6.8 and later)")
        self.place = tree.place()
        self.memo = ReadMemo(clock=_later, root_mount=root_mount())
        self.pins: tuple[Identity | None, Identity | None] = (None, None)

    def read(self) -> RawRead:
        raw = read_place(self.place, pins=self.pins, memo=self.memo)
        if raw.reading.outcome is not ReadOutcome.HOLD and self.pins == (None, None):
            self.pins = (raw.folder_id, raw.uid_dir_id)
        return raw

    def anchored(self, outcome: ReadOutcome) -> None:
        """Read until the reads go through anchors, each read `outcome`."""
        for _ in range(3):
            assert self.read().reading.outcome is outcome
        assert self.memo.anchors is not None


def _open_fds() -> set[int]:
    """This process's descriptors, less the one the listing itself held."""
    fd = os.open("/proc/self/fd", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return {int(name) for name in os.listdir(fd)} - {fd}
    finally:
        os.close(fd)


def _chain_fds(tree: Tree) -> set[int]:
    """The descriptors this process holds on a directory of `tree`'s chain below `/`."""
    chain = {str(p) for p in tree.uid_dir.parents if p != p.parent} | {
        str(tree.uid_dir)
    }
    held: set[int] = set()
    for fd in _open_fds():
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target in chain or target.startswith(str(tree.base)):
            held.add(fd)
    return held


@pytest.mark.root
@pytest.mark.rule("folder-rule")
@pytest.mark.parametrize("level", ["parent", "folder", "uid_dir"])
def test_folder_rule_a_directory_mounted_over_after_anchored_reads_holds(
    tmp_path: Path, level: str, mounted: list[Path]
) -> None:
    """A file system mounted over a directory of the chain shows the next read
    another directory at that name: the read does not answer through the one held,
    and holds (the folder or uid directory is not the one the run pinned, or is gone
    from the new mount)."""
    tree = make_tree(tmp_path)
    tree.set_stop()
    run = _Run(tree)
    run.anchored(ReadOutcome.STOPPED)
    point = getattr(tree, level)
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(point)], check=True)
    mounted.append(point)
    reading = run.read().reading
    assert reading.outcome is ReadOutcome.HOLD, reading
    assert run.read().reading.outcome is ReadOutcome.HOLD


@pytest.mark.root
@pytest.mark.rule("folder-rule")
def test_folder_rule_the_chain_held_is_let_go_when_it_moved_and_when_the_memo_goes(
    tmp_path: Path,
) -> None:
    """Descriptors held as anchors are closed when a read finds a level moved (the
    walk then opens the new chain and holds that one) and when the memo is dropped:
    a run that reads a place replaced a hundred times holds one chain, not a hundred."""
    tree = make_tree(tmp_path)
    before = _chain_fds(tree)
    run = _Run(tree)
    run.anchored(ReadOutcome.CLEAR)
    held = _chain_fds(tree) - before
    assert len(held) == len(tree.uid_dir.parts) - 1  # each level below `/`
    for turn in range(100):
        # A new parent, with the same folder moved into it: the pins still hold.
        fresh = tmp_path / f"fresh-{turn}"
        fresh.mkdir(mode=0o755)
        os.rename(tree.folder, fresh / tree.folder.name)
        os.rename(tree.parent, tmp_path / f"old-{turn}")
        os.rename(fresh, tree.parent)
        anchors = run.memo.anchors
        for _ in range(2):  # (the folder's move is a change the listing then sees)
            assert run.read().reading.outcome is ReadOutcome.CLEAR
        assert run.memo.anchors is not None
        assert run.memo.anchors is not anchors  # the new chain is held instead
    assert len(_chain_fds(tree) - before) == len(held)
    del run
    gc.collect()
    assert _chain_fds(tree) - before == set()


@pytest.mark.rule("folder-rule")
def test_folder_rule_anchors_made_in_one_thread_are_not_used_in_another(
    tmp_path: Path,
) -> None:
    """Only the thread that opened the anchors reads through them (another could find
    a descriptor number closed and reused under it); a read in another thread makes
    the opening pass and answers the same."""
    tree = make_tree(tmp_path)
    tree.set_stop()
    run = _Run(tree)
    run.anchored(ReadOutcome.STOPPED)
    anchors = run.memo.anchors
    box: list[RawRead] = []
    worker = threading.Thread(target=lambda: box.append(run.read()))
    worker.start()
    worker.join()
    assert box[0].reading.outcome is ReadOutcome.STOPPED
    assert run.memo.anchors is anchors  # kept, and still the first thread's
    assert anchors is not None
    assert anchors.thread == threading.get_ident()
    tree.stop.unlink()
    assert run.read().reading.outcome is ReadOutcome.CLEAR
    if os.geteuid() == 0:
        os.chown(tree.uid_dir, PERSON + 1, PERSON + 1)
        assert run.read().reading.outcome is ReadOutcome.HOLD


@pytest.mark.rule("folder-rule")
def test_folder_rule_a_stop_held_is_let_go_when_it_is_lifted_or_set_again(
    tmp_path: Path,
) -> None:
    """A stop seen is held (`O_PATH`) so the next read judges its name against it;
    a lift lets it go, and a stop set again is judged on a descriptor of its own."""
    tree = make_tree(tmp_path)
    before = _chain_fds(tree)
    tree.set_stop()
    run = _Run(tree)
    run.anchored(ReadOutcome.STOPPED)
    assert run.read().reading.outcome is ReadOutcome.STOPPED
    anchors = run.memo.anchors
    assert anchors is not None
    assert anchors.stop is not None
    chain = len(tree.uid_dir.parts) - 1
    assert len(_chain_fds(tree) - before) == chain + 1
    tree.stop.unlink()
    assert run.read().reading.outcome is ReadOutcome.CLEAR
    assert anchors.stop is None
    assert len(_chain_fds(tree) - before) == chain
    os.utime(tree.set_stop(), ns=(10**18, 10**18))
    for _ in range(3):
        reading = run.read().reading
        assert reading.outcome is ReadOutcome.STOPPED
        assert reading.set_at is not None
        assert reading.set_at.year == 2001
    assert anchors.stop is not None


@pytest.mark.root
@pytest.mark.rule("folder-rule")
def test_folder_rule_a_folder_unmounted_under_a_run_holds_its_next_read(
    tmp_path: Path, mounted: list[Path]
) -> None:
    """A run holds its folder's file system busy (`umount` is refused) and a lazy
    unmount detaches it: the next read finds another directory at the folder's name
    and holds (docs/recorded-stop.md)."""
    tree = make_tree(tmp_path)
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(tree.folder)], check=True)
    mounted.append(tree.folder)
    os.chmod(tree.folder, 0o1777)
    tree.uid_dir.mkdir(mode=0o755)
    os.chown(tree.uid_dir, PERSON, PERSON)
    run = _Run(tree)
    run.anchored(ReadOutcome.CLEAR)
    busy = subprocess.run(["umount", str(tree.folder)], capture_output=True, text=True)
    assert busy.returncode != 0
    assert "busy" in busy.stderr
    subprocess.run(["umount", "-l", str(tree.folder)], check=True)
    mounted.remove(tree.folder)
    reading = run.read().reading
    assert reading.outcome is ReadOutcome.HOLD, reading
