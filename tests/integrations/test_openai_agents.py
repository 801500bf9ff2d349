"""tether's honest stop inside the OpenAI Agents SDK: a real `agents.Agent` run against a
local OpenAI-compatible stub server, cancelled while its tools work.

Each scenario cancels the SDK's way (`RunResultStreaming.cancel()`, or cancelling the
task running `Runner.run`), then checks what the spec promises of `Session.abort()`
(spec 01): no worker thread still running unreported, no process of the tree alive once
settled, a started write run to its end, and reports and the model's next input that
say what really happened.
"""

from __future__ import annotations

import sys
import threading
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.from_thread
import anyio.to_thread
import psutil
import pytest
from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    Runner,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

from tether import Runtime, StopClass, ToolContext, tool
from tether.config import Config
from tether.errors import ErrorCode, UsageError
from tether.host.tools import default_tools
from tether.integrations.openai_agents import TetherTools
from tether.runtime import CallState, PendingPhase, ToolProgress
from tether.testing import (
    TREES,
    ModelServer,
    Reply,
    alive,
    text_reply,
    tool_call_reply,
    tree_pids,
    tree_procs,
)
from tether.tools import McpTools

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

    from agents import RunResultStreaming

    from tether.host import Tool
    from tether.runtime import AbortReport

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60), pytest.mark.slow]

set_tracing_disabled(True)

GRACE = 0.3
ABORT_BOUND = 0.5
TICKER = Path(__file__).with_name("ticker_mcp_server.py")


class Setup:
    """A stub model server, a runtime, its tools for the SDK, and the SDK's model."""

    def __init__(
        self,
        server: ModelServer,
        runtime: Runtime,
        tools: TetherTools,
        client: AsyncOpenAI,
    ) -> None:
        self.server = server
        self.runtime = runtime
        self.tools = tools
        self.model = OpenAIChatCompletionsModel(model="stub", openai_client=client)
        self.output = ""
        """Every progress text of the runtime's calls, in order."""
        self._changed = anyio.Event()

    def agent(self, **kwargs: Any) -> Agent[Any]:
        return Agent(name="helper", model=self.model, **kwargs)

    async def watch(self) -> None:
        with self.runtime.subscribe() as events:
            async for event in events:
                if isinstance(event, ToolProgress):
                    self.output += event.text
                    self._changed.set()
                    self._changed = anyio.Event()

    async def wait_output(self, text: str) -> None:
        with anyio.fail_after(10):
            while text not in self.output:
                await self._changed.wait()

    async def cancel_streamed(
        self, agent: Agent[Any], when: Callable[[], Awaitable[object]]
    ) -> AbortReport:
        """Run `agent` streamed, `result.cancel()` once `when()` returns; the report."""
        result = Runner.run_streamed(agent, "go")
        async with anyio.create_task_group() as tg:
            tg.start_soon(consume, result)
            with anyio.fail_after(10):
                await when()
            result.cancel()
        with anyio.fail_after(ABORT_BOUND * 4):
            (report,) = await self.tools.wait_aborted()
        return report

    async def wait_pids(self, count: int) -> None:
        """Wait until a tree has announced `count` processes in the output."""
        with anyio.fail_after(10):
            while len(tree_pids(self.output)) < count:
                await self._changed.wait()


@asynccontextmanager
async def setup(
    workspace: Path,
    tools: Sequence[Tool],
    replies: Sequence[Reply],
    allow: Sequence[str] = (),
    **options: Any,
) -> AsyncIterator[Setup]:
    async with (
        ModelServer.open(replies) as server,
        AsyncOpenAI(base_url=server.url, api_key="stub", max_retries=0) as client,
        Runtime(
            workspace=workspace,
            tools=tools,
            permissions={"allow": list(allow)},
            grace=GRACE,
            abort_bound=ABORT_BOUND,
            guard=False,
            **options,
        ) as runtime,
        TetherTools(runtime) as adapter,
        anyio.create_task_group() as tg,
    ):
        made = Setup(server, runtime, adapter, client)
        tg.start_soon(made.watch)
        yield made
        tg.cancel_scope.cancel()


async def consume(result: RunResultStreaming) -> None:
    async for _ in result.stream_events():
        pass


def only_record(made: Setup) -> Any:
    records = made.runtime.ledger.every_call()
    assert len(records) == 1, records
    return records[0]


async def test_function_tools_run_as_tether_calls(workspace: Path) -> None:
    """A tether tool given to an `agents.Agent` runs as a tether call; its output is
    the tool result the model reads (a tether choice: the adapter adds no wording)."""
    (workspace / "notes.txt").write_text("hello\n", encoding="utf-8")
    replies = [
        tool_call_reply([("call_1", "Read", {"file_path": "notes.txt"})]),
        text_reply("read it"),
    ]
    async with setup(workspace, default_tools(), replies) as made:
        agent = made.agent(tools=made.tools.function_tools("Read"))
        result = await Runner.run(agent, "read the notes")
        assert result.final_output == "read it"
        assert only_record(made).state is CallState.SUCCEEDED
        sent = made.server.requests[-1]["messages"]
        told = [m for m in sent if m["role"] == "tool"]
        assert len(told) == 1
        assert "hello" in told[0]["content"]
        names = {t.name for t in made.tools.function_tools()}
        assert {"Bash", "Read", "Write", "Edit", "Glob", "Grep"} <= names
        with pytest.raises(UsageError, match="no tool named Nope"):
            made.tools.function_tools("Nope")
        with pytest.raises(UsageError, match="no MCP server 'ticker'"):
            made.tools.mcp_server("ticker")


async def test_a_cancel_ends_a_read_only_thread_for_real(workspace: Path) -> None:
    """A READ_ONLY tool blocked in a worker thread: the SDK's cancel ends the call at
    once, the report says whether the worker still runs, and the worker ends (spec 01
    READ_ONLY, S14: cancelled for real, not only abandoned)."""
    began = anyio.Event()
    ended = threading.Event()
    blocker = threading.Event()  # never set: the worker is blocked on it

    @tool(stop_class=StopClass.READ_ONLY)
    async def Lookup(ctx: ToolContext, key: str) -> str:
        """Look a key up, slowly."""

        def work() -> str:
            anyio.from_thread.run_sync(began.set)
            try:
                while not blocker.wait(0.005):
                    anyio.from_thread.check_cancelled()
                return "found"  # pragma: no cover - the blocker is never set
            finally:
                ended.set()

        return await anyio.to_thread.run_sync(work)

    replies = [tool_call_reply([("call_1", "Lookup", {"key": "k"})])]
    async with setup(workspace, [Lookup], replies) as made:
        agent = made.agent(tools=made.tools.function_tools())
        report = await made.cancel_streamed(agent, began.wait)
        assert report.settled
        assert report.source == "user"
        assert report.reason == "the agent run was cancelled"
        # No thread still running unreported: ended, or named as still running.
        assert ended.is_set() or any("Lookup: 1" in line for line in report.outliving)
        with anyio.fail_after(1):
            await anyio.to_thread.run_sync(ended.wait)
        record = only_record(made)
        assert record.state is CallState.ABORTED
        assert record.code is ErrorCode.TOOL_ABORTED
        (call, answer) = await made.tools.results_after_cancel()
        assert call["call_id"] == answer["call_id"] == "call_1"  # type: ignore[typeddict-item]
        assert "TOOL_ABORTED: stopped while running" in str(answer["output"])  # type: ignore[typeddict-item]
        # Once its worker has returned, nothing names the call as still running.
        with anyio.fail_after(1):
            while any("Lookup" in p for p in made.runtime.problems):  # noqa: ASYNC110
                await anyio.sleep(0.005)  # the worker's return reaches the loop


@pytest.mark.parametrize(
    "tree",
    [t for t in TREES if t.name in ("trap-term", "setsid")],
    ids=lambda t: t.name,
)
async def test_a_cancel_reclaims_a_bash_tree(workspace: Path, tree: Any) -> None:
    """Bash whose tree ignores SIGTERM, or hides a `setsid` grandchild: the SDK's cancel
    gives it the grace window, then the whole tree is gone before the call settles
    (spec 01 PROCESS, S13)."""
    replies = [tool_call_reply([("call_1", "Bash", {"command": tree.command})])]
    async with setup(workspace, default_tools(), replies, allow=["Bash"]) as made:
        agent = made.agent(tools=made.tools.function_tools("Bash"))
        procs: list[psutil.Process] = []

        async def tree_up() -> None:
            await made.wait_pids(tree.pids)
            procs.extend(tree_procs(made.output))  # while they live

        report = await made.cancel_streamed(agent, tree_up)
        if not tree.obeys_term:
            assert not report.settled
            (pending,) = report.pending
            assert pending.phase is PendingPhase.TERMINATING
        with anyio.fail_after(GRACE + 5):
            await made.tools.wait_settled()
        assert alive(procs) == []
        record = only_record(made)
        assert record.settled
        assert record.state is CallState.ABORTED
        (_, answer) = await made.tools.results_after_cancel()
        assert "TOOL_ABORTED: stopped while running" in str(answer["output"])  # type: ignore[typeddict-item]


def two_step(gate: anyio.Event) -> Tool:
    @tool(stop_class=StopClass.MUTATING, subject_field="path")
    async def TwoStep(ctx: ToolContext, path: str) -> str:
        """Write a file in two steps."""
        target = ctx.resolve(path)
        target.write_text("step 1\n", encoding="utf-8")
        ctx.progress("step 1 written")
        await gate.wait()
        target.write_text("step 1\nstep 2\n", encoding="utf-8")
        return f"wrote both steps to {path}"

    return TwoStep


async def test_a_write_cancelled_between_its_steps_runs_to_its_end(
    workspace: Path,
) -> None:
    """Cancelling the task running `Runner.run` between a write's two steps: the write
    completes, the report said it would, and the model's next input says it did (spec
    01 MUTATING: never abandoned)."""
    gate = anyio.Event()
    replies = [
        tool_call_reply([("call_1", "TwoStep", {"path": "out.txt"})]),
        text_reply("noted"),
    ]
    async with setup(workspace, [two_step(gate)], replies, allow=["TwoStep"]) as made:
        agent = made.agent(tools=made.tools.function_tools())
        async with anyio.create_task_group() as tg:
            tg.start_soon(Runner.run, agent, "write it")
            await made.wait_output("step 1 written")
            tg.cancel_scope.cancel()
        (report,) = await made.tools.wait_aborted()
        assert not report.settled
        assert [p.why for p in report.pending] == [
            "mutating: started, waiting for result"
        ]
        target = workspace / "out.txt"
        assert target.read_text(encoding="utf-8") == "step 1\n"
        gate.set()
        with anyio.fail_after(5):
            await made.tools.wait_settled()
        assert target.read_text(encoding="utf-8") == "step 1\nstep 2\n"
        assert only_record(made).state is CallState.SUCCEEDED
        items = await made.tools.results_after_cancel()
        said = str(items[1]["output"])  # type: ignore[typeddict-item]
        assert "ran to its end anyway: wrote both steps to out.txt" in said
        # The next run tells the model the truth, as a tool result of its call.
        again = await Runner.run(agent, [*items, {"role": "user", "content": "so?"}])
        assert again.final_output == "noted"
        told = [m for m in made.server.requests[-1]["messages"] if m["role"] == "tool"]
        assert [m["content"] for m in told] == [said]
        assert await made.tools.results_after_cancel() == []  # told once


async def test_a_write_cancelled_before_it_started_never_lands(workspace: Path) -> None:
    """A write cancelled while its permission is asked: the report says it did not
    run, and nothing lands afterwards (spec 01: "never starts")."""
    asked = anyio.Event()

    async def approver(request: object) -> bool:
        asked.set()
        await anyio.sleep_forever()
        return True  # pragma: no cover

    replies = [tool_call_reply([("call_1", "TwoStep", {"path": "out.txt"})])]
    gate = anyio.Event()
    gate.set()
    async with setup(workspace, [two_step(gate)], replies, approver=approver) as made:
        agent = made.agent(tools=made.tools.function_tools())
        report = await made.cancel_streamed(agent, asked.wait)
        assert report.settled
        assert report.pending == ()
        await made.tools.wait_settled()
        record = only_record(made)
        assert record.state is CallState.ABORTED
        assert record.started_at is None
        (_, answer) = await made.tools.results_after_cancel()
        assert "stopped before it started; it did not run" in str(answer["output"])  # type: ignore[typeddict-item]
        await anyio.wait_all_tasks_blocked()
        assert not (workspace / "out.txt").exists()


async def test_an_mcp_call_that_ticks_on_is_waited_for(workspace: Path) -> None:
    """An MCP server's tool (EXTENSION) that ticks on after the cancel: the call is
    waited for, not abandoned; the second stop ends the wait and the server's tree
    (spec 01 EXTENSION; `Session.abort(kill=True)`)."""
    config = Config(
        mcp_servers={"ticker": {"command": sys.executable, "args": [str(TICKER)]}}
    )
    replies = [tool_call_reply([("call_1", "tick", {"times": 500})])]
    async with McpTools.open(config, workspace=workspace, startup_timeout=20) as mcp:
        assert mcp.problems == []
        async with setup(
            workspace, mcp.tools, replies, allow=["mcp__ticker__*"]
        ) as made:
            server = made.tools.mcp_server("ticker")
            listed = await server.list_tools()
            assert [t.name for t in listed] == ["tick"]
            agent = made.agent(mcp_servers=[server])
            report = await made.cancel_streamed(
                agent, lambda: made.wait_output("tick 2")
            )
            assert [p.why for p in report.pending] == [
                "extension: started, waiting for result"
            ]
            ticks = made.output.count("tick ")
            await made.wait_output(f"tick {ticks + 3}")  # it ticks on, still heard
            assert not only_record(made).settled
            servers = [
                p
                for p in psutil.Process().children(recursive=True)
                if str(TICKER) in " ".join(p.cmdline())
            ]
            assert servers
            await made.tools.abort(kill=True)
            with anyio.fail_after(5):
                await made.tools.wait_settled()
            assert alive(servers) == []  # the server's tree went with the wait
            record = only_record(made)
            assert record.settled
            assert record.state is CallState.END_UNKNOWN
            (_, answer) = await made.tools.results_after_cancel()
            assert "unknown" in str(answer["output"])  # type: ignore[typeddict-item]


async def test_the_tools_outside_their_block_say_how_to_enter_them(
    workspace: Path,
) -> None:
    """Used before the runtime or outside their block, the tools refuse with the line
    that says what to do."""
    runtime = Runtime(workspace=workspace, tools=[], guard=False)
    with pytest.raises(UsageError, match="enter the Runtime first"):
        await TetherTools(runtime).__aenter__()
    async with runtime:
        with pytest.raises(UsageError, match=r"inside `async with TetherTools"):
            await TetherTools(runtime).wait_aborted()


async def test_tethers_own_stop_lets_the_run_go_on_with_the_truth(
    workspace: Path,
) -> None:
    """`tools.abort()` without the SDK's cancel: the Bash call ends by the stop, and the
    run goes on with a tool result that says so (spec 04: results of stopped calls go
    back to the model as errors with their code)."""
    replies = [
        tool_call_reply([("call_1", "Bash", {"command": "echo up; sleep 30"})]),
        text_reply("stopped, then"),
    ]
    async with setup(workspace, default_tools(), replies, allow=["Bash"]) as made:
        agent = made.agent(tools=made.tools.function_tools("Bash"))
        async with anyio.create_task_group() as tg:
            tg.start_soon(Runner.run, agent, "go")
            await made.wait_output("up")
            (report,) = await made.tools.abort()
        assert report.source == "user"
        told = [m for m in made.server.requests[-1]["messages"] if m["role"] == "tool"]
        assert len(told) == 1
        assert told[0]["content"].startswith("TOOL_ABORTED: stopped while running")
        assert "up" in told[0]["content"]
        assert await made.tools.results_after_cancel() == []  # no cancel: nothing owed
