"""The person's reader of what a bound account published: the care of the stop file.

Files of a second uid are made with `os.chown` (tests run as root): the reader takes
only what the account itself wrote, as it writes it, and says why it took nothing else.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, cast

import pytest

from tether.runs._publish import (
    RECORD_BOUND,
    RUNS_KEPT,
    Publisher,
    PublishUnreadable,
    Seat,
    published_runs,
    read_text,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tether.runs import Store

pytestmark = pytest.mark.root

PERSON = 1001
AGENTS = 1002
RUN = "run_0123456789ab-1"


@pytest.fixture
def seat() -> Iterator[Seat]:
    base = Path(tempfile.mkdtemp(prefix="tether-pub-", dir="/tmp"))
    os.chmod(base, 0o755)
    folder = base / "srv"
    folder.mkdir(mode=0o755)
    yield Seat(account_uid=AGENTS, account="agents", person_uid=PERSON, folder=folder)
    shutil.rmtree(base, ignore_errors=True)


def _made(path: Path, *, uid: int = AGENTS, mode: int = 0o755) -> Path:
    path.mkdir(mode=mode)
    os.chown(path, uid, uid)
    os.chmod(path, mode)
    return path


def _file(path: Path, data: bytes, *, uid: int = AGENTS, mode: int = 0o644) -> Path:
    path.write_bytes(data)
    os.chown(path, uid, uid)
    os.chmod(path, mode)
    return path


def _record(**extra: object) -> bytes:
    record = {
        "version": 1,
        "id": RUN,
        "account": "root",
        "account_uid": 0,
        "state": "halting",
        "started_at": "2026-01-01T00:00:00+00:00",
        "lanes": [{"item": "fix\x1b]0;owned\x07", "lane": "lane_1", "stage": "build"}],
        "stop": None,
        **extra,
    }
    return json.dumps(record).encode()


def _run_dir(seat: Seat) -> Path:
    return _made(_made(_made(seat.dir) / "runs") / RUN)


def test_publish_reader_takes_a_record_as_the_account_wrote_it(seat: Seat) -> None:
    """Who published is the directory's owner, whatever the record claims; escapes in
    its texts are shown, never sent to a terminal; a missing text is None."""
    _file(_run_dir(seat) / "status.json", _record())
    (record,) = published_runs(seat)
    assert (record["account"], record["account_uid"]) == ("agents", AGENTS)
    assert record["state"] == "halting"
    assert "\x1b" not in record["lanes"][0]["item"]
    assert record["lanes"][0]["item"].startswith("fix")
    assert read_text(seat, "digest-2026-01-01.md") is None


def test_publish_reader_sees_nothing_where_the_account_published_nothing(
    seat: Seat,
) -> None:
    assert published_runs(seat) == []


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        ("link", "symlink"),
        ("fifo", "FIFO"),
        ("foreign", "not by agents"),
        ("group-writable", "writable by others"),
        ("large", "larger than"),
        ("not-json", "not a status record"),
    ],
)
def test_publish_reader_refuses_a_record_not_as_published(
    seat: Seat, damage: str, said: str
) -> None:
    """A link, a FIFO (never opened: no hang), another owner, a group write bit, an
    oversized or malformed file: left out, with why, in its place."""
    where = _run_dir(seat) / "status.json"
    match damage:
        case "link":
            target = _file(seat.folder / "elsewhere.json", _record())
            os.symlink(target, where)
            os.lchown(where, AGENTS, AGENTS)
        case "fifo":
            os.mkfifo(where)
            os.chown(where, AGENTS, AGENTS)
        case "foreign":
            _file(where, _record(), uid=PERSON + 7)
        case "group-writable":
            _file(where, _record(), mode=0o664)
        case "large":
            _file(where, _record(pad="x" * RECORD_BOUND))
        case "not-json":
            _file(where, b"{")
    (entry,) = published_runs(seat)
    assert entry["id"] == RUN
    assert said in entry["error"], entry


@pytest.mark.parametrize("damage", ["foreign-dir", "link-dir", "writable-dir"])
def test_publish_reader_refuses_a_directory_not_the_account_s(
    seat: Seat, damage: str
) -> None:
    """The account's directory itself: another owner, a link, a group write bit."""
    match damage:
        case "foreign-dir":
            _made(seat.dir, uid=PERSON + 7)
        case "link-dir":
            real = _made(seat.folder / "real")
            os.symlink(real, seat.dir)
        case "writable-dir":
            _made(seat.dir, mode=0o775)
    with pytest.raises(PublishUnreadable):
        published_runs(seat)


def test_publisher_keeps_the_newest_runs_of_its_account(seat: Seat) -> None:
    """Bounded: a run starting prunes the oldest published runs beyond `RUNS_KEPT`."""
    mine = seat.folder / str(os.geteuid())
    runs = mine / "runs"
    runs.mkdir(parents=True, mode=0o755)
    os.chmod(mine, 0o755)
    names = [f"run_{n:04d}" for n in range(RUNS_KEPT + 5)]
    for n, name in enumerate(names):
        (runs / name).mkdir()
        os.utime(runs / name, (1_000_000 + n, 1_000_000 + n))
    store = cast("Store", None)  # pruning reads no ledger
    publisher = Publisher(
        mine, PERSON, store, "run_new", lane_log=lambda lane: mine, repo=mine
    )
    publisher._prune()
    assert sorted(os.listdir(runs)) == names[-(RUNS_KEPT - 1) :]
