"""A run's watch looks at its setup record and the binding only when the kernel says
they may have changed (`_notify`): every change is still seen by the next read."""

from __future__ import annotations

import os
import subprocess
from typing import TYPE_CHECKING

import pytest

from tether.stop import ReadOutcome, SetupRecord, StopStore, StopWatch
from tether.stop import _notify as notify_module
from tether.stop import _stop_store as store_module
from tether.stop._mounts import table
from tether.stop._setup import save_setup, setup_path
from tether.stop._statx import stamp

from ._tree import PERSON, make_tree

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path


def _armed(watch: StopWatch) -> bool:
    return watch._files.quiet(table()[1])


def _watch(system_dir: Path | None = None) -> StopWatch:
    """A watch of the own store whose reads take the plain pass, its files armed."""
    save_setup(SetupRecord(person_uid=os.geteuid()))
    watch = StopStore.from_setup(system_dir=system_dir).watch()
    for view in watch._views:
        view.memo._clock = lambda: 10**20  # the store was made long before
    for _ in range(3):
        assert watch.read().outcome is ReadOutcome.CLEAR
    assert _armed(watch), "the files were not armed: nothing below would be shown"
    assert watch._views[0].memo.anchors is not None  # the reads take the plain pass
    return watch


def _another_record() -> bytes:
    """The bytes of a setup naming another person (as `save_setup` writes them).

    Made before a watch is armed: making them writes the setup file.
    """
    save_setup(SetupRecord(person_uid=os.geteuid() + 1))
    return setup_path().read_bytes()


def _in_place_through_a_link(tmp_path: Path, other: bytes) -> None:
    link = tmp_path / "elsewhere"
    os.link(setup_path(), link)
    with open(link, "r+b") as out:  # the same inode, written by another name
        out.truncate(0)
        out.write(other)


def _config_dir_replaced(tmp_path: Path, other: bytes) -> None:
    config = setup_path().parent
    config.rename(tmp_path / "old-config")
    config.mkdir(mode=0o700)
    (config / setup_path().name).write_bytes(other)
    os.chmod(config / setup_path().name, 0o600)


def _home_replaced(tmp_path: Path, other: bytes) -> None:
    home = setup_path().parent.parent
    copy = tmp_path / "new-home"
    subprocess.run(["cp", "-a", str(home), str(copy)], check=True)
    (copy / setup_path().parent.name / setup_path().name).write_bytes(other)
    home.rename(tmp_path / "old-home")
    copy.rename(home)


def _saved_again(tmp_path: Path, other: bytes) -> None:
    save_setup(SetupRecord(person_uid=os.geteuid() + 1))


_CHANGES: dict[str, Callable[[Path, bytes], None]] = {
    "saved again": _saved_again,
    "written in place through another link": _in_place_through_a_link,
    "its directory replaced": _config_dir_replaced,
    "the home above it replaced": _home_replaced,
}


@pytest.mark.rule("read-outcomes")
@pytest.mark.parametrize("change", sorted(_CHANGES))
def test_read_outcomes_a_setup_changed_while_armed_holds_the_next_read(
    tmp_path: Path, change: str
) -> None:
    """Spec 02: the setting changed since the run started holds. Whatever way the
    setup record changes under an armed watch, the very next read holds."""
    other = _another_record()
    watch = _watch()
    _CHANGES[change](tmp_path, other)
    reading = watch.read()
    assert reading.outcome is ReadOutcome.HOLD, reading
    assert "the setting changed" in (reading.reason or "")


@pytest.mark.root
@pytest.mark.rule("read-outcomes")
def test_read_outcomes_a_setup_mounted_over_while_armed_holds_the_next_read(
    tmp_path: Path, mounted: list[Path]
) -> None:
    """A mount over the setup's directory raises no event on the files watched; the
    mount table's change makes the next read look, and it holds."""
    other = _another_record()
    watch = _watch()
    over = tmp_path / "over"
    over.mkdir(mode=0o700)
    (over / setup_path().name).write_bytes(other)
    os.chmod(over / setup_path().name, 0o600)
    subprocess.run(["mount", "--bind", str(over), str(setup_path().parent)], check=True)
    mounted.append(setup_path().parent)
    reading = watch.read()
    assert reading.outcome is ReadOutcome.HOLD, reading
    assert "the setting changed" in (reading.reason or "")


@pytest.mark.root
@pytest.mark.rule("read-outcomes")
def test_read_outcomes_a_binding_made_while_armed_holds_the_next_read(
    tmp_path: Path,
) -> None:
    """The binding is armed too, where it is not there yet: one made in its folder
    after the run started holds the next read."""
    system = tmp_path / "system"
    system.mkdir(mode=0o755)
    watch = _watch(system)
    (system / "binding.json").write_text("{}")
    reading = watch.read()
    assert reading.outcome is ReadOutcome.HOLD, reading
    assert "binding" in (reading.reason or "")


@pytest.mark.rule("read-outcomes")
def test_read_outcomes_other_entries_beside_the_setup_leave_a_watch_armed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Entries of the directories above the setup record that are not on its path
    (a busy home) are read and let pass: the watch stays armed, and its reads make
    no look at the setup record."""
    watch = _watch()
    looks: list[bytes] = []

    def counted(path: bytes) -> tuple[bytes, ...] | None:
        looks.append(path)
        return stamp(path)

    monkeypatch.setattr(store_module, "stamp", counted)
    home = setup_path().parent.parent
    for at in range(20):
        (home / f"scratch-{at}").write_text("x")
        (setup_path().parent / f"other-{at}").write_text("x")
        assert watch.read().outcome is ReadOutcome.CLEAR
    assert looks == []
    assert _armed(watch)
    save_setup(SetupRecord(person_uid=os.geteuid() + 1))
    assert watch.read().outcome is ReadOutcome.HOLD
    assert looks  # and the change made it look


@pytest.mark.rule("read-outcomes")
def test_read_outcomes_a_forked_child_sees_a_change_and_so_does_its_parent() -> None:
    """A forked child arms a notifier of its own (a shared queue would let one
    process read the other's events): a change made then is seen by both."""
    watch = _watch()
    up_read, up_write = os.pipe()  # child to parent
    down_read, down_write = os.pipe()  # parent to child
    pid = os.fork()
    if pid == 0:  # the child
        ok = False
        try:
            ok = watch.read().outcome is ReadOutcome.CLEAR
            os.write(up_write, b"r")
            os.read(down_read, 1)  # the parent changed the setup
            ok = ok and watch.read().outcome is ReadOutcome.HOLD
        finally:
            os._exit(0 if ok else 1)
    assert os.read(up_read, 1) == b"r"
    save_setup(SetupRecord(person_uid=os.geteuid() + 1))
    os.write(down_write, b"g")
    _, status = os.waitpid(pid, 0)
    for fd in (up_read, up_write, down_read, down_write):
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0
    reading = watch.read()
    assert reading.outcome is ReadOutcome.HOLD
    assert "the setting changed" in (reading.reason or "")


@pytest.mark.root
@pytest.mark.rule("read-outcomes")
def test_read_outcomes_a_setup_reached_through_a_link_is_looked_at_on_every_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The looks follow a link on the way to the setup record and the watches would
    not, so such a record is never armed: every read looks, and sees a change."""
    real = tmp_path / "real-home"
    real.mkdir(mode=0o700)
    (tmp_path / "home").symlink_to(real)
    monkeypatch.setenv("TETHER_HOME", str(tmp_path / "home"))
    (tmp_path / "tree").mkdir()
    tree = make_tree(tmp_path / "tree")
    save_setup(SetupRecord(folder=tree.folder, person_uid=PERSON))
    tries: list[str] = []
    arm = notify_module._arm

    def counted(who: object, path: str, now: object) -> bool:
        tries.append(path)
        return arm(who, path, now)  # type: ignore[arg-type]

    monkeypatch.setattr(notify_module, "_arm", counted)
    watch = StopStore.from_setup().watch()
    for _ in range(3):
        assert watch.read().outcome is ReadOutcome.CLEAR
    assert not _armed(watch)
    assert len(tries) == 1  # refused once, not tried again on every read
    save_setup(SetupRecord(folder=tree.folder, person_uid=PERSON + 1))
    reading = watch.read()
    assert reading.outcome is ReadOutcome.HOLD
    assert "the setting changed" in (reading.reason or "")
