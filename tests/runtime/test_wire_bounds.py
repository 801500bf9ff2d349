"""S13b on both hosts: output is bounded from the first byte, and a message too large for
the wire costs that call (cut or refused), never the host or the other calls."""

from __future__ import annotations

import contextlib
import json
import os
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from tests.runtime.misbehaving import MISBEHAVING
from tests.runtime.support import ALLOW_ALL, TEST_TOOLS
from tests.waiting import await_until

from tether import ErrorCode, Runtime, ToolAborted
from tether._jsonrpc import MAX_LINE, Connection, FdReceiveStream, FdSendStream
from tether.host._core import MAX_TEXT
from tether.runtime import CallState, PendingPhase, ToolProgress
from tether.testing import event_log

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TOOLS = [*TEST_TOOLS, *MISBEHAVING]
PERMISSIONS = {"allow": [*ALLOW_ALL["allow"], *(t.name for t in MISBEHAVING), "Bash"]}
OVER_A_FRAME = MAX_LINE + 1024 * 1024


@pytest.fixture
def runtime(make_runtime: Callable[..., Runtime]) -> Runtime:
    return make_runtime(tools=TOOLS, permissions=PERMISSIONS)


@pytest.mark.rule("S13b")
async def test_a_result_over_a_frame_is_cut_for_that_call_and_the_host_lives_on(
    runtime: Runtime,
) -> None:
    """S13b (regression): a result larger than a stdio frame ends that call with its head
    and tail (the same on both hosts); a call beside it is unharmed, and the next call
    runs."""
    async with runtime as rt:
        session = rt.session()
        results: dict[str, Any] = {}
        with anyio.fail_after(30):
            async with session.turn() as turn, anyio.create_task_group() as tg:

                async def call(name: str, args: dict[str, Any]) -> None:
                    results[name] = await turn.call(name, args)

                tg.start_soon(call, "Big", {"size": OVER_A_FRAME})
                tg.start_soon(call, "SlowExtension", {"seconds": 0.2})
            big = results["Big"]
            assert not big.is_error
            assert big.output.startswith("xxxx")
            assert big.output.endswith("xxxx")
            assert "bytes of output dropped" in big.output
            assert len(big.output) <= MAX_TEXT + 100
            assert results["SlowExtension"].output == "extension done"
            async with session.turn() as turn:
                assert (await turn.call("Echo", {"text": "alive"})).output == "alive"
        assert {r.state for r in session.ledger_calls()} == {CallState.SUCCEEDED}


@pytest.mark.rule("S13b")
async def test_progress_over_a_frame_is_cut_and_the_host_lives_on(
    runtime: Runtime,
) -> None:
    """S13b: one progress report larger than a frame arrives cut, head and tail."""
    async with runtime as rt, event_log(rt) as events:
        session = rt.session()
        with anyio.fail_after(30):
            async with session.turn() as turn:
                result = await turn.call("Big", {"size": 1, "progress": OVER_A_FRAME})
                assert result.output == "x"
            event = await events.wait_for(
                lambda e: isinstance(e, ToolProgress) and e.text.startswith("pp")
            )
        assert isinstance(event, ToolProgress)
        assert "bytes of output dropped" in event.text
        assert len(event.text) <= MAX_TEXT + 100


@pytest.mark.rule("S13b")
async def test_a_stopped_write_with_a_huge_result_ends_as_it_really_ended(
    runtime: Runtime, workspace: Path
) -> None:
    """S13b (regression): a write stopped while running whose result is larger than a
    frame is recorded SUCCEEDED with its file whole; the host is never declared lost
    (the write was once recorded ABORTED and the host killed mid-write)."""
    async with runtime as rt, event_log(rt) as events:
        session = rt.session()
        outcome: list[Any] = []
        with anyio.fail_after(30):
            async with session.turn() as turn, anyio.create_task_group() as tg:

                async def call() -> None:
                    outcome.append(
                        await turn.call(
                            "BigWrite", {"path": "w.txt", "size": OVER_A_FRAME}
                        )
                    )

                tg.start_soon(call)
                await events.wait_started()
                report = await session.abort()
                assert not report.settled
                assert report.pending[0].phase is PendingPhase.STARTED
            await session.settled()
        assert (workspace / "w.txt").read_text() == "whole"
        (record,) = session.ledger_calls()
        assert record.state is CallState.SUCCEEDED
        assert not outcome[0].is_error
        async with session.turn() as turn:
            assert (await turn.call("Echo", {"text": "alive"})).output == "alive"


@pytest.mark.rule("S13b")
async def test_an_input_over_a_frame_is_refused_for_that_call(
    runtime: Runtime,
) -> None:
    """S13b: an input too large for the wire is INVALID_INPUT on both hosts, and the
    host keeps serving."""
    async with runtime as rt:
        session = rt.session()
        async with session.turn() as turn:
            result = await turn.call("Echo", {"text": "x" * OVER_A_FRAME})
            assert result.code is ErrorCode.INVALID_INPUT
            assert "at most" in result.output
            assert (await turn.call("Echo", {"text": "ok"})).output == "ok"


@pytest.mark.rule("S13b")
async def test_bash_partial_output_killed_at_grace_is_bounded(
    runtime: Runtime, workspace: Path
) -> None:
    """S13b (regression): a Bash call that prints more than a frame and ignores SIGTERM
    is killed at grace with a bounded partial output; the host lives on."""
    from tether.host.tools import default_tools

    bash = [t for t in default_tools() if t.name == "Bash"]
    command = (
        "trap '' TERM; echo started; head -c 40000000 /dev/zero | tr '\\0' x; "
        "echo; touch printed.flag; sleep 60"
    )
    rt = runtime
    rt.tools.extend(bash)
    rt._classes["Bash"] = bash[0].stop_class
    async with rt:
        session = rt.session()
        with anyio.fail_after(30):
            async with session.turn() as turn, anyio.create_task_group() as tg:

                async def call() -> None:
                    with pytest.raises(ToolAborted) as caught:
                        await turn.call("Bash", {"command": command})
                    assert len(caught.value.partial_output) <= 128 * 1024

                tg.start_soon(call)
                await await_until(
                    (workspace / "printed.flag").exists,
                    what="the whole output printed",
                    bound=20,
                )
                await session.abort()
            await session.settled()
            async with session.turn() as turn:
                assert (await turn.call("Echo", {"text": "ok"})).output == "ok"


async def test_an_oversized_frame_is_skipped_and_the_next_one_served() -> None:
    """S13b: a frame longer than the limit costs that frame only: the connection skips
    it, says so, and answers the request after it."""
    to_server_r, to_server_w = os.pipe()
    from_server_r, from_server_w = os.pipe()
    server = Connection(
        FdReceiveStream(to_server_r),
        FdSendStream(from_server_w),
        inline={"ping": lambda params: {"pong": params.get("n")}},
    )
    good = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"n": 5}})

    async def feed() -> None:
        writer = FdSendStream(to_server_w)
        await writer.send(b"y" * (MAX_LINE + 70000) + b"\n" + good.encode() + b"\n")
        os.close(to_server_w)

    async with anyio.create_task_group() as tg:
        tg.start_soon(feed)
        with anyio.fail_after(20):
            await server.serve()
    answers = [json.loads(line) for line in os.read(from_server_r, 65536).splitlines()]
    assert server.oversized_frames == 1
    assert "skipped" in answers[0]["error"]["message"]
    assert answers[1] == {"jsonrpc": "2.0", "id": 1, "result": {"pong": 5}}
    for fd in (to_server_r, from_server_r, from_server_w):
        with contextlib.suppress(OSError):
            os.close(fd)
