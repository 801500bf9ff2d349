"""Setup: the owner-only record, arming the uid directory, the board, age cleaners,
untrusted filesystems and the paths the guard protects."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from tether.errors import Refused, StoreError, UsageError
from tether.stop import (
    ReadOutcome,
    SetupRecord,
    StopStore,
    build_board,
    choose_setup,
    lift_stop,
    load_setup,
    protected_paths,
    set_stop,
    setup_path,
)
from tether.stop._folder import fs_type, untrusted_fs_why
from tether.stop._setup import person_uid_from, save_setup
from tether.stop._tmpfiles import age_cleaned, cleaner_of, parse_tmpfiles

from ._tree import OTHER, PERSON, make_tree


def test_setup_record_is_owner_only_json() -> None:
    """Setup writes an owner-only (0600) JSON record naming the folder and the person."""
    choose_setup(folder=None, person_uid=os.geteuid())
    st = os.stat(setup_path())
    assert stat.S_IMODE(st.st_mode) == 0o600
    assert st.st_uid == os.geteuid()
    data = json.loads(setup_path().read_text(encoding="utf-8"))
    assert data["folder"] is None
    assert data["person_uid"] == os.geteuid()


def test_setup_defaults_without_a_record() -> None:
    """With no record: no shared folder, the person is the calling account."""
    record = load_setup()
    assert record.folder is None
    assert record.person_uid == os.geteuid()
    assert record.stop_path.parts[-3:] == ("stop", str(os.geteuid()), "stop")


@pytest.mark.rule("read-outcomes")
def test_read_outcomes_setup_record_writable_by_others_is_refused() -> None:
    """A group-writable setup record is refused with a clear error; nothing lifts."""
    save_setup(SetupRecord(person_uid=os.geteuid()))
    os.chmod(setup_path(), 0o620)
    with pytest.raises(StoreError, match="chmod go-w"):
        load_setup()
    with pytest.raises(StoreError):
        StopStore.from_setup()


@pytest.mark.root
def test_setup_makes_the_uid_dir_0755_even_under_a_strict_umask(tmp_path: Path) -> None:
    """Run by the person, setup makes `<folder>/<uid>/` with mode 0755 whatever the umask."""
    tree = make_tree(tmp_path)
    old = os.umask(0o077)
    try:
        board = choose_setup(folder=tree.folder, person_uid=os.geteuid())
    finally:
        os.umask(old)
    uid_dir = tree.folder / str(os.geteuid())
    assert stat.S_IMODE(os.stat(uid_dir).st_mode) == 0o755
    assert board.reading.outcome is ReadOutcome.CLEAR
    assert board.ok


def test_setup_person_by_name_or_uid() -> None:
    """`--person` takes a login name or a numeric uid; an unknown name is a usage error."""
    assert person_uid_from("root") == 0
    assert person_uid_from("1001") == 1001
    with pytest.raises(UsageError, match="no account named"):
        person_uid_from("no-such-account-here")


def test_setup_another_person_needs_a_shared_folder() -> None:
    """Honouring another account's stop without a shared folder is a usage error."""
    with pytest.raises(UsageError, match="needs a shared folder"):
        choose_setup(folder=None, person_uid=os.geteuid() + 1)


@pytest.mark.root
def test_setup_refuses_to_change_the_folder_while_a_stop_stands(tmp_path: Path) -> None:
    """The folder cannot change while a stop stands in it; after a lift it can."""
    tree = make_tree(tmp_path)
    set_stop()
    with pytest.raises(Refused, match="lift first"):
        choose_setup(folder=tree.folder, person_uid=os.geteuid())
    lift_stop()
    board = choose_setup(folder=tree.folder, person_uid=os.geteuid())
    assert board.record.folder == tree.folder


@pytest.mark.root
def test_setup_board_shows_each_failing_check_with_its_path(tmp_path: Path) -> None:
    """The board marks the failing directory of the chain with its path and a repair."""
    tree = make_tree(tmp_path)
    os.chmod(tree.parent, 0o777)
    board = build_board(SetupRecord(folder=tree.folder, person_uid=PERSON))
    failed = [c for c in board.checks if not c.ok]
    assert [c.path for c in failed] == [tree.parent]
    assert "sticky" in failed[0].detail
    assert all(c.ok for c in board.checks if c.path != tree.parent)
    assert board.reading.outcome is ReadOutcome.HOLD
    assert not board.ok


@pytest.mark.root
@pytest.mark.rule("not-honoured")
def test_not_honoured_stops_are_on_the_board(tmp_path: Path) -> None:
    """A stop of another account in the folder is listed on the board, not honoured."""
    tree = make_tree(tmp_path)
    theirs = tree.folder / str(OTHER)
    theirs.mkdir(mode=0o755)
    (theirs / "stop").touch()
    os.chown(theirs / "stop", OTHER, OTHER)
    board = build_board(SetupRecord(folder=tree.folder, person_uid=PERSON))
    assert board.reading.outcome is ReadOutcome.CLEAR
    [item] = board.reading.not_honoured
    assert item.owner_uid == OTHER
    assert str(item) == (
        f"stop in {theirs} owned by uid {OTHER} is not honoured: "
        f"this account honours uid {PERSON}"
    )


def test_setup_board_warns_of_an_age_cleaner_and_of_the_same_account(
    tmp_path: Path,
) -> None:
    """A folder under /tmp gets an age-cleaner warning; the same account gets its caveat."""
    board = build_board(SetupRecord(folder=tmp_path, person_uid=os.geteuid()))
    assert board.tended_by is not None
    assert board.tended_by.path == Path("/tmp")
    assert any("age cleaner" in note for note in board.notes)
    assert board.same_account
    assert any("binds only agents that obey the guard" in n for n in board.notes)


def test_setup_age_cleaners_follow_tmpfiles_priority(tmp_path: Path) -> None:
    """/etc overrides a same-named file in /usr/lib; /tmp and /var/tmp are always listed."""
    etc, lib = tmp_path / "etc", tmp_path / "lib"
    etc.mkdir()
    lib.mkdir()
    (lib / "a.conf").write_text("q /srv/aged 0755 - - 5d\n", encoding="utf-8")
    (etc / "a.conf").write_text("d /srv/other 0755 - - 2w\n", encoding="utf-8")
    (lib / "b.conf").write_text(
        "# c\nd /var/keep 0755 - - -\nL /x - - - - y\n", encoding="utf-8"
    )
    found = age_cleaned((etc, lib))
    paths = {c.path: c.age for c in found}
    assert paths == {
        Path("/srv/other"): "2w",
        Path("/tmp"): "10d",
        Path("/var/tmp"): "30d",
    }
    assert cleaner_of(Path("/srv/other/x/y"), found) is not None
    assert cleaner_of(Path("/srv/tether"), found) is None
    assert parse_tmpfiles("D! /tmp/z 1777 root root 1d\n", "t")[0].age == "1d"


@pytest.mark.rule("folder-rule")
@pytest.mark.parametrize(
    ("kind", "options", "untrusted"),
    [
        ("ext4", "", False),
        ("tmpfs", "uid=0", False),
        ("vfat", "", True),
        ("exfat", "", True),
        ("ntfs3", "", True),
        ("fuseblk", "", True),
        ("fuse.sshfs", "", True),
        ("fuse.somefs", "rw,uid=1000", True),
        ("fuse.somefs", "rw,user_id=0", True),
        ("fuse.bindfs", "rw,user_id=0,allow_other", True),
        ("fuse", "rw", True),
        ("nfs4", "", True),
        ("cifs", "", True),
        ("9p", "", True),
    ],
)
def test_folder_rule_untrusted_filesystems(
    kind: str, options: str, untrusted: bool
) -> None:
    """Filesystems whose owners are made up or remote are untrusted (spec 02 list);
    FUSE is judged by type, whatever its options."""
    assert bool(untrusted_fs_why(kind, options)) is untrusted


@pytest.mark.root
@pytest.mark.rule("folder-rule")
def test_folder_rule_reads_the_filesystem_type_of_a_real_mount(tmp_path: Path) -> None:
    """The type of a real tmpfs mount is read from its descriptor."""
    where = tmp_path / "m"
    where.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)], check=True
    )
    try:
        fd = os.open(where, os.O_RDONLY | os.O_DIRECTORY)
        try:
            found = fs_type(fd)
        finally:
            os.close(fd)
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)
    assert found is not None
    assert found[0] == "tmpfs"


@pytest.mark.root
def test_protected_paths_cover_the_setup_record_and_every_stop_directory(
    tmp_path: Path,
) -> None:
    """The guard's list holds the setup record, the own store and the shared folder's dirs."""
    tree = make_tree(tmp_path)
    save_setup(SetupRecord(folder=tree.folder, person_uid=PERSON))
    found = protected_paths()
    home = Path(os.environ["TETHER_HOME"])
    assert setup_path() in found
    assert home / "state" / "stop" in found
    assert tree.folder in found
    assert tree.uid_dir in found


def test_protected_paths_never_raise_on_a_broken_record() -> None:
    """With a broken setup record the list still names the record and the own store."""
    setup_path().parent.mkdir(parents=True, exist_ok=True)
    setup_path().write_text("{not json", encoding="utf-8")
    os.chmod(setup_path(), 0o600)
    found = protected_paths()
    assert setup_path() in found
    assert len(found) >= 3


@pytest.mark.root
def test_setup_refuses_to_change_the_person_while_a_stop_stands(tmp_path: Path) -> None:
    """Regression: whose stop is honoured cannot change while that stop stands."""
    tree = make_tree(tmp_path)
    choose_setup(folder=tree.folder, person_uid=os.geteuid())
    set_stop()
    with pytest.raises(Refused, match="lift first"):
        choose_setup(folder=tree.folder, person_uid=PERSON)


@pytest.mark.root
def test_setup_refuses_a_change_while_the_stop_cannot_be_read(tmp_path: Path) -> None:
    """Regression: a reading that holds is not "no stop"; the folder stays until it reads."""
    tree = make_tree(tmp_path)
    record = choose_setup(folder=tree.folder, person_uid=os.geteuid()).record
    os.symlink("/etc/hostname", record.stop_path)  # the stop's name now holds
    with pytest.raises(Refused, match="cannot be read"):
        choose_setup(folder=None, person_uid=os.geteuid())
    os.unlink(record.stop_path)
    assert choose_setup(folder=None, person_uid=os.geteuid()).record.folder is None
