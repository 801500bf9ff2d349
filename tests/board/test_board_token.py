"""The board's token: owner-only, out of a walled tree's reach, and the board's refusals."""

from __future__ import annotations

import json
import signal
import socket
import stat
import subprocess
from typing import TYPE_CHECKING

import anyio
import httpx
import pytest
from tests.cli._run import TETHER, tether
from tests.waiting import await_until

from tether._board._serve import write_token
from tether._config import paths
from tether.host import ToolContext
from tether.host.tools.bash import Bash

if TYPE_CHECKING:
    from pathlib import Path


pytestmark = pytest.mark.slow


def test_the_token_is_written_owner_only_in_a_private_folder() -> None:
    token, where = write_token(4321)
    assert where.parent == paths().board_dir
    assert stat.S_IMODE(where.stat().st_mode) == 0o600
    assert stat.S_IMODE(where.parent.stat().st_mode) == 0o700
    record = json.loads(where.read_text())
    assert record["url"] == f"http://127.0.0.1:4321/?token={token}"
    assert len(token) >= 40
    assert write_token(4321)[0] != token  # new at each start


@pytest.mark.anyio
async def test_a_walled_tree_cannot_read_a_token_written_while_it_runs(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The board folder is masked in every tree, even for a token written after the
    tree started (a board started while an agent works)."""
    monkeypatch.setenv("TETHER_CONTAINMENT", "namespace")
    paths().state_dir.mkdir(parents=True)
    go = workspace / "go"
    command = (
        "touch ready; n=0; "
        "while [ ! -e go ] && [ $n -lt 400 ]; do sleep 0.02; n=$((n+1)); done; "
        f"cat {paths().board_dir}/board-4321.json || echo refused"
    )
    ctx = ToolContext(call_id="c", session_id="s", workspace=workspace)
    output: list[str] = []

    async def bash() -> None:
        output.append(await Bash().run(ctx, {"command": command}))

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(bash)
            await await_until(
                lambda: (workspace / "ready").exists(), what="the tree up"
            )
            token, where = write_token(4321)
            go.touch()
    assert where.exists()  # the host sees it
    assert "refused" in output[0]
    assert token not in output[0]


def test_a_taken_port_is_refused_in_one_line() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = tether("board", "--port", str(port))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"tether: port {port} on 127.0.0.1 is taken; choose another with --port "
        "(--port 0: any free one)"
    ]
    assert not paths().board_dir.exists() or not any(paths().board_dir.iterdir())


def test_a_store_that_cannot_be_read_is_said_on_the_page(tmp_path: Path) -> None:
    from starlette.testclient import TestClient

    from tether._board._app import board_app
    from tether._board._source import OwnRuns

    store = tmp_path / "runs.sqlite3"
    store.write_bytes(b"")
    store.chmod(0o666)  # writable by others: the owner-only rule refuses it
    app = board_app([OwnRuns(str(store))], token="t", port=1)
    page = TestClient(app, base_url="http://127.0.0.1").get("/?token=t")
    assert page.status_code == 200
    assert "unreadable" in page.text
    assert "writable by" in page.text or "owner" in page.text, page.text


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_ends_the_board_with_a_page_open(sig: int) -> None:
    """A live page's open event stream does not hold the end; it exits 0 and takes
    its token's file away."""
    board = subprocess.Popen(
        [*TETHER, "board", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert board.stdout is not None
        url = board.stdout.readline().split()[-1]
        (record,) = paths().board_dir.glob("board-*.json")
        with (
            httpx.Client(follow_redirects=True) as client,
            client.stream("GET", url.replace("/?", "/events?"), timeout=10) as live,
        ):
            assert live.status_code == 200
            board.send_signal(sig)
            assert board.wait(timeout=10) == 0
        assert not record.exists()
    finally:
        if board.poll() is None:
            board.kill()
        board.communicate(timeout=10)
