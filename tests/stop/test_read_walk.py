"""The read's walk on names fixed once per place (`_walk`): what it no longer asks
the kernel twice is still asked on every read."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.stop import ReadOutcome, StopStore
from tether.stop._mounts import Mount, MountPlan
from tether.stop._read import _fs_why
from tether.stop._statx import look

from ._tree import Tree, make_tree


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
        if seen is None or seen[6] < 0:
            pytest.skip("needs statx with a mount id (Linux 5.8 and later)")
        mount_id = seen[6]
        assert "network" in _fs_why(fd, mount_id, _plan_naming(mount_id, "nfs4"))
        assert _fs_why(fd, mount_id, _plan_naming(mount_id, "ext4")) == ""
        # Not listed: the kernel's own answer for the descriptor (a local test dir).
        assert _fs_why(fd, mount_id, _plan_naming(mount_id + 1, "nfs4")) == ""
        assert _fs_why(fd, mount_id, None) == ""
    finally:
        os.close(fd)
