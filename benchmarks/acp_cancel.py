"""`session/cancel` to the `session/prompt` answer, with a read-only call that never returns.

Run: .venv/bin/python benchmarks/acp_cancel.py [--runs N]
Target (issue: ACP server): p50 <= 5 ms, p99 <= 20 ms.

A real `tether acp` process (scripted model, the `Hang` test tool) and the SDK's client
on its pipes. Each run is one prompt whose model calls `Hang`; once the call's `started`
output has arrived, the client sends `session/cancel` and the time runs until the
prompt's answer (`cancelled`) is read off the pipe. Every run checks the answer and that
the call's `failed` status came before it. The server's CPU time per turn (the whole
turn: prompt, model step, tool start, cancel, answer) is printed too: unlike the wall
time, it does not depend on how loaded the machine is.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import psutil
from acp import PROTOCOL_VERSION, spawn_agent_process, text_block
from acp.connection import StreamDirection, StreamEvent

sys.path.insert(0, str(Path(__file__).parent))
from _common import machine, summary


class Editor:
    """The client side: notes when the call started and when the answer arrived."""

    def __init__(self) -> None:
        self.started = anyio.Event()
        self.answered_at = 0.0
        self.failed_before_answer = False
        self._failed = False

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        content = getattr(update, "content", None)
        if isinstance(content, list) and content and "started" in str(content[0]):
            self.started.set()

    def observe(self, event: StreamEvent) -> None:
        if event.direction is not StreamDirection.INCOMING:
            return
        message = event.message
        update = message.get("params", {}).get("update", {})
        if update.get("status") == "failed":
            self._failed = True
        if message.get("result", {}).get("stopReason") == "cancelled":
            self.answered_at = time.perf_counter()
            self.failed_before_answer = self._failed

    def next_run(self) -> None:
        self.started = anyio.Event()
        self._failed = False


async def measure(runs: int, warm_up: int) -> tuple[list[float], float]:
    times: list[float] = []
    cpu = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "home").mkdir()
        (root / "ws").mkdir()
        script = root / "moves.jsonl"
        moves = [{"tether_script": 1}] + [
            {"tool_calls": [{"id": f"m{n}", "name": "Hang", "input": {"marker": "m"}}]}
            for n in range(runs + warm_up)
        ]
        script.write_text("\n".join(json.dumps(m) for m in moves) + "\n", "utf-8")
        editor = Editor()
        env = {
            "PATH": os.environ.get("PATH", ""),
            "TETHER_HOME": str(root / "home"),
        }
        async with spawn_agent_process(
            editor,
            sys.executable,
            "-m",
            "tether",
            "acp",
            "--model",
            f"scripted:{script}",
            "--tool",
            "tether.testing:Hang",
            env=env,
            transport_kwargs={"stderr": None},
            observers=[editor.observe],
        ) as (conn, process):
            server = psutil.Process(process.pid)
            await conn.initialize(protocol_version=PROTOCOL_VERSION)
            sid = (
                await conn.new_session(cwd=str(root / "ws"), mcp_servers=[])
            ).session_id
            before = server.cpu_times()
            for n in range(runs + warm_up):
                if n == warm_up:
                    before = server.cpu_times()
                editor.next_run()
                async with anyio.create_task_group() as tg:

                    async def prompt() -> None:
                        response = await conn.prompt(
                            session_id=sid, prompt=[text_block("go")]
                        )
                        assert response.stop_reason == "cancelled", response

                    tg.start_soon(prompt)
                    with anyio.fail_after(10):
                        await editor.started.wait()
                    t0 = time.perf_counter()
                    await conn.cancel(session_id=sid)
                times.append(editor.answered_at - t0)
                assert editor.failed_before_answer
            after = server.cpu_times()
            cpu = (after.user + after.system - before.user - before.system) / runs
    return times[warm_up:], cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=300)
    args = parser.parse_args()
    times, cpu = anyio.run(measure, args.runs, 20)
    print(machine())
    print(f"load average at the end: {os.getloadavg()}")
    print(summary("session/cancel to the cancelled answer, hung READ_ONLY call", times))
    print(f"tether acp CPU time per cancelled turn: {cpu * 1e3:.3f}ms")


if __name__ == "__main__":
    main()
