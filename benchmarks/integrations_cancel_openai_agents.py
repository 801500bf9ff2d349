"""The OpenAI Agents SDK's cancel with tether's tools, beside the SDK's own plain cancel.

Run: .venv/bin/python benchmarks/integrations_cancel_openai_agents.py --trials 20

A real `agents.Agent` against the local stub model server (`tether.testing.ModelServer`),
streamed, cancelled with `RunResultStreaming.cancel()` once its one tool call is at work.
Five scenarios, each run `--trials` times two ways on the same tool bodies:

- tether: the body is a tether tool handed to the agent by `TetherTools` (Bash is
  tether's Bash; the MCP server is the runtime's, through `TetherTools.mcp_server`);
- plain: the body is the SDK's own `function_tool` (Bash as an asyncio subprocess; the
  MCP server through the SDK's `MCPServerStdio`).

A false report is a cancel after which the caller was told the run was over while the
truth differed and nothing said so:

- read-only thread: the worker thread still runs and no report names it, or (tether)
  it has not ended 100 ms after the report;
- Bash ignoring SIGTERM, and Bash with a `setsid` grandchild: a process of the tree is
  alive once the call is said to have settled (plain: 0.5 s past the grace window);
- two-step write cancelled between its steps: the file is left half written, or a
  report says the write did not run to its end when it did;
- an MCP tool that ticks on: it keeps ticking while nothing says it runs, or (tether)
  after the second stop said it ended.

The cancel's return time runs from `cancel()` to the caller holding the outcome: the
stream ended, and for tether also `wait_aborted()` returned with the reports.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import psutil
from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from agents.mcp import MCPServerStdio
from openai import AsyncOpenAI

from tether import Runtime, StopClass, ToolContext, tool
from tether.config import Config
from tether.host.tools import default_tools
from tether.integrations.openai_agents import TetherTools
from tether.runtime import ToolProgress
from tether.testing import (
    TREES,
    ModelServer,
    alive,
    tool_call_reply,
    tree_pids,
    tree_procs,
)
from tether.tools import McpTools

sys.path.insert(0, str(Path(__file__).parent))
import contextlib

from _common import machine, percentile

GRACE = 0.3
ABORT_BOUND = 0.5
ROOT = Path(__file__).resolve().parents[1]
TICKER = ROOT / "tests" / "integrations" / "ticker_mcp_server.py"
LOOKUP_LIMIT = 1.0
"""Seconds the read-only body works before it answers (the plain thread ends then)."""


def lookup_body(check: Any) -> str:
    """The read-only body: blocked in a thread, calling `check` between waits."""
    STATE.ended.clear()
    STATE.running.set()
    try:
        blocker = threading.Event()  # never set: the thread is blocked on it
        end = time.monotonic() + LOOKUP_LIMIT
        while not blocker.wait(0.005) and time.monotonic() < end:
            check()
        return "found"
    finally:
        STATE.running.clear()
        STATE.ended.set()


async def two_step_body(path: str) -> str:
    """The write body: step 1, a wait the harness ends, step 2."""
    target = STATE.folder / path
    target.write_text("step 1\n", encoding="utf-8")
    STATE.written = True
    await STATE.gate.wait()
    target.write_text("step 1\nstep 2\n", encoding="utf-8")
    return f"wrote both steps to {path}"


class State:
    """What the tool bodies share with the harness."""

    def __init__(self) -> None:
        self.running = threading.Event()
        self.ended = threading.Event()
        self.folder = Path()
        self.gate: anyio.Event | None = None
        self.written = False
        self.seen: list[str] = []


STATE: Any = State()


@tool(stop_class=StopClass.READ_ONLY)
async def Lookup(ctx: ToolContext, key: str) -> str:
    """Look a key up."""
    return await anyio.to_thread.run_sync(
        lookup_body, anyio.from_thread.check_cancelled
    )


@tool(stop_class=StopClass.MUTATING)
async def TwoStep(ctx: ToolContext, path: str) -> str:
    """Write a file in two steps."""
    return await two_step_body(path)


def plain_lookup(key: str) -> str:
    """Look a key up."""
    return lookup_body(lambda: None)  # the SDK gives a thread no cancel to check


async def plain_two_step(path: str) -> str:
    """Write a file in two steps."""
    return await two_step_body(path)


async def plain_bash(command: str) -> str:
    """Run a shell command (as one writes it for the SDK: an asyncio subprocess)."""
    proc = await asyncio.create_subprocess_shell(
        command,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    assert proc.stdout is not None
    while line := await proc.stdout.readline():
        STATE.seen.append(line.decode())
    return "".join(STATE.seen)


PLAIN = {
    "Lookup": function_tool(plain_lookup, name_override="Lookup"),
    "TwoStep": function_tool(plain_two_step, name_override="TwoStep"),
    "Bash": function_tool(plain_bash, name_override="Bash"),
}


class Outcome:
    def __init__(self) -> None:
        self.times: list[float] = []
        self.false = 0


class Harness:
    """One model server, one runtime and its tools, one SDK model; one arm."""

    def __init__(
        self, server: ModelServer, tools: TetherTools, model: Any, tether: bool
    ) -> None:
        self.server = server
        self.tools = tools
        self.model = model
        self.tether = tether
        self.output = ""

    def agent(self, name: str) -> Agent[Any]:
        tool = self.tools.function_tools(name)[0] if self.tether else PLAIN[name]
        return Agent(name="a", model=self.model, tools=[tool])

    async def watch(self, runtime: Runtime) -> None:
        with runtime.subscribe() as events:
            async for event in events:
                if isinstance(event, ToolProgress):
                    self.output += event.text

    async def cancel(
        self, agent: Agent[Any], call: tuple[str, dict[str, Any]], ready: Any
    ) -> tuple[float, Any]:
        """Run `agent` on one tool call, cancel once `ready()` is true.

        Returns the cancel's return time and tether's reports (() for plain).
        """
        self.server.add(tool_call_reply([("call_1", call[0], call[1])]))
        result = Runner.run_streamed(agent, "go")
        done = anyio.Event()

        async def consume() -> None:
            async for _ in result.stream_events():
                pass
            done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(consume)
            with anyio.fail_after(20):
                while not ready():  # noqa: ASYNC110 (the plain arm's state has no event)
                    await anyio.sleep(0.002)
            start = time.perf_counter()
            result.cancel()
            await done.wait()
            reports: Any = ()
            if self.tether:
                reports = await self.tools.wait_aborted()
            return time.perf_counter() - start, reports


def _kill(procs: list[psutil.Process]) -> None:
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()


async def read_only(h: Harness, trials: int) -> Outcome:
    out = Outcome()
    agent = h.agent("Lookup")
    for _ in range(trials):
        took, reports = await h.cancel(
            agent, ("Lookup", {"key": "k"}), STATE.running.is_set
        )
        out.times.append(took)
        if h.tether:
            said = any("Lookup" in line for r in reports for line in r.outliving)
            if (
                STATE.running.is_set() and not said
            ) or not await anyio.to_thread.run_sync(STATE.ended.wait, 0.1):
                out.false += 1
        elif STATE.running.is_set():
            out.false += 1  # the run is over; its thread is not, and nothing says so
        await anyio.to_thread.run_sync(STATE.ended.wait, LOOKUP_LIMIT + 1)
    return out


def _procs(text: str) -> list[psutil.Process]:
    try:
        return tree_procs(text)
    except LookupError:  # a process already gone
        return []


async def bash(h: Harness, trials: int, tree_name: str) -> Outcome:
    out = Outcome()
    tree = next(t for t in TREES if t.name == tree_name)
    agent = h.agent("Bash")

    def text() -> str:
        return h.output if h.tether else "".join(STATE.seen)

    for _ in range(trials):
        h.output = ""
        STATE.seen.clear()
        procs: list[psutil.Process] = []

        def ready(procs: list[psutil.Process] = procs) -> bool:
            if len(tree_pids(text())) >= tree.pids and not procs:
                procs.extend(_procs(text()))
            return bool(procs)

        took, reports = await h.cancel(
            agent, ("Bash", {"command": tree.command}), ready
        )
        out.times.append(took)
        if h.tether:
            if all(r.settled for r in reports) and alive(procs):
                out.false += 1
            else:
                await h.tools.wait_settled()
                await h.tools.results_after_cancel()
                if alive(procs):
                    out.false += 1
        else:
            await anyio.sleep(GRACE + 0.5)
            if alive(procs):
                out.false += 1  # the tree outlives the run, and nothing says so
        _kill(procs)
    return out


async def two_step(h: Harness, trials: int) -> Outcome:
    out = Outcome()
    agent = h.agent("TwoStep")
    for n in range(trials):
        STATE.gate = anyio.Event()
        STATE.written = False
        name = f"out-{h.tether}-{n}.txt"
        took, reports = await h.cancel(
            agent, ("TwoStep", {"path": name}), lambda: STATE.written
        )
        out.times.append(took)
        STATE.gate.set()
        target = STATE.folder / name
        if h.tether:
            whys = [p.why for r in reports for p in r.pending]
            await h.tools.wait_settled()
            items = await h.tools.results_after_cancel()
            told = str(items[-1]["output"]) if items else ""
            if (
                whys != ["mutating: started, waiting for result"]
                or target.read_text() != "step 1\nstep 2\n"
                or "ran to its end anyway" not in told
            ):
                out.false += 1
        else:
            await anyio.sleep(0.05)
            if target.read_text() != "step 1\nstep 2\n":
                out.false += 1  # half written, and nothing says so
    return out


def _ticks(log: Path) -> int:
    try:
        return log.read_text().count("tick")
    except FileNotFoundError:
        return 0


async def ticker(h: Harness, trials: int) -> Outcome:
    out = Outcome()
    if h.tether:
        server: Any = h.tools.mcp_server("ticker")
    else:
        server = MCPServerStdio(
            {"command": sys.executable, "args": [str(TICKER)]}, name="ticker"
        )
        await server.connect()
    try:
        agent = Agent(name="a", model=h.model, mcp_servers=[server])
        for n in range(trials):
            log = STATE.folder / f"ticks-{h.tether}-{n}.log"
            took, reports = await h.cancel(
                agent,
                ("tick", {"times": 25, "log": str(log)}),
                lambda log=log: _ticks(log) >= 2,
            )
            out.times.append(took)
            before = _ticks(log)
            await anyio.sleep(0.1)
            ticking = _ticks(log) > before
            if h.tether:
                whys = [p.why for r in reports for p in r.pending]
                if ticking and whys != ["extension: started, waiting for result"]:
                    out.false += 1
                await h.tools.abort(kill=True)
                await h.tools.wait_settled()
                await h.tools.results_after_cancel()
                before = _ticks(log)
                await anyio.sleep(0.1)
                if _ticks(log) > before:
                    out.false += 1  # said ended, still ticking
            else:
                if ticking:
                    out.false += 1  # ticking on, and nothing says so
                await anyio.sleep(0.6)  # its ticks end before the next trial
    finally:
        if not h.tether:
            await server.cleanup()
    return out


async def main(trials: int) -> None:
    set_tracing_disabled(True)
    folder = Path(tempfile.mkdtemp(prefix="oa-cancel-bench-"))
    STATE.folder = folder
    os.environ["TETHER_HOME"] = str(folder / "home")
    config = Config(
        mcp_servers={"ticker": {"command": sys.executable, "args": [str(TICKER)]}}
    )
    load = os.getloadavg()
    print(f"machine: {machine()}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"load before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(
        f"trials: {trials} per scenario and arm; grace {GRACE} s, abort bound {ABORT_BOUND} s"
    )
    rows: list[tuple[str, str, Outcome]] = []
    async with (
        McpTools.open(config, workspace=folder, startup_timeout=20) as mcp,
        ModelServer.open() as server,
        AsyncOpenAI(base_url=server.url, api_key="stub", max_retries=0) as client,
    ):
        model = OpenAIChatCompletionsModel(model="stub", openai_client=client)
        for tether in (True, False):
            arm = "tether" if tether else "plain SDK"
            async with (
                Runtime(
                    workspace=folder,
                    tools=[*default_tools(), *mcp.tools, Lookup, TwoStep],
                    permissions={"allow": ["Bash", "TwoStep", "mcp__ticker__*"]},
                    grace=GRACE,
                    abort_bound=ABORT_BOUND,
                    guard=False,
                ) as runtime,
                TetherTools(runtime) as tools,
                anyio.create_task_group() as tg,
            ):
                h = Harness(server, tools, model, tether)
                tg.start_soon(h.watch, runtime)
                rows.append(("read-only thread", arm, await read_only(h, trials)))
                rows.append(
                    ("Bash ignoring SIGTERM", arm, await bash(h, trials, "trap-term"))
                )
                rows.append(
                    ("Bash, setsid grandchild", arm, await bash(h, trials, "setsid"))
                )
                rows.append(("two-step write", arm, await two_step(h, trials)))
                rows.append(("MCP tool ticking on", arm, await ticker(h, trials)))
                tg.cancel_scope.cancel()
    print()
    print("| scenario | arm | false reports | cancel return p50 | p99 |")
    print("|---|---|---|---|---|")
    for name, arm, got in rows:
        p50 = percentile(got.times, 50) * 1e3
        p99 = percentile(got.times, 99) * 1e3
        print(
            f"| {name} | {arm} | {got.false}/{len(got.times)} | {p50:.1f} ms | {p99:.1f} ms |"
        )
    load = os.getloadavg()
    print(f"\nload after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    args = parser.parse_args()
    anyio.run(main, args.trials)
