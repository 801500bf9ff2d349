"""The board over another account's published runs: the records, lines and bundles it
published, read with the person's reader and shown as text (files of a second uid made
with `os.chown`: tests run as root)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from starlette.testclient import TestClient

from tether._board._app import board_app
from tether._board._published import PublishedRuns
from tether.runs._publish import Seat

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.root

AGENTS = 1002
RUN = "run_0123456789ab-1"


@pytest.fixture
def seat() -> Iterator[Seat]:
    base = Path(tempfile.mkdtemp(prefix="tether-board-pub-", dir="/tmp"))
    os.chmod(base, 0o755)
    folder = base / "srv"
    folder.mkdir(mode=0o755)
    yield Seat(
        account_uid=AGENTS, account="agents", person_uid=os.geteuid(), folder=folder
    )
    shutil.rmtree(base, ignore_errors=True)


def _made(path: Path) -> Path:
    path.mkdir(mode=0o755)
    os.chown(path, AGENTS, AGENTS)
    return path


def _file(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    os.chown(path, AGENTS, AGENTS)
    os.chmod(path, 0o644)


def _publish(seat: Seat) -> None:
    run_dir = _made(_made(_made(seat.dir) / "runs") / RUN)
    record = {
        "version": 1,
        "id": RUN,
        "account": "someone-else",
        "account_uid": 0,
        "state": "halted",
        "started_at": "2026-12-03T10:00:00.000+00:00",
        "lanes": [
            {
                "item": "fix-typo",
                "lane": "lane_1",
                "state": "halted",
                "stage": "work",
                "saved_ref": "refs/tether/saved/x/lane_1",
                "bundle": {"branch": "tether/fix-typo", "branch_commit": "a" * 40},
            }
        ],
        "stop": {
            "seen_at": "2026-12-03T10:00:01.000+00:00",
            "detail": "stop: lunch",
            "halted_at": "2026-12-03T10:00:04.000+00:00",
            "lanes": [
                {
                    "item": "fix-typo",
                    "lane": "lane_1",
                    "in_call": True,
                    "call_ended_at": "2026-12-03T10:00:02.000+00:00",
                    "saved_at": "2026-12-03T10:00:03.000+00:00",
                    "released_at": "2026-12-03T10:00:03.500+00:00",
                    "halted_at": "2026-12-03T10:00:03.600+00:00",
                }
            ],
        },
    }
    _file(run_dir / "status.json", json.dumps(record).encode())
    lines = _made(run_dir / "lines")
    _file(lines / "lane_1.txt", b"first\n<script>alert(1)</script> \x1b[2J wiped\n\n")


def test_the_board_shows_another_account_s_published_run_as_text(seat: Seat) -> None:
    _publish(seat)
    source = PublishedRuns(seat)
    (card,) = source.runs()
    assert (card.account, card.id, card.state) == ("agents", RUN, "halted")
    full = source.run(RUN)
    assert full is not None
    assert [s.what for s in full.timeline] == [
        "stop seen",
        "call ended",
        "saved",
        "released",
        "lane halted",
        "halted",
    ]
    (lane,) = full.lanes
    assert lane.line == "<script>alert(1)</script> ␛[2J wiped"  # shown, not sent
    assert lane.work == "bundle: tether fetch"
    client = TestClient(
        board_app([source], token="t0ken", port=1), base_url="http://127.0.0.1"
    )
    assert client.get("/").status_code == 403
    page = client.get("/?token=t0ken")
    assert page.status_code == 200
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
    assert "<script>alert" not in page.text
    assert "agents" in page.text
    assert "someone-else" not in page.text  # who published is the directory's owner
    work = client.get(f"/diff/agents/{RUN}/lane_1")
    assert f"tether fetch --run {RUN}" in work.text
    assert "tether/agents/fix-typo" in work.text


def test_a_run_published_not_as_the_account_writes_it_is_named_unreadable(
    seat: Seat,
) -> None:
    run_dir = _made(_made(_made(seat.dir) / "runs") / RUN)
    (run_dir / "status.json").write_bytes(b"{}")  # root's file in the account's place
    (card,) = PublishedRuns(seat).runs()
    assert card.state == "unreadable"
    assert card.note
