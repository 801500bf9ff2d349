"""`tether mcp serve`: a client's cancel of a hung read-only call to the truthful answer.

Run: .venv/bin/python benchmarks/mcp_serve_cancel.py [--runs N] [--transport T]
Target (spec 05): p50 <= 5 ms, p99 <= 20 ms.

A real `tether mcp serve` process (the `tether.testing` tools `Hang`, read-only and never
returning, and `Echo`) and the MCP SDK's own client. Each run calls `Hang`, waits until
the call runs (its ledger row says `running`) and cancels it; the time runs from the
cancel to the answer that tells the truth. The server's CPU time per run (psutil) is
printed too. `--transport`:

- `stdio` (default): the SDK's `stdio_client`; cancelling the task awaiting the call
  sends `notifications/cancelled`, then `Echo` is called at once. MCP answers no
  cancelled request, so the answer is `Echo`'s result, which must say the cancelled
  call ended ("stopped while running; it was ended"): a second call's round trip is
  included.
- `http`: the same over streamable HTTP (`--http`), a 2025-11-25 client with an MCP
  session (`notifications/cancelled` is POSTed; the answer is `Echo`'s result).
- `http-task`: a 2026-07-28 client that takes the call as a task (the tasks extension):
  `tasks/cancel`, then `tasks/get` until the task's status is terminal; the answer is
  the `tasks/get` that says `cancelled`.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import httpx2
import psutil
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))
from _common import machine, summary
from tests.mcpserve._http import (
    CreatedTask,
    TasksClient,
    cancel_task,
    follow,
)

WARMUP = 20
TOOLS = ("--tool", "tether.testing:Hang", "--tool", "tether.testing:Echo")


def _running(ledger: Path) -> bool:
    try:
        with sqlite3.connect(f"file:{ledger}?mode=ro", uri=True) as db:
            rows = db.execute("SELECT 1 FROM calls WHERE state = 'running'").fetchall()
    except sqlite3.Error:
        return False
    return bool(rows)


async def _wait_running(ledger: Path) -> None:
    while not _running(ledger):  # noqa: ASYNC110 (another process)
        await anyio.sleep(0.002)


async def _client(
    stack: AsyncExitStack, transport: str, ledger: Path, env: dict[str, str], cwd: Path
) -> tuple[Client, psutil.Process]:
    """The SDK client of a fresh `tether mcp serve`, and the server's process."""
    argv = ["-m", "tether", "mcp", "serve", "--ledger", str(ledger), *TOOLS]
    if transport == "stdio":
        params = StdioServerParameters(
            command=sys.executable, args=argv, env=env, cwd=cwd
        )
        client = await stack.enter_async_context(Client(params, mode="legacy"))
        (server,) = [p for p in psutil.Process().children() if "mcp" in p.cmdline()]
        return client, server
    process = await stack.enter_async_context(
        await anyio.open_process(
            [sys.executable, *argv, "--http", "--port", "0", "--json"], env=env, cwd=cwd
        )
    )
    assert process.stdout is not None
    line = b""
    while not line.endswith(b"\n"):
        line += await process.stdout.receive(1)
    started = json.loads(line)
    headers = {"Authorization": f"Bearer {started['token']}"}
    web = await stack.enter_async_context(httpx2.AsyncClient(headers=headers))
    client = await stack.enter_async_context(
        Client(
            streamable_http_client(started["url"], http_client=web),
            mode="legacy" if transport == "http" else "auto",
            extensions=[TasksClient()] if transport == "http-task" else None,
        )
    )
    stack.callback(process.terminate)
    return client, psutil.Process(process.pid)


async def _one_by_next_result(client: Client, ledger: Path, n: int) -> float:
    async with anyio.create_task_group() as tg:
        tg.start_soon(client.call_tool, "Hang", {"marker": f"m{n}"})
        await _wait_running(ledger)
        cancelled_at = time.perf_counter()
        tg.cancel_scope.cancel()
    result = await client.call_tool("Echo", {"text": "next"})
    took = time.perf_counter() - cancelled_at
    text = "\n".join(getattr(b, "text", "") for b in result.content)
    assert "stopped while running; it was ended" in text, text
    return took


async def _one_by_task(client: Client, ledger: Path, n: int) -> float:
    task: Any = await client.session.call_tool(
        "Hang", {"marker": f"m{n}"}, allow_claimed=True
    )
    assert isinstance(task, CreatedTask), task
    await _wait_running(ledger)
    cancelled_at = time.perf_counter()
    await cancel_task(client.session, task.task_id)
    ended = await follow(client.session, task.task_id, poll=0)
    took = time.perf_counter() - cancelled_at
    assert ended["status"] == "cancelled", ended
    return took


async def main(runs: int, transport: str) -> None:
    folder = Path(tempfile.mkdtemp(prefix="mcp-serve-bench-"))
    home = folder / "home"
    (home / "config").mkdir(parents=True)
    (home / "config" / "config.toml").write_text('[permissions]\nallow = ["Hang"]\n')
    ledger = folder / "ledger.sqlite"
    env = {**os.environ, "TETHER_HOME": str(home)}
    one = _one_by_task if transport == "http-task" else _one_by_next_result
    times: list[float] = []
    cpu_start = 0.0
    async with AsyncExitStack() as stack:
        client, server = await _client(stack, transport, ledger, env, folder)
        for n in range(runs + WARMUP):
            if n == WARMUP:
                t = server.cpu_times()
                cpu_start = t.user + t.system
            took = await one(client, ledger, n)
            if n >= WARMUP:
                times.append(took)
            # The ledger keeps every row: wait for this one to settle before the next.
            while _running(ledger):  # noqa: ASYNC110 (another process)
                await anyio.sleep(0.002)
        t = server.cpu_times()
        cpu = (t.user + t.system - cpu_start) / runs
    print(machine())
    print(f"transport: {transport}; load average: {os.getloadavg()}")
    print(summary("cancel -> the answer that tells the truth", times))
    print(f"server CPU per run: {cpu * 1e3:.2f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument(
        "--transport", choices=("stdio", "http", "http-task"), default="stdio"
    )
    args = parser.parse_args()
    anyio.run(main, args.runs, args.transport)
