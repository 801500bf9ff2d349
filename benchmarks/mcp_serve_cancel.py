"""`tether mcp serve`: a client's cancel of a hung read-only call to the truthful answer.

Run: .venv/bin/python benchmarks/mcp_serve_cancel.py [--runs N]
Target (spec 05, issue 33): p50 <= 5 ms, p99 <= 20 ms.

A real `tether mcp serve` process (the `tether.testing` tools `Hang`, read-only and never
returning, and `Echo`) and the MCP SDK's own client on its pipes. Each run calls `Hang`,
waits until the call runs (its ledger row says `running`), cancels the task awaiting it
(the SDK sends `notifications/cancelled`) and at once calls `Echo`. MCP answers no
cancelled request, so the answer is the next call's result: the time runs from the
cancel to `Echo`'s result, which must say the cancelled call ended ("stopped while
running; it was ended"). The server's CPU time per run (psutil) is printed too.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import anyio
import psutil
from mcp import ClientSession, StdioServerParameters, stdio_client

sys.path.insert(0, str(Path(__file__).parent))
from _common import machine, summary

WARMUP = 20


def _running(ledger: Path) -> bool:
    try:
        with sqlite3.connect(f"file:{ledger}?mode=ro", uri=True) as db:
            rows = db.execute("SELECT 1 FROM calls WHERE state = 'running'").fetchall()
    except sqlite3.Error:
        return False
    return bool(rows)


async def main(runs: int) -> None:
    folder = Path(tempfile.mkdtemp(prefix="mcp-serve-bench-"))
    home = folder / "home"
    (home / "config").mkdir(parents=True)
    (home / "config" / "config.toml").write_text('[permissions]\nallow = ["Hang"]\n')
    ledger = folder / "ledger.sqlite"
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            *("-m", "tether", "mcp", "serve", "--ledger", str(ledger)),
            *("--tool", "tether.testing:Hang", "--tool", "tether.testing:Echo"),
        ],
        env={**os.environ, "TETHER_HOME": str(home)},
        cwd=folder,
    )
    times: list[float] = []
    server: psutil.Process | None = None
    cpu_start = 0.0
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write) as client,
    ):
        await client.initialize()
        for proc in psutil.Process().children():
            if "mcp" in proc.cmdline():
                server = proc
        for n in range(runs + WARMUP):
            if n == WARMUP and server is not None:
                t = server.cpu_times()
                cpu_start = t.user + t.system
            async with anyio.create_task_group() as tg:
                tg.start_soon(client.call_tool, "Hang", {"marker": f"m{n}"})
                while not _running(ledger):  # noqa: ASYNC110 (another process)
                    await anyio.sleep(0.002)
                cancelled_at = time.perf_counter()
                tg.cancel_scope.cancel()
            result = await client.call_tool("Echo", {"text": "next"})
            took = time.perf_counter() - cancelled_at
            text = "\n".join(getattr(b, "text", "") for b in result.content)
            assert "stopped while running; it was ended" in text, text
            if n >= WARMUP:
                times.append(took)
            # The ledger keeps every row: wait for this one to settle before the next.
            while _running(ledger):  # noqa: ASYNC110 (another process)
                await anyio.sleep(0.002)
        cpu = 0.0
        if server is not None:
            t = server.cpu_times()
            cpu = (t.user + t.system - cpu_start) / runs
    print(machine())
    print(f"load average: {os.getloadavg()}")
    print(summary("cancel -> next result says ended", times))
    print(f"server CPU per run: {cpu * 1e3:.2f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    anyio.run(main, parser.parse_args().runs)
