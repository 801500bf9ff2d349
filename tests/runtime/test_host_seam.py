"""The host seam itself (tools.execute / tools.abort / progress / result), both hosts:
typed early-abort tombstones (S7), duplicate ids at the host, and the stdio framing."""

from __future__ import annotations

import json
import subprocess
import sys
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio
import pytest
from tests.clocks import Clock
from tests.runtime.support import ALLOW_ALL, TEST_TOOLS

from tether import ErrorCode, Runtime, StopClass, ToolContext, tool
from tether.errors import ToolFailed
from tether.host._broker import Broker
from tether.host._core import HostCore
from tether.host._inprocess import InProcessHost
from tether.host._protocol import (
    AbortRequest,
    CallKey,
    ExecuteRequest,
    HostConnection,
    HostEvent,
    KillRequest,
    ResultEvent,
)
from tether.host._stdio import StdioHostClient
from tether.host._wire import event_from_wire, event_to_wire
from tether.runtime import CallState

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable
    from pathlib import Path

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


class Results:
    """The host's events as they arrive, with a wait that wakes on each new one."""

    def __init__(self) -> None:
        self.events: list[HostEvent] = []
        self._arrived = anyio.Event()

    def __call__(self, event: HostEvent) -> None:
        self.events.append(event)
        self._arrived.set()
        self._arrived = anyio.Event()

    async def wait(self, predicate: Callable[[HostEvent], bool]) -> HostEvent:
        """Return the first event `predicate` accepts, waiting (bounded) for it."""
        with anyio.fail_after(10):
            while True:
                arrived = self._arrived
                for event in self.events:
                    if predicate(event):
                        return event
                await arrived.wait()

    async def result(self, key: CallKey) -> ResultEvent:
        found = await self.wait(lambda e: isinstance(e, ResultEvent) and e.key == key)
        assert isinstance(found, ResultEvent)
        return found


@asynccontextmanager
async def open_host(
    kind: str,
    workspace: Path,
    *,
    tombstone_ttl: float = 60.0,
    clock: Callable[[], float] = anyio.current_time,
) -> AsyncIterator[tuple[HostConnection, Results]]:
    """A host of `kind` with the test tools; `clock` is the in-process host's only (the
    stdio host runs in a process of its own, on its own clock)."""
    from tether.host._rules import PermissionRules

    rules = PermissionRules.from_lists(allow=ALLOW_ALL["allow"], ask=[], deny=[])
    results = Results()
    if kind == "inprocess":
        core = HostCore(
            TEST_TOOLS,
            broker=Broker(workspace=workspace, rules=rules),
            tombstone_ttl=tombstone_ttl,
            clock=clock,
        )
        async with InProcessHost.open(core, results) as conn:
            yield conn, results
    else:
        async with StdioHostClient.open(
            tools=TEST_TOOLS,
            workspace=workspace,
            rules=rules,
            approver=None,
            guard=False,
            max_concurrent=4,
            tombstone_ttl=tombstone_ttl,
            sink=results,
        ) as client:
            yield client, results


def _abort(key: CallKey) -> AbortRequest:
    return AbortRequest(key, "user", None)


@pytest.mark.rule("S7")
async def test_s7_early_abort_blocks_that_call_and_no_other(
    host_kind: str, workspace: Path
) -> None:
    """S7: an abort that arrives before its call blocks exactly that (session, id, tool)."""
    async with open_host(host_kind, workspace) as (host, results):
        key = CallKey("s1", "c1", "Echo")
        ack = await host.abort(_abort(key))
        assert not ack.found
        assert ack.phase == "unknown"
        other_tool = CallKey("s1", "c1", "Fail")
        other_session = CallKey("s2", "c1", "Echo")
        await host.execute(ExecuteRequest(other_tool, {"message": "ran"}))
        await host.execute(ExecuteRequest(other_session, {"text": "ran"}))
        assert (await results.result(other_tool)).message == "ran"
        assert (await results.result(other_session)).output == "ran"
        blocked = CallKey("s1", "c2", "Echo")
        await host.abort(_abort(blocked))
        await host.execute(ExecuteRequest(blocked, {"text": "must not run"}))
        result = await results.result(blocked)
        assert result.code is ErrorCode.TOOL_ABORTED
        assert result.output == ""


@pytest.mark.rule("S7")
async def test_s7_tombstone_expires_after_its_ttl(workspace: Path) -> None:
    """S7: an early-abort tombstone blocks its call while its time to live lasts, by
    the host's clock (moved by hand here), and not after."""
    clock = Clock()
    async with open_host("inprocess", workspace, tombstone_ttl=0.2, clock=clock) as (
        host,
        results,
    ):
        within, after = CallKey("s1", "c8", "Echo"), CallKey("s1", "c9", "Echo")
        await host.abort(_abort(within))
        await host.abort(_abort(after))
        clock.now += 0.19
        await host.execute(ExecuteRequest(within, {"text": "within ttl"}))
        assert (await results.result(within)).code is ErrorCode.TOOL_ABORTED
        clock.now += 0.02
        await host.execute(ExecuteRequest(after, {"text": "after ttl"}))
        assert (await results.result(after)).output == "after ttl"


@pytest.mark.rule("S7")
async def test_s7_the_stdio_host_keeps_tombstones_for_the_ttl_it_is_given(
    workspace: Path,
) -> None:
    """S7: `tether host --stdio` lives by the TTL it is started with: one far shorter
    than a round trip over its pipes has run out when the call arrives (the default
    blocks it: `test_s7_early_abort_blocks_that_call_and_no_other`)."""
    async with open_host("stdio", workspace, tombstone_ttl=1e-6) as (host, results):
        key = CallKey("s1", "c9", "Echo")
        await host.abort(_abort(key))
        await host.execute(ExecuteRequest(key, {"text": "after ttl"}))
        assert (await results.result(key)).output == "after ttl"


@pytest.mark.rule("S8")
async def test_s8_host_refuses_a_reused_call_id(
    host_kind: str, workspace: Path
) -> None:
    """S8: the host itself refuses a call id already used in the session, even for another tool."""
    async with open_host(host_kind, workspace) as (host, results):
        first = CallKey("s1", "dup", "Echo")
        await host.execute(ExecuteRequest(first, {"text": "one"}))
        assert (await results.result(first)).output == "one"
        again = CallKey("s1", "dup", "Fail")
        await host.execute(ExecuteRequest(again, {}))
        assert (await results.result(again)).code is ErrorCode.DUPLICATE_CALL_ID


async def test_abort_answers_with_the_phase_of_the_call(
    host_kind: str, workspace: Path
) -> None:
    """`tools.abort` says whether the host knew the call and in which phase it was."""
    async with open_host(host_kind, workspace) as (host, results):
        key = CallKey("s1", "w1", "SlowWrite")
        await host.execute(ExecuteRequest(key, {"path": "f.txt", "seconds": 0.3}))
        await results.wait(lambda e: getattr(e, "phase", None) == "running")
        ack = await host.abort(_abort(key))
        assert ack.found
        assert ack.phase == "running"
        result = await results.result(key)
        assert result.code is None  # mutating: its real result
        assert (workspace / "f.txt").exists()


async def test_kill_ends_only_a_running_call_and_says_which(
    host_kind: str, workspace: Path
) -> None:
    """`tools.kill` (a closed grace window) ends a running call's task at once; for a
    call it never saw the host says so and keeps no tombstone (a kill is no stop)."""
    async with open_host(host_kind, workspace) as (host, results):
        unknown = CallKey("s1", "k0", "SlowWrite")
        ack = await host.kill(KillRequest(unknown))
        assert (ack.found, ack.phase) == (False, "unknown")
        await host.execute(ExecuteRequest(unknown, {"path": "u.txt", "seconds": 0}))
        assert (await results.result(unknown)).code is None  # not blocked
        key = CallKey("s1", "k1", "Stubborn")
        await host.execute(ExecuteRequest(key, {}))
        await results.wait(
            lambda e: (
                getattr(e, "phase", None) == "running"
                and getattr(e, "key", None) == key
            )
        )
        ack = await host.kill(KillRequest(key))
        assert (ack.found, ack.phase) == (True, "running")
        assert (await results.result(key)).code is ErrorCode.TOOL_ABORTED


def test_stdio_host_answers_malformed_messages_and_keeps_serving(
    workspace: Path,
) -> None:
    """Bad input: malformed JSON-RPC gets a JSON-RPC error and the host keeps serving."""
    lines = [
        "this is not json",
        json.dumps([1, 2, 3]),
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools.nope", "params": {}}),
        json.dumps(
            {"jsonrpc": "2.0", "id": 2, "method": "tools.execute", "params": {"x": 1}}
        ),
        json.dumps(
            {"jsonrpc": "2.0", "id": True, "method": "tools.execute", "params": {}}
        ),
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "tools.execute",
                "params": {
                    "session_id": "s",
                    "call_id": "c",
                    "tool": "Echo",
                    "input": {"text": "still serving"},
                },
            }
        ),
    ]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tether",
            "host",
            "--stdio",
            "--no-guard",
            "--workspace",
            str(workspace),
            "--tool",
            "tether.testing._tools:Echo",
        ],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    out = [json.loads(line) for line in proc.stdout.splitlines()]
    errors = [m["error"]["code"] for m in out if "error" in m]
    assert errors == [-32700, -32600, -32601, -32602, -32600]
    by_id = {m.get("id"): m for m in out if "result" in m}
    assert by_id[3]["result"] == {"accepted": True}
    [result] = [m for m in out if m.get("method") == "tools.result"]
    assert result["params"]["output"] == "still serving"
    assert result["params"]["error"] is None


@pytest.mark.rule("S2")
async def test_abort_right_after_execute_means_the_call_never_runs(
    host_kind: str, workspace: Path, anyio_backend: str
) -> None:
    """An abort sent right behind its `tools.execute` (before the host's task for the call
    has run) blocks it: a mutating call stopped before it started writes nothing, and one
    that had started writes and succeeds. On trio, which keeps no task order, the abort
    may even arrive first ("unknown": a tombstone), and the call never runs either."""
    acks = {}
    async with open_host(host_kind, workspace) as (host, results):
        keys = [CallKey("s1", f"w{n}", "SlowWrite") for n in range(20)]
        for n, key in enumerate(keys):
            async with anyio.create_task_group() as tg:
                tg.start_soon(
                    host.execute,
                    ExecuteRequest(key, {"path": f"f{n}.txt", "seconds": 0}),
                )

                async def abort(key: CallKey = key) -> None:
                    acks[key] = await host.abort(_abort(key))

                tg.start_soon(abort)
        outcomes = {key: await results.result(key) for key in keys}
    for n, key in enumerate(keys):
        written = (workspace / f"f{n}.txt").exists()
        if acks[key].phase in ("unknown", "registered", "pending_permission", "queued"):
            assert outcomes[key].code is ErrorCode.TOOL_ABORTED
            assert not written
        else:
            assert outcomes[key].code is None
            assert written
    if host_kind == "inprocess" and anyio_backend == "asyncio":
        # In one process on asyncio (tasks start in order) the abort always lands
        # after the call registered and before its task has run.
        assert {a.phase for a in acks.values()} == {"registered"}


@pytest.mark.rule("S7")
def test_s7_tombstone_lives_exactly_its_ttl_on_the_host_clock(workspace: Path) -> None:
    """S7: on a controlled clock, a tombstone blocks its call until the TTL has passed and
    not after (no wall time involved)."""
    now = [100.0]
    core = HostCore(
        TEST_TOOLS,
        broker=Broker(workspace=workspace),
        tombstone_ttl=60.0,
        clock=lambda: now[0],
    )
    key = CallKey("s", "c1", "Echo")
    core.abort(_abort(key))
    now[0] += 59.9
    assert core.statistics().tombstones == 1
    now[0] += 0.2
    assert core.statistics().tombstones == 0
    core.abort(_abort(CallKey("s", "c2", "Echo")))
    now[0] += 10
    assert core.calls.take_tombstone(CallKey("s", "c2", "Echo"))
    assert not core.calls.take_tombstone(CallKey("s", "c2", "Echo"))


async def test_a_tool_whose_answer_was_lost_ends_end_unknown(workspace: Path) -> None:
    """`ToolFailed(end_unknown=True)`: the tool cannot know whether its operation took
    effect; the ledger says `end_unknown` (not `failed`), the caller gets the error,
    and the stdio wire carries the mark."""

    @tool(stop_class=StopClass.EXTENSION)
    async def Lost(ctx: ToolContext) -> str:
        raise ToolFailed("the stream broke before the answer", end_unknown=True)

    async with Runtime(
        workspace=workspace, tools=[Lost], permissions={"allow": ["Lost"]}
    ) as rt:
        session = rt.session()
        async with session.turn() as turn:
            result = await turn.call("Lost", {})
        (record,) = session.ledger_calls()
    assert record.state is CallState.END_UNKNOWN
    assert (result.is_error, result.code) == (True, ErrorCode.TOOL_FAILED)
    assert result.output == "the stream broke before the answer"
    event = ResultEvent(
        CallKey("s", "c", "Lost"),
        "",
        code=ErrorCode.TOOL_FAILED,
        message="lost",
        end_unknown=True,
    )
    assert event_from_wire(*event_to_wire(event)) == event
    plain = ResultEvent(CallKey("s", "c", "Lost"), "", code=ErrorCode.TOOL_FAILED)
    assert "end_unknown" not in event_to_wire(plain)[1]["error"]
