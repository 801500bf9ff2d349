"""`tether mcp serve`: a client's cancel of a hung read-only call to the truthful answer.

Run: .venv/bin/python benchmarks/mcp_serve_cancel.py [--runs N] [--transport T]
     [--client sdk|raw] [--instructions RUNS]
Target (spec 05): p50 <= 5 ms, p99 <= 20 ms.

A real `tether mcp serve` process (the `tether.testing` tools `Hang`, read-only and never
returning, and `Echo`) and a client. Each run calls `Hang`, waits until the call runs
(its ledger row says `running`) and cancels it; the time runs from the cancel to the
answer that tells the truth. The server's CPU time per run (psutil, every thread of the
process) is printed too; a run is two calls (`Hang`, then `Echo`).

`--client`: `sdk` (default), the MCP SDK's own `Client`, whose work (models, its
session's tasks and streams) is inside the span; `raw`, stdio only, a minimal
JSON-RPC line client (blocking reads and writes, no event loop, no models) that sends
the same `notifications/cancelled` and `Echo` call and times the same span: the
server's share, with the least a client can add. The spec's target is the server's;
both are reported.

`--instructions RUNS` counts the server's instructions per run under valgrind's
callgrind (raw client; a figure that the machine's other work does not move). Give it
40 runs or more: a full collection lands in one of its two counts and not the other.

`MCP_SERVE_BENCH_PROFILE=FILE` runs the server under cProfile, clocked by the main
thread's CPU time (what the machine's other work takes is not counted), and writes the
profile to FILE when the client leaves: `python -m pstats FILE`. The profiler slows
Python code several times over and C code not at all: read its shares, not its
milliseconds.

`--transport` (with the SDK's client):

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
import re
import shutil
import sqlite3
import subprocess
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
PROFILE_ENV = "MCP_SERVE_BENCH_PROFILE"
"""Set to a path: the server runs under cProfile, its profile written there at exit.

The profile's clock is the main thread's CPU time: what a loaded machine's other work
takes while the server waits for a core is not counted in it.
"""
_PROFILED = """
import cProfile, runpy, sys, time
out = sys.argv[1]
sys.argv = ["tether", *sys.argv[2:]]
profile = cProfile.Profile(time.thread_time)
try:
    profile.runcall(runpy.run_module, "tether", run_name="__main__")
except SystemExit:
    pass
finally:
    profile.dump_stats(out)
"""
TOOLS = ("--tool", "tether.testing:Hang", "--tool", "tether.testing:Echo")


def _profiled(argv: list[str]) -> list[str]:
    """`argv` (`-m tether ...`), under cProfile when `PROFILE_ENV` names a file."""
    if profile := os.environ.get(PROFILE_ENV):
        return ["-c", _PROFILED, profile, *argv[2:]]
    return argv


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
    argv = _profiled(["-m", "tether", "mcp", "serve", "--ledger", str(ledger), *TOOLS])
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


class _RawClient:
    """A minimal JSON-RPC line client on the server's stdio: blocking reads and writes.

    The floor a client can reach: no event loop, no models, one line each way.
    """

    def __init__(
        self, argv: list[str], env: dict[str, str], cwd: Path, *, under: list[str]
    ) -> None:
        self.process = subprocess.Popen(
            [*under, sys.executable, *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd=cwd,
        )
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self._in = self.process.stdin.fileno()
        self._out = self.process.stdout.fileno()
        self._buffer = b""
        self._next_id = 0

    def send(self, method: str, params: dict[str, Any], *, notify: bool = False) -> int:
        """Write one request (or notification) line; return its id."""
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
        if not notify:
            self._next_id += 1
            message["id"] = self._next_id
        os.write(self._in, json.dumps(message).encode() + b"\n")
        return self._next_id

    def answer(self, request_id: int) -> dict[str, Any]:
        """Read lines until the answer to `request_id`."""
        while True:
            while b"\n" not in self._buffer:
                chunk = os.read(self._out, 65536)
                if not chunk:
                    raise EOFError("the server closed its stdout")
                self._buffer += chunk
            line, self._buffer = self._buffer.split(b"\n", 1)
            message = json.loads(line)
            if message.get("id") == request_id:
                if "error" in message:
                    raise RuntimeError(message["error"])
                return message["result"]  # type: ignore[no-any-return]

    def start(self) -> None:
        request = self.send(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"},
            },
        )
        self.answer(request)
        self.send("notifications/initialized", {}, notify=True)

    def close(self) -> None:
        os.close(self._in)
        self.process.wait(timeout=30)

    def one(self, ledger: Path, n: int) -> float:
        hang = self.send(
            "tools/call", {"name": "Hang", "arguments": {"marker": f"m{n}"}}
        )
        while not _running(ledger):
            time.sleep(0.002)
        cancelled_at = time.perf_counter()
        self.send(
            "notifications/cancelled",
            {"requestId": hang, "reason": "benchmark"},
            notify=True,
        )
        echo = self.send("tools/call", {"name": "Echo", "arguments": {"text": "next"}})
        result = self.answer(echo)
        took = time.perf_counter() - cancelled_at
        text = "\n".join(b.get("text", "") for b in result["content"])
        assert "stopped while running; it was ended" in text, text
        return took


def raw_main(runs: int) -> None:
    folder, ledger, env = _place()
    argv = ["-m", "tether", "mcp", "serve", "--ledger", str(ledger), *TOOLS]
    client = _RawClient(_profiled(argv), env, folder, under=[])
    server = psutil.Process(client.process.pid)
    times: list[float] = []
    cpu_start = 0.0
    try:
        client.start()
        for n in range(runs + WARMUP):
            if n == WARMUP:
                t = server.cpu_times()
                cpu_start = t.user + t.system
            took = client.one(ledger, n)
            if n >= WARMUP:
                times.append(took)
            while _running(ledger):
                time.sleep(0.002)
        t = server.cpu_times()
        cpu = (t.user + t.system - cpu_start) / runs
    finally:
        client.close()
    _report("raw", times, cpu)


def instructions(runs: int) -> None:
    """The server's instructions per run (valgrind's callgrind, the raw client).

    A server that serves `runs` runs, minus one that serves none, over `runs`; each
    first serves 5 runs that both count. One hash seed for both: their dicts and sets
    grow alike. Under valgrind a run is some fifty times slower than without.
    """
    if shutil.which("valgrind") is None:
        sys.exit("--instructions needs valgrind (apt-get install valgrind)")

    def count(n: int) -> int:
        folder, ledger, env = _place()
        log = folder / "callgrind.log"
        under = [
            *("valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"),
            f"--log-file={log}",
        ]
        argv = ["-m", "tether", "mcp", "serve", "--ledger", str(ledger), *TOOLS]
        client = _RawClient(argv, {**env, "PYTHONHASHSEED": "0"}, folder, under=under)
        try:
            client.start()
            for k in range(5 + n):
                client.one(ledger, k)
                while _running(ledger):
                    time.sleep(0.01)
        finally:
            client.close()
        found = re.search(r"Collected : (\d+)", log.read_text())
        assert found, log.read_text()
        return int(found.group(1))

    per = (count(runs) - count(0)) / runs
    print(machine())
    print(
        f"server instructions per run: {per:,.0f} ({runs} runs, callgrind, raw client)"
    )


def _place() -> tuple[Path, Path, dict[str, str]]:
    """A fresh folder, the ledger's path in it, and the server's environment."""
    folder = Path(tempfile.mkdtemp(prefix="mcp-serve-bench-"))
    home = folder / "home"
    (home / "config").mkdir(parents=True)
    (home / "config" / "config.toml").write_text('[permissions]\nallow = ["Hang"]\n')
    return folder, folder / "ledger.sqlite", {**os.environ, "TETHER_HOME": str(home)}


def _report(client: str, times: list[float], cpu: float) -> None:
    print(machine())
    print(f"client: {client}; load average: {os.getloadavg()}")
    print(summary("cancel -> the answer that tells the truth", times))
    print(f"server CPU per run: {cpu * 1e3:.2f} ms")


async def main(runs: int, transport: str) -> None:
    folder, ledger, env = _place()
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
    _report(f"the SDK's, {transport}", times, cpu)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument(
        "--transport", choices=("stdio", "http", "http-task"), default="stdio"
    )
    parser.add_argument(
        "--client",
        choices=("sdk", "raw"),
        default="sdk",
        help="raw: a minimal JSON-RPC line client on stdio (no --transport)",
    )
    parser.add_argument(
        "--instructions",
        type=int,
        metavar="RUNS",
        help="count the server's instructions per run under valgrind (raw client)",
    )
    args = parser.parse_args()
    if args.instructions:
        instructions(args.instructions)
    elif args.client == "raw":
        if args.transport != "stdio":
            parser.error("--client raw speaks stdio only: drop --transport")
        raw_main(args.runs)
    else:
        anyio.run(main, args.runs, args.transport)
