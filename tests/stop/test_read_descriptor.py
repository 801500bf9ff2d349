"""The one-descriptor read: nothing non-regular is opened, no byte is read, the
descriptor (not the name) is judged, and a reader without privileges holds when it
cannot look."""

from __future__ import annotations

import json
import os
import select
import shutil
import stat
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tether.stop import ReadOutcome
from tether.stop._reader import Place, read_place

from ._tree import OTHER, PERSON, Tree, make_tree, read_within

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

AGENT = 1003
"""The account the agents run as, in the privilege-dropping tests."""


@pytest.mark.root
@pytest.mark.rule("one-descriptor")
def test_one_descriptor_never_opens_a_device_at_the_stop_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A character device at the stop's name holds and is never passed to open()."""
    tree = make_tree(tmp_path)
    os.mknod(tree.stop, stat.S_IFCHR | 0o644, os.makedev(1, 3))
    os.chown(tree.stop, PERSON, PERSON)
    opened: list[object] = []
    real_open = os.open

    def spy(path: object, flags: int, *args: object, **kw: object) -> int:
        opened.append(path)
        return real_open(path, flags, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", spy)
    reading = read_place(tree.place()).reading
    monkeypatch.undo()
    assert reading.outcome is ReadOutcome.HOLD
    assert "character device" in (reading.reason or "")
    assert "stop" not in opened


@pytest.mark.root
@pytest.mark.rule("one-descriptor")
def test_one_descriptor_reads_no_byte_of_the_stop(tmp_path: Path) -> None:
    """A read leaves the stop's access time alone: it opens and fstats, never reads."""
    tree = make_tree(tmp_path)
    tree.stop.write_bytes(b"reason\n")
    os.chown(tree.stop, PERSON, PERSON)
    now = os.stat(tree.stop).st_mtime_ns
    os.utime(
        tree.stop, ns=(10**9, now)
    )  # atime long before mtime: relatime would update
    reading = read_place(tree.place()).reading
    assert reading.outcome is ReadOutcome.STOPPED
    assert os.stat(tree.stop).st_atime_ns == 10**9


def _swap_to(kind: str, tree: Tree) -> Callable[[int], None]:
    def swap(uid_fd: int) -> None:
        os.unlink("stop", dir_fd=uid_fd)
        if kind == "symlink":
            os.symlink(str(tree.base), "stop", dir_fd=uid_fd)
        elif kind == "fifo":
            os.mkfifo("stop", dir_fd=uid_fd)
        elif kind == "directory":
            os.mkdir("stop", dir_fd=uid_fd)
        elif kind == "foreign":
            fd = os.open("stop", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=uid_fd)
            os.fchown(fd, OTHER, OTHER)
            os.close(fd)
        elif kind == "raise":
            raise RuntimeError("injected")

    return swap


@pytest.mark.root
@pytest.mark.rule("one-descriptor")
@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("symlink", ReadOutcome.HOLD),
        ("fifo", ReadOutcome.HOLD),
        ("directory", ReadOutcome.HOLD),
        ("foreign", ReadOutcome.CLEAR),
        ("removed", ReadOutcome.CLEAR),
    ],
)
def test_one_descriptor_judges_what_it_opened_when_the_stop_is_replaced_between_checks(
    tmp_path: Path, kind: str, expected: ReadOutcome
) -> None:
    """A stop swapped after the gate and before the open is judged by its descriptor."""
    tree = make_tree(tmp_path)
    tree.set_stop()
    raw = read_within(tree.place(), after_gate=_swap_to(kind, tree))
    assert raw.reading.outcome is expected, raw.reading
    if kind == "foreign":
        assert raw.reading.not_honoured[0].owner_uid == OTHER


@pytest.mark.root
@pytest.mark.rule("read-outcomes")
def test_read_outcomes_any_unexpected_exception_in_the_reader_holds(
    tmp_path: Path,
) -> None:
    """An exception nobody planned for inside the reader gives HOLD, never CLEAR."""
    tree = make_tree(tmp_path)
    tree.set_stop()
    reading = read_place(tree.place(), after_gate=_swap_to("raise", tree)).reading
    assert reading.outcome is ReadOutcome.HOLD
    assert "RuntimeError" in (reading.reason or "")


@pytest.fixture
def open_base() -> Iterator[Path]:
    """A base directory every account can search (pytest's own tmp dir is 0700)."""
    base = Path(tempfile.mkdtemp(prefix="tether-stop-", dir="/tmp"))
    os.chmod(base, 0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def _read_as(uid: int, place: Place) -> tuple[str, str | None]:
    """Read in a forked child that dropped to `uid` (root reads past permission bits)."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.close(rfd)
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            reading = read_place(place).reading
            os.write(wfd, json.dumps([str(reading.outcome), reading.reason]).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(wfd)
    try:
        ready, _, _ = select.select([rfd], [], [], 10)
        assert ready, "the unprivileged reader did not answer"
        data = os.read(rfd, 65536)
    finally:
        os.close(rfd)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    outcome, reason = json.loads(data)
    return outcome, reason


@pytest.mark.root
@pytest.mark.rule("folder-rule")
@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("parent-0700", "HOLD"),
        ("uid-dir-0700", "HOLD"),
        ("uid-dir-0711", "STOPPED"),
        ("stop-0600", "HOLD"),
        ("readable", "STOPPED"),
    ],
)
def test_folder_rule_permission_denied_holds_for_a_reader_without_privileges(
    open_base: Path, name: str, expected: str
) -> None:
    """An agents' account that cannot look holds; search-only (0711) still reads."""
    tree = make_tree(open_base)
    tree.set_stop(mode=0o600 if name == "stop-0600" else 0o1644)
    if name == "parent-0700":
        os.chmod(tree.parent, 0o700)
    elif name.startswith("uid-dir-"):
        os.chmod(tree.uid_dir, int(name.removeprefix("uid-dir-"), 8))
    outcome, reason = _read_as(AGENT, tree.place())
    assert outcome == expected, reason
    if expected == "HOLD":
        assert reason is not None
        assert "ermission denied" in reason
