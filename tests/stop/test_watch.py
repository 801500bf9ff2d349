"""A run's `StopWatch`: the place fixed at start, identities pinned, setup watched, and a
stop that vanished without a lift reported."""

from __future__ import annotations

import os
import shutil
import sys
from typing import TYPE_CHECKING

import pytest

from tether.stop import ReadOutcome, SetupRecord, StopStore, lift_stop, set_stop
from tether.stop._setup import save_setup

from ._tree import PERSON, make_tree

if TYPE_CHECKING:
    from pathlib import Path


def _shared(tmp_path: Path) -> tuple[Path, StopStore]:
    tree = make_tree(tmp_path)
    record = SetupRecord(folder=tree.folder, person_uid=PERSON)
    save_setup(record)
    return tree.folder, StopStore.from_setup()


@pytest.mark.root
@pytest.mark.rule("folder-rule")
def test_folder_rule_folder_removed_during_a_run_holds(tmp_path: Path) -> None:
    """A folder removed after the run started makes its next read hold."""
    folder, store = _shared(tmp_path)
    watch = store.watch()
    assert watch.read().outcome is ReadOutcome.CLEAR
    shutil.rmtree(folder)
    reading = watch.read()
    assert reading.outcome is ReadOutcome.HOLD
    assert "cannot be found" in (reading.reason or "")


@pytest.mark.root
@pytest.mark.rule("folder-rule")
def test_folder_rule_folder_renamed_and_replaced_during_a_run_is_the_setting_changed(
    tmp_path: Path,
) -> None:
    """A new folder at the same path, passing every check, still holds: the pin differs."""
    folder, store = _shared(tmp_path)
    watch = store.watch()
    folder.rename(folder.with_name("old"))
    folder.mkdir()
    os.chmod(folder, 0o1777)
    (folder / str(PERSON)).mkdir(mode=0o755)
    os.chown(folder / str(PERSON), PERSON, PERSON)
    assert store.read().outcome is ReadOutcome.CLEAR  # a fresh look is clean ...
    reading = watch.read()  # ... but not for the run that pinned the old folder
    assert reading.outcome is ReadOutcome.HOLD
    assert "the setting changed" in (reading.reason or "")


@pytest.mark.root
@pytest.mark.rule("folder-rule")
def test_folder_rule_uid_dir_replaced_during_a_run_is_the_setting_changed(
    tmp_path: Path,
) -> None:
    """A uid directory replaced after the start holds the run."""
    folder, store = _shared(tmp_path)
    watch = store.watch()
    uid_dir = folder / str(PERSON)
    uid_dir.rename(folder / "old")
    uid_dir.mkdir(mode=0o755)
    os.chown(uid_dir, PERSON, PERSON)
    reading = watch.read()
    assert reading.outcome is ReadOutcome.HOLD
    assert "the setting changed" in (reading.reason or "")


@pytest.mark.root
@pytest.mark.rule("read-outcomes")
def test_read_outcomes_setup_changed_during_a_run_holds(tmp_path: Path) -> None:
    """A setup that names another person after the run started holds the run."""
    folder, store = _shared(tmp_path)
    watch = store.watch()
    save_setup(SetupRecord(folder=folder, person_uid=PERSON + 1))
    reading = watch.read()
    assert reading.outcome is ReadOutcome.HOLD
    assert "the setting changed" in (reading.reason or "")


@pytest.mark.rule("read-outcomes")
def test_read_outcomes_setup_rewritten_with_the_same_choice_does_not_hold() -> None:
    """Writing the same setup again is not a change."""
    record = SetupRecord(person_uid=os.geteuid())
    save_setup(record)
    watch = StopStore.from_setup().watch()
    save_setup(record)
    assert watch.read().outcome is ReadOutcome.CLEAR


@pytest.mark.rule("read-outcomes")
def test_read_outcomes_home_missing_holds(
    tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spec 02, "the home/state dir cannot be found": a reading that makes the own
    store (a run's, a verb's, which make the home first) and finds no home holds,
    naming the home and what makes it. (A display-only reading, `tether status`, says
    CLEAR there: nothing can stand in a folder not made yet; tests/cli.)"""
    monkeypatch.setenv("TETHER_HOME", str(tether_home / "gone"))
    reading = StopStore.from_setup().read()
    assert reading.outcome is ReadOutcome.HOLD
    assert f"home {tether_home / 'gone'} is not there" in (reading.reason or "")
    assert "`tether stop` or `tether run` makes it" in (reading.reason or "")


@pytest.mark.rule("read-outcomes")
@pytest.mark.skipif(sys.platform != "linux", reason="XDG_STATE_HOME is read on Linux")
def test_read_outcomes_own_store_outside_the_home_works_with_no_setup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With `XDG_STATE_HOME` outside the home, a run's reading makes the own store there
    and reads CLEAR (not a HOLD for ever while status says CLEAR), then STOPPED."""
    monkeypatch.delenv("TETHER_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    (tmp_path / "home").mkdir()
    (tmp_path / "xdg-state").mkdir()
    store = StopStore.from_setup()
    assert store.read().outcome is ReadOutcome.CLEAR
    set_stop("test")
    reading = store.read()
    assert reading.outcome is ReadOutcome.STOPPED
    assert reading.stop_path.is_relative_to(tmp_path / "xdg-state")


@pytest.mark.rule("read-outcomes")
def test_read_outcomes_own_store_works_with_no_setup() -> None:
    """With no setup the own store reads CLEAR, then STOPPED after a stop, for this account."""
    store = StopStore.from_setup()
    assert store.place.folder is None
    assert store.read().outcome is ReadOutcome.CLEAR
    set_stop("test")
    reading = store.read()
    assert reading.outcome is ReadOutcome.STOPPED
    assert reading.set_by_uid == os.geteuid()


@pytest.mark.rule("read-outcomes")
def test_read_outcomes_a_stop_that_vanishes_without_a_lift_is_reported() -> None:
    """A stop removed by hand reads CLEAR, reported as vanished without a lift."""
    watch = StopStore.from_setup().watch()
    set_stop()
    assert watch.read().outcome is ReadOutcome.STOPPED
    os.unlink(watch.stop_path)
    reading = watch.read()
    assert reading.outcome is ReadOutcome.CLEAR
    assert any("vanished without a lift" in note for note in reading.notes)


@pytest.mark.rule("read-outcomes")
def test_read_outcomes_a_lifted_stop_is_reported_as_lifted_by_the_person() -> None:
    """Row C17: a stop removed by `lift` reads CLEAR next, reported as "lifted by P at
    ...", never as vanished; the reading after that reports nothing."""
    watch = StopStore.from_setup().watch()
    set_stop()
    assert watch.read().outcome is ReadOutcome.STOPPED
    result = lift_stop()
    assert result.lifted
    reading = watch.read()
    assert reading.outcome is ReadOutcome.CLEAR
    (note,) = reading.notes
    assert f"was lifted by uid {os.geteuid()}" in note
    assert result.lifted_at.isoformat() in note
    assert "vanished" not in note
    assert watch.read().notes == ()


@pytest.mark.root
@pytest.mark.rule("folder-rule")
def test_folder_rule_untrusted_filesystem_holds_on_every_read_of_a_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder on a filesystem whose owners cannot be trusted holds on every read of a
    run, not only the first (regression: a held first read left a pin that later reads
    trusted, skipping the check)."""
    import tether.stop._reader as read_module
    from tether.stop._folder import untrusted_fs_why

    nfs = untrusted_fs_why("nfs4", "rw")
    monkeypatch.setattr(read_module, "_fs_why", lambda fd, mount_id, mounts: nfs)
    _, store = _shared(tmp_path)
    watch = store.watch()
    for _ in range(3):
        reading = watch.read()
        assert reading.outcome is ReadOutcome.HOLD
        assert "nfs4" in (reading.reason or "")
