"""A cancelled agent run of a framework, with tether's toolset and with the framework alone.

Run: .venv/bin/python benchmarks/integrations_cancel_pydantic_ai.py --trials 20

A real pydantic-ai `Agent` with its own `FunctionModel` asks for one tool call; once the
call runs, the task running `agent.run()` is cancelled. Five scenarios, each with the same
tool body under `TetherToolset` (tether) and as a plain pydantic-ai tool (plain):

- thread:   a blocking lookup in a worker thread that checks anyio's cancel flag
- trap-term: Bash whose tree ignores SIGTERM (tether.testing TREES `trap-term`)
- setsid:   Bash whose grandchild left the session (TREES `setsid`)
- write:    a write in two steps (a `.part` file, 0.3 s, then the rename), cancelled
            between them
- mcp:      an MCP server's tool (the `mcp` SDK's) that ignores the cancel and ticks on

Printed per scenario and side: the cancel's return time (from `cancel()` to the task's
end) p50/p99, and the false reports. A report is what the run's messages say of the
call (plain pydantic-ai keeps no return for a cancelled call; a resumed run gets its
"interrupted before a result was produced"). It is false when, at the moment the cancel
returned, it said the call ended and a thread of it still ran, a process of its tree was
alive, its server's handler still ran, or a step of a write had landed; or said the write
ran to its end and it had not; or when a write it said did not happen lands later.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import threading
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
import psutil
from pydantic_ai import Agent, capture_run_messages
from pydantic_ai.messages import (
    INTERRUPTED_TOOL_RETURN_CONTENT,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

sys.path.insert(0, str(Path(__file__).parent))
from _common import machine, percentile

from tether import Runtime, StopClass, ToolContext, tool
from tether.config import Config
from tether.integrations.pydantic_ai import TetherToolset
from tether.runtime import CallChanged, CallState, ToolProgress
from tether.testing import TREES, alive, tree_pids, tree_procs
from tether.tools import McpTools, default_tools

GRACE = 0.3
ABORT_BOUND = 0.2
FIXTURE = Path(__file__).parents[1] / "tests" / "host" / "mcp_server_fixture.py"
SCENARIOS = ("thread", "trap-term", "setsid", "write", "mcp")

worker_ended = threading.Event()
progress: list[str] = []
"""What the plain Bash body printed (tether's is its calls' progress)."""
started = anyio.Event()


def poll(seconds: float) -> str:
    ended = worker_ended  # this trial's: a thread of an earlier trial may still run
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            with contextlib.suppress(RuntimeError):  # not an anyio worker thread
                anyio.from_thread.check_cancelled()
            time.sleep(0.005)
        return "found"
    finally:
        ended.set()


async def lookup_body(seconds: float = 3.0) -> str:
    started.set()
    return await anyio.to_thread.run_sync(poll, seconds)


async def write_body(root: Path, path: str) -> str:
    part = root / (path + ".part")
    part.write_text("step one\n", encoding="utf-8")
    started.set()
    await anyio.sleep(0.3)
    part.rename(root / path)
    return f"wrote {path} in two steps"


async def bash_body(command: str) -> str:
    """The plain Bash: asyncio's subprocess, its output read line by line."""
    out: list[str] = []
    proc = await asyncio.create_subprocess_exec(
        "bash", "-c", command, stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    async for line in proc.stdout:
        out.append(line.decode())
        progress.append(line.decode())
    await proc.wait()
    return "".join(out)


@tool(stop_class=StopClass.READ_ONLY)
async def Lookup(ctx: ToolContext, seconds: float = 3.0) -> str:
    """A blocking lookup in a worker thread."""
    return await lookup_body(seconds)


@tool(stop_class=StopClass.MUTATING, subject_field="path")
async def TwoStepWrite(ctx: ToolContext, path: str) -> str:
    """Write `path` in two steps."""
    return await write_body(ctx.workspace, path)


def model(tool_name: str, args: dict[str, Any]) -> FunctionModel:
    """A model that calls `tool_name` with `args` (as they are at the request), then
    ends."""

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if any(
            isinstance(p, ToolReturnPart)
            for m in messages
            if isinstance(m, ModelRequest)
            for p in m.parts
        ):
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart(tool_name, args)])

    return FunctionModel(reply)


def server_procs() -> list[psutil.Process]:
    out = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if str(FIXTURE) in " ".join(proc.cmdline()):
                out.append(proc)
        except psutil.Error:
            continue
    return out


class Side:
    """One side of a scenario: its agent and how it learns the call runs."""

    def __init__(self, scenario: str, tether: bool, root: Path) -> None:
        self.scenario = scenario
        self.tether = tether
        self.root = root
        self.runtime: Runtime | None = None
        self.args: dict[str, Any] = {}
        """The call's arguments, changed in place between trials."""
        self.said_not_written: list[str] = []
        self.agent: Agent[None, str]

    async def open(self, stack: AsyncExitStack) -> None:
        scenario, root = self.scenario, self.root
        tree = next((t for t in TREES if t.name == scenario), None)
        args = self.args
        if tree is not None:
            name = "Bash" if self.tether else "bash"
            args["command"] = tree.command
        elif scenario == "thread":
            name = "Lookup" if self.tether else "lookup"
        elif scenario == "write":
            name = "TwoStepWrite" if self.tether else "two_step_write"
            args["path"] = "out.txt"
        else:
            name = "mcp__fx__deaf" if self.tether else "deaf"
        self.tool = name
        if self.tether:
            tools: list[Any]
            if tree is not None:
                tools = [t for t in default_tools() if t.name == "Bash"]
            elif scenario == "mcp":
                config = Config(
                    mcp_servers={
                        "fx": {"command": sys.executable, "args": [str(FIXTURE)]}
                    }
                )
                mcp = await stack.enter_async_context(
                    McpTools.open(config, startup_timeout=30, workspace=root)
                )
                tools = list(mcp.tools)
            else:
                tools = [Lookup if scenario == "thread" else TwoStepWrite]
            self.runtime = await stack.enter_async_context(
                Runtime(
                    workspace=root,
                    tools=tools,
                    permissions={"allow": [t.name for t in tools]},
                    grace=GRACE,
                    abort_bound=ABORT_BOUND,
                    guard=False,
                )
            )
            toolset = TetherToolset(self.runtime)
            self.agent = Agent(model(name, args), toolsets=[toolset])
            return
        plain: Any
        if tree is not None:

            async def bash(command: str) -> str:
                return await bash_body(command)

            plain = bash
        elif scenario == "thread":

            def lookup(seconds: float = 3.0) -> str:  # pydantic-ai runs it in a thread
                started_from_thread()
                return poll(seconds)

            plain = lookup
        elif scenario == "write":

            async def two_step_write(path: str) -> str:
                return await write_body(root, path)

            plain = two_step_write
        else:
            from mcp import ClientSession, StdioServerParameters, stdio_client

            params = StdioServerParameters(command=sys.executable, args=[str(FIXTURE)])
            read, write = await stack.enter_async_context(stdio_client(params))
            client = await stack.enter_async_context(ClientSession(read, write))
            await client.initialize()

            async def deaf() -> str:
                started.set()
                result = await client.call_tool("deaf", {})
                return str(result.content)

            plain = deaf
        self.agent = Agent(model(name, args), tools=[plain])


_loop_token: Any = None


def started_from_thread() -> None:
    anyio.from_thread.run_sync(started.set, token=_loop_token)


async def trial(side: Side, n: int) -> tuple[float, bool]:
    """One cancelled run: the cancel's return time and whether the report was false."""
    global started, worker_ended
    started = anyio.Event()
    worker_ended = threading.Event()
    progress.clear()
    procs: list[psutil.Process] = []
    path = f"out{n}.txt"
    if side.scenario == "write":
        side.args["path"] = path
    tree = next((t for t in TREES if t.name == side.scenario), None)
    output: list[str] = []

    async def watch_tether(events: Any) -> None:
        running = False
        async for event in events:
            if isinstance(event, ToolProgress):
                output.append(event.text)
            elif isinstance(event, CallChanged) and event.state is CallState.RUNNING:
                running = True
            if running and not started.is_set():
                text = "".join(output)
                if tree is None or len(tree_pids(text)) >= tree.pids:
                    if tree is not None:
                        procs.extend(tree_procs(text))
                    started.set()

    async def watch_plain() -> None:
        while tree is not None and not started.is_set():
            text = "".join(progress)
            if len(tree_pids(text)) >= tree.pids:
                procs.extend(tree_procs(text))
                started.set()
            await anyio.sleep(0.002)

    servers_before = server_procs() if side.scenario == "mcp" else []
    with capture_run_messages() as messages:
        async with AsyncExitStack() as stack, anyio.create_task_group() as outer:
            if side.runtime is not None:
                events = stack.enter_context(side.runtime.subscribe())
                outer.start_soon(watch_tether, events)
            else:
                outer.start_soon(watch_plain)
            async with anyio.create_task_group() as tg:
                tg.start_soon(side.agent.run, "go")
                with anyio.fail_after(30):
                    await started.wait()
                if side.scenario == "write":
                    await anyio.sleep(0.05)  # between the write's two steps
                at = time.perf_counter()
                tg.cancel_scope.cancel()
            took = time.perf_counter() - at
            outer.cancel_scope.cancel()
    returns = [
        str(p.content)
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    ]
    said = returns[0] if returns else INTERRUPTED_TOOL_RETURN_CONTENT
    still = "still running" in said or "effect is unknown" in said
    false = False
    if side.scenario == "thread":
        false = not worker_ended.is_set() and not still
    elif tree is not None:
        left = alive(procs)
        false = bool(left) and not still
        for proc in procs:  # what the plain cancel left running, ended by the bench
            with contextlib.suppress(psutil.Error):
                if proc.pid in left:
                    proc.kill()
    elif side.scenario == "write":
        done = "ran to its end" in said
        landed = (side.root / path).exists()
        part = (side.root / (path + ".part")).exists()
        false = done != landed or (not done and part)
        if not done:
            side.said_not_written.append(path)
    else:
        handler_runs = any(p.is_running() for p in servers_before) and not side.tether
        false = handler_runs and not still
    return took, false


async def main(framework: str, trials: int) -> None:
    global _loop_token
    assert framework == "pydantic-ai", "only pydantic-ai is measured here"
    _loop_token = anyio.lowlevel.current_token()
    print(machine())
    print(f"load average: {os.getloadavg()}")
    print(f"grace {GRACE} s, abort bound {ABORT_BOUND} s, {trials} trials each")
    for scenario in SCENARIOS:
        for tether in (True, False):
            root = Path(tempfile.mkdtemp(prefix="integrations-cancel-"))
            side = Side(scenario, tether, root)
            times: list[float] = []
            falses = 0
            async with AsyncExitStack() as stack:
                await side.open(stack)
                for n in range(trials):
                    took, false = await trial(side, n)
                    times.append(took)
                    falses += false
                if scenario == "write":
                    await anyio.sleep(0.5)  # a cut write cannot land later; look
                    late = [p for p in side.said_not_written if (root / p).exists()]
                    falses += len(late)
            who = "tether" if tether else "plain "
            print(
                f"{scenario:<9} {who} cancel returns p50={percentile(times, 50) * 1e3:8.1f} ms"
                f" p99={percentile(times, 99) * 1e3:8.1f} ms   false reports {falses}/{trials}"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--framework", default="pydantic-ai", choices=["pydantic-ai"])
    parser.add_argument("--trials", type=int, default=20)
    ns = parser.parse_args()
    anyio.run(main, ns.framework, ns.trials)
