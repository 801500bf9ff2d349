"""`AcpServer.serve()` embedded: the server on OS pipes in this process, its statistics."""

from __future__ import annotations

import os
import time
from functools import partial
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread
import pytest
from acp import PROTOCOL_VERSION, text_block
from acp.client.connection import ClientSideConnection
from tests.acp.support import Recorder, write_script
from tests.threads import default_threads_held

from tether._jsonrpc import FdReceiveStream, FdSendStream
from tether.acp import AcpServer
from tether.acp._transport import LineTransport

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio


async def test_an_embedded_server_counts_sessions_refused_frames_and_permissions(
    tmp_path: Path, workspace: Path
) -> None:
    """The server on two OS pipes, driven by the SDK's client (over the same line
    transport): its statistics count the open sessions, the lines it refused and the
    permission requests it sent; the editor closing its side ends `serve()`."""
    model = write_script(
        tmp_path / "s.jsonl",
        [
            {
                "tool_calls": [
                    {"id": "m1", "name": "Bash", "input": {"command": "true"}}
                ]
            },
            {"text": "ok"},
        ],
    )
    to_server_r, to_server_w = os.pipe()
    to_client_r, to_client_w = os.pipe()
    marks: dict[str, float] = {}
    try:
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                server: AcpServer = await tg.start(
                    partial(
                        AcpServer.serve,
                        FdReceiveStream(to_server_r),
                        FdSendStream(to_client_w),
                        model=model,
                    )
                )
                client_side = LineTransport(
                    FdReceiveStream(to_client_r), FdSendStream(to_server_w)
                )
                conn = ClientSideConnection(Recorder().as_client(), client_side)
                await conn.initialize(protocol_version=PROTOCOL_VERSION)
                new = await conn.new_session(cwd=str(workspace), mcp_servers=[])
                os.write(to_server_w, b"not json\n")
                response = await conn.prompt(
                    session_id=new.session_id, prompt=[text_block("go")]
                )
                assert response.stop_reason == "end_turn"
                stats = server.statistics()
                assert (stats.sessions, stats.rejected_frames) == (1, 1)
                assert stats.permission_requests == 1
                os.close(to_server_w)  # the editor quits
                to_server_w = -1
                marks["quit"] = time.monotonic()
            marks["served"] = time.monotonic()
            await conn.close()
        assert marks["served"] - marks["quit"] < 10
    finally:
        for fd in (to_server_r, to_server_w, to_client_r, to_client_w):
            if fd >= 0:
                os.close(fd)


async def test_a_session_opens_while_the_default_threads_are_held(
    tmp_path: Path, workspace: Path
) -> None:
    """Regression: `session/new` checked its directory in a thread of anyio's default
    limiter, the one a user's tools share: with 40 leaked workers it never answered."""
    model = write_script(tmp_path / "s.jsonl", [{"text": "ok"}])
    to_server_r, to_server_w = os.pipe()
    to_client_r, to_client_w = os.pipe()
    try:
        async with default_threads_held(), anyio.create_task_group() as tg:
            await tg.start(
                partial(
                    AcpServer.serve,
                    FdReceiveStream(to_server_r),
                    FdSendStream(to_client_w),
                    model=model,
                )
            )
            client_side = LineTransport(
                FdReceiveStream(to_client_r), FdSendStream(to_server_w)
            )
            conn = ClientSideConnection(Recorder().as_client(), client_side)
            with anyio.fail_after(20):
                await conn.initialize(protocol_version=PROTOCOL_VERSION)
                new = await conn.new_session(cwd=str(workspace), mcp_servers=[])
            assert new.session_id
            tg.cancel_scope.cancel()
    finally:
        for fd in (to_server_r, to_server_w, to_client_r, to_client_w):
            os.close(fd)
