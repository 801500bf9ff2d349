"""S11 before the agent loop exists: a stop cancels a read-only HTTP request in flight, the
mechanism a model request uses (the full S11 test comes with the agent loop of spec 04)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import anyio
import anyio.abc
import pytest

from tether import Runtime, ToolAborted
from tether.host.tools import default_tools
from tether.runtime import CallState
from tether.testing import event_log

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.mark.rule("S11")
async def test_s11_stop_during_a_request_closes_the_connection(
    host_kind: str, workspace: Path
) -> None:
    """S11: a stop while a READ_ONLY request streams ends the call at once and the
    server sees its connection closed (the request is cancelled, not left running)."""
    connected = anyio.Event()
    closed = anyio.Event()
    closed_at: list[float] = []

    async def serve(client: anyio.abc.SocketStream) -> None:
        async with client:
            await client.receive()
            await client.send(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n5\r\ndata:\r\n"
            )
            connected.set()
            try:
                while await client.receive():
                    pass
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                closed_at.append(time.perf_counter())
                closed.set()

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    tools = [t for t in default_tools() if t.name == "WebFetch"]
    async with listener, anyio.create_task_group() as server:
        server.start_soon(listener.serve, serve)
        async with (
            Runtime(
                workspace=workspace,
                tools=tools,
                # Loopback asks by default (S15): this rule lets the call run.
                permissions={"allow": ["WebFetch(domain:127.0.0.1)"]},
                guard=False,
                host=host_kind,  # type: ignore[arg-type]
                abort_bound=0.5,
            ) as rt,
            event_log(rt),
        ):
            session = rt.session()
            async with anyio.create_task_group() as tg, session.turn() as turn:

                async def call() -> None:
                    with pytest.raises(ToolAborted):
                        await turn.call(
                            "WebFetch",
                            {"url": f"http://127.0.0.1:{port}/v1/chat/completions"},
                        )

                tg.start_soon(call)
                with anyio.fail_after(10):
                    await connected.wait()
                t0 = time.perf_counter()
                report = await session.abort()
                assert report.settled
            with anyio.fail_after(5):
                await closed.wait()
            assert closed_at[0] - t0 < 1.0
            [record] = session.ledger_calls()
            assert record.state is CallState.ABORTED
        server.cancel_scope.cancel()
