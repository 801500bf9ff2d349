"""`TetherToolset`: a real pydantic-ai Agent (its own `FunctionModel`, and once its OpenAI
model against tether's loopback stub) whose tool calls are tether calls; a cancelled run is
`Session.abort()`, and what the run's messages say of each call is what really happened.

After each cancel: no thread of the tool runs unreported, no process of the tree is alive,
and the words the model would read are true (a tether choice, spec 04 "tether's honest
stop, served to other agents", with the stop classes of spec 01).
"""

from __future__ import annotations

import sys
import threading
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest
from pydantic_ai import Agent, RunContext, capture_run_messages
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from tether import Runtime, StopClass, ToolContext, tool
from tether.config import Config
from tether.errors import UsageError
from tether.integrations.pydantic_ai import TetherToolset
from tether.runtime import CallChanged, CallState, ToolProgress
from tether.testing import TREES, alive, tree_pids, tree_procs
from tether.tools import McpTools, default_tools

if TYPE_CHECKING:
    from collections.abc import AsyncIterable, AsyncIterator, Sequence

    import psutil

    from tether.host import Tool

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

GRACE = 0.3
ABORT_BOUND = 0.2
FIXTURE = Path(__file__).parents[1] / "host" / "mcp_server_fixture.py"

_worker_ended = threading.Event()


def _poll(seconds: float) -> str:
    """Blocking work that checks the stop every 5 ms (anyio's cancel flag)."""
    _worker_ended.clear()
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            anyio.from_thread.check_cancelled()
            time.sleep(0.005)
        return "found"
    finally:
        _worker_ended.set()


@tool(stop_class=StopClass.READ_ONLY)
async def Lookup(ctx: ToolContext, seconds: float = 30.0) -> str:
    """A blocking lookup in a worker thread that honours the stop."""
    return await anyio.to_thread.run_sync(_poll, seconds)


@tool(stop_class=StopClass.READ_ONLY)
async def DeafLookup(ctx: ToolContext, seconds: float = 0.6) -> str:
    """A blocking lookup in a worker thread that never looks at the stop."""
    return await anyio.to_thread.run_sync(_deaf, seconds)


def _deaf(seconds: float) -> str:
    time.sleep(seconds)
    return "found"


@tool(stop_class=StopClass.MUTATING, subject_field="path")
async def TwoStepWrite(ctx: ToolContext, path: str, seconds: float = 0.3) -> str:
    """Write `path`.part, wait `seconds`, then move it into place as `path`."""
    part = ctx.resolve(path + ".part")
    part.write_text("step one\n", encoding="utf-8")
    ctx.progress("step one written")
    await anyio.sleep(seconds)
    part.rename(ctx.resolve(path))
    return f"wrote {path} in two steps"


def _returns(messages: Sequence[ModelMessage]) -> list[ToolReturnPart]:
    """The tool returns of `messages`, in order."""
    return [
        p
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    ]


async def _running(events: AsyncIterable[object]) -> None:
    """Wait until the runtime's events say a call runs."""
    with anyio.fail_after(10):
        async for event in events:
            if isinstance(event, CallChanged) and event.state is CallState.RUNNING:
                return


def _calls(tool_name: str, args: dict[str, Any], then: int = 0) -> FunctionModel:
    """A model that calls `tool_name` (then `then` more times), then says what it read."""

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = _returns(messages)
        if len(returns) > then:
            return ModelResponse(parts=[TextPart(str(returns[-1].content))])
        return ModelResponse(parts=[ToolCallPart(tool_name, args)])

    return FunctionModel(reply)


@asynccontextmanager
async def _runtime(workspace: Path, tools: Sequence[Tool]) -> AsyncIterator[Runtime]:
    async with Runtime(
        workspace=workspace,
        tools=tools,
        permissions={"allow": [t.name for t in tools]},
        grace=GRACE,
        abort_bound=ABORT_BOUND,
        guard=False,
    ) as runtime:
        yield runtime


async def _cancel_once(
    runtime: Runtime, agent: Agent[None, str], ready: int = 0
) -> tuple[str, float]:
    """Run `agent`, cancel the run once its call runs (and its tree printed `ready`
    pids); return the call's return as the run's messages keep it and the seconds the
    cancel took to come back."""
    output: list[str] = []
    started = anyio.Event()
    events = runtime.subscribe()

    async def watch() -> None:
        async for event in events:
            if isinstance(event, ToolProgress):
                output.append(event.text)
            elif isinstance(event, CallChanged) and event.state is CallState.RUNNING:
                running.set()
            if running.is_set() and not started.is_set():
                text = "".join(output)
                if len(tree_pids(text)) >= ready:
                    procs.extend(tree_procs(text) if ready else [])
                    started.set()

    running = anyio.Event()
    procs = _procs
    with capture_run_messages() as messages:
        async with events, anyio.create_task_group() as outer:
            outer.start_soon(watch)
            async with anyio.create_task_group() as tg:
                tg.start_soon(agent.run, "go")
                with anyio.fail_after(10):
                    await started.wait()
                cancelled_at = time.perf_counter()
                tg.cancel_scope.cancel()
            took = time.perf_counter() - cancelled_at
            outer.cancel_scope.cancel()
    returns = _returns(messages)
    assert len(returns) == 1, messages
    assert isinstance(returns[0].content, str)
    return returns[0].content, took


_procs: list[psutil.Process] = []
"""The processes of the tree of the last `_cancel_once`, found while they ran."""


async def test_a_cancelled_thread_lookup_ends_at_once_and_its_thread_with_it(
    workspace: Path,
) -> None:
    """READ_ONLY: the cancel comes back within the abort bound, the worker thread has
    ended (its work cancelled, not left running), and the model reads that the call was
    stopped while running."""
    async with _runtime(workspace, [Lookup]) as runtime:
        agent = Agent(_calls("Lookup", {}), toolsets=[TetherToolset(runtime)])
        text, took = await _cancel_once(runtime, agent)
        assert took < ABORT_BOUND + 0.5
        assert "TOOL_ABORTED: stopped while running; it was ended" in text
        assert "still running in a worker" not in text
        assert _worker_ended.is_set()


async def test_a_cancelled_lookup_whose_thread_ignores_the_stop_says_it_runs_on(
    workspace: Path,
) -> None:
    """READ_ONLY, a worker that never checks the stop: the call ends at once, and the
    model reads that its worker still runs (nothing runs unreported)."""
    async with _runtime(workspace, [DeafLookup]) as runtime:
        agent = Agent(_calls("DeafLookup", {}), toolsets=[TetherToolset(runtime)])
        text, took = await _cancel_once(runtime, agent)
        assert took < 2 * ABORT_BOUND + 0.3
        assert "TOOL_ABORTED: stopped while running; it was ended" in text
        assert text.endswith(
            "DeafLookup: 1 stopped call still running in a worker that ignores the "
            "stop."
        )


@pytest.mark.parametrize("name", ["trap-term", "setsid"])
async def test_a_cancelled_bash_tree_is_reclaimed_before_the_cancel_returns(
    workspace: Path, name: str
) -> None:
    """PROCESS: a tree that ignores SIGTERM is killed when the grace window closes, a
    `setsid` grandchild that obeys it at once; either way no process of the tree is
    alive when the cancel comes back, and the model reads that it was ended."""
    tree = next(t for t in TREES if t.name == name)
    bash = [t for t in default_tools() if t.name == "Bash"]
    _procs.clear()
    async with _runtime(workspace, bash) as runtime:
        agent = Agent(
            _calls("Bash", {"command": tree.command}),
            toolsets=[TetherToolset(runtime)],
        )
        text, took = await _cancel_once(runtime, agent, ready=tree.pids)
        assert len(_procs) == tree.pids
        assert alive(_procs) == []
        assert "TOOL_ABORTED: stopped while running; it was ended" in text
        if not tree.obeys_term:
            assert took >= GRACE


async def test_a_write_cancelled_between_its_steps_ends_and_says_so(
    workspace: Path,
) -> None:
    """MUTATING: cancelled after its first step, the write runs to its end before the
    cancel comes back, and the model reads that it did."""
    async with _runtime(workspace, [TwoStepWrite]) as runtime:
        agent = Agent(
            _calls("TwoStepWrite", {"path": "out.txt"}),
            toolsets=[TetherToolset(runtime)],
        )
        text, _ = await _cancel_once(runtime, agent)
        assert (workspace / "out.txt").exists()
        assert not (workspace / "out.txt.part").exists()
        assert text == (
            "tether: the run was cancelled while this call was on; it ran to its end "
            "anyway: wrote out.txt in two steps"
        )


async def test_after_a_stop_the_run_starts_no_write_and_none_lands_later(
    workspace: Path,
) -> None:
    """`TetherToolset.stop()` stops the call in flight; the run's next call is refused
    and said not to have run, and no write of it lands, even after everything settled
    (S10)."""
    async with _runtime(workspace, [Lookup, TwoStepWrite]) as runtime:
        toolset = TetherToolset(runtime)
        said: list[str] = []

        def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            returns = _returns(messages)
            said.extend(str(r.content) for r in returns[len(said) :])
            if not returns:
                return ModelResponse(parts=[ToolCallPart("Lookup", {})])
            if len(returns) == 1:
                return ModelResponse(
                    parts=[ToolCallPart("TwoStepWrite", {"path": "late.txt"})]
                )
            return ModelResponse(parts=[TextPart("ok")])

        agent = Agent(FunctionModel(reply), toolsets=[toolset])
        async with runtime.subscribe() as events, anyio.create_task_group() as tg:
            tg.start_soon(agent.run, "go")
            await _running(events)
            (report,) = await toolset.stop(reason="the person pressed Stop")
            assert report.settled
        await toolset.wait_settled()
    assert said[0].startswith("TOOL_ABORTED: stopped while running; it was ended")
    assert said[1].startswith("TOOL_ABORTED: stopped before it started; it did not run")
    assert "(the user stopped the turn)" in said[1]
    assert not (workspace / "late.txt").exists()
    assert not (workspace / "late.txt.part").exists()


async def test_a_cancelled_mcp_tool_that_ticks_on_is_waited_for(
    workspace: Path,
) -> None:
    """EXTENSION: an MCP server's tool (the `mcp` SDK's server) that goes on ticking
    after the cancel is waited for, not abandoned, until the bound of a close; its
    server never answers a cancelled request, so the model reads that its effect is
    unknown, and the ledger says the same."""
    config = Config(
        mcp_servers={"fx": {"command": sys.executable, "args": [str(FIXTURE)]}}
    )
    async with McpTools.open(config, startup_timeout=20, workspace=workspace) as mcp:
        assert mcp.problems == []
        async with _runtime(workspace, mcp.tools) as runtime:
            agent = Agent(
                _calls("mcp__fx__deaf", {}), toolsets=[TetherToolset(runtime)]
            )
            text, took = await _cancel_once(runtime, agent)
            assert took >= GRACE + 2 * ABORT_BOUND
            assert text.endswith("the server never answered; its effect is unknown")
            [record] = runtime.ledger.every_call()
            assert (record.state, record.settled) == (CallState.END_UNKNOWN, True)


async def test_the_toolset_needs_its_runtime_entered_first(workspace: Path) -> None:
    """A runtime entered inside the run would be cancelled with it: refused, with the
    line that says what to do."""
    runtime = Runtime(workspace=workspace, tools=[Lookup], guard=False)
    agent = Agent(_calls("Lookup", {}), toolsets=[TetherToolset(runtime)])
    with pytest.raises(UsageError, match="async with runtime:"):
        await agent.run("go")


async def test_a_finished_call_and_a_failed_one_reach_the_model(
    workspace: Path,
) -> None:
    """Without a stop the call's output is the tool's return; a refused input is a
    failure the model reads with its code."""
    async with _runtime(workspace, [Lookup]) as runtime:
        agent = Agent(
            _calls("Lookup", {"seconds": 0.01}), toolsets=[TetherToolset(runtime)]
        )
        assert (await agent.run("go")).output == "found"
        agent = Agent(
            _calls("Lookup", {"seconds": "soon"}), toolsets=[TetherToolset(runtime)]
        )
        output = (await agent.run("go")).output
        assert output.startswith("INVALID_INPUT: invalid input at seconds")


async def test_a_hosted_model_resumed_after_a_cancel_reads_what_really_happened(
    workspace: Path,
) -> None:
    """Through pydantic-ai's OpenAI model and tether's loopback stub server: the run
    is cancelled while its lookup runs, and the run resumed from the cancelled run's
    messages sends the model the call's true end."""
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from tether.testing import ModelServer, text_reply, tool_call_reply

    async def streamed(ctx: RunContext[object], events: AsyncIterable[Any]) -> None:
        async for _ in events:
            pass  # an event handler makes pydantic-ai stream, as the stub speaks

    replies = [tool_call_reply([("call_1", "Lookup", {})]), text_reply("understood")]
    async with (
        ModelServer.open(replies) as server,
        _runtime(workspace, [Lookup]) as runtime,
    ):
        model = OpenAIChatModel(
            "stub", provider=OpenAIProvider(base_url=server.url, api_key="none")
        )
        agent = Agent(model, toolsets=[TetherToolset(runtime)])
        async with agent:  # closes the model's HTTP client
            with capture_run_messages() as messages:
                async with (
                    runtime.subscribe() as events,
                    anyio.create_task_group() as tg,
                ):
                    tg.start_soon(
                        lambda: agent.run("go", event_stream_handler=streamed)
                    )
                    await _running(events)
                    tg.cancel_scope.cancel()
            resumed = await agent.run(
                message_history=list(messages), event_stream_handler=streamed
            )
    assert resumed.output == "understood"
    told = [m for m in server.requests[-1]["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in told] == ["call_1"]
    assert "TOOL_ABORTED: stopped while running; it was ended" in told[0]["content"]


async def test_run_cancel_keeps_the_true_end_in_run_cancelled(workspace: Path) -> None:
    """pydantic-ai's own cancel (`AgentRun.cancel()`): the run ends `RunCancelled`,
    whose messages hold the write's true end, and the write has landed."""
    from pydantic_ai.exceptions import RunCancelled

    async with _runtime(workspace, [TwoStepWrite]) as runtime:
        agent = Agent(
            _calls("TwoStepWrite", {"path": "out.txt"}),
            toolsets=[TetherToolset(runtime)],
        )

        async def cancelled_run() -> None:
            async with (
                runtime.subscribe() as events,
                agent.iter("go") as run,
                anyio.create_task_group() as tg,
            ):

                async def cancel_once_running() -> None:
                    await _running(events)
                    run.cancel()

                tg.start_soon(cancel_once_running)
                async for _ in run:
                    pass

        with pytest.raises(RunCancelled) as cancelled:
            await cancelled_run()
    [told] = _returns(cancelled.value.all_messages())
    assert told.content == (
        "tether: the run was cancelled while this call was on; it ran to its end "
        "anyway: wrote out.txt in two steps"
    )
    assert (workspace / "out.txt").exists()
