"""The loopback server tether runs with uvicorn, started again in the same event loop."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from tether._loopback import listen_loopback, quiet_uvicorn

pytestmark = pytest.mark.anyio


async def _ok(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


async def _get(port: int) -> bytes:
    """One request's raw answer from 127.0.0.1:`port`."""
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = b""
        try:
            while True:
                answer += await stream.receive()
        except anyio.EndOfStream:
            return answer


async def test_a_server_after_a_cancelled_one_serves_its_socket() -> None:
    """A cancelled uvicorn left its socket registered with the event loop; the next
    server's socket, given the same file descriptor, was never watched and its client
    waited unserved (regression). Each of four servers, cancelled in turn, answers."""
    descriptors: list[int] = []
    for _ in range(4):
        with listen_loopback(0) as sock:
            descriptors.append(sock.fileno())
            server = quiet_uvicorn(_ok, signals=False)
            async with anyio.create_task_group() as tg:
                tg.start_soon(server.serve, [sock])
                with anyio.fail_after(10):
                    while not server.started:  # noqa: ASYNC110 (uvicorn sets a flag)
                        await anyio.sleep(0.005)
                    answer = await _get(sock.getsockname()[1])
                assert answer.startswith(b"HTTP/1.1 200"), answer
                tg.cancel_scope.cancel()
    # The case under test: a descriptor a cancelled server had, used again.
    assert len(set(descriptors)) < len(descriptors), descriptors
