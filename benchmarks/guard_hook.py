"""Start-up and judging time of `tether guard --claude-hook`, as Claude Code runs it.

Run: .venv/bin/python benchmarks/guard_hook.py [--runs N]

The hook is a fresh process before every agent tool call: one event on stdin, an exit
code. Timed: a harmless Bash call (the common case: start-up plus one small judgment),
a bare `python -c pass` on the same interpreter (the floor of any Python hook), and a
4 MB `tether lift; echo a*a*…` event (a hook must answer before its host gives up).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import machine, summary

TETHER = Path(sys.executable).parent / "tether"


def _event(command: str, cwd: str) -> bytes:
    return json.dumps(
        {
            "hook_event_name": "PreToolUse",
            "tool_name": "Bash",
            "tool_input": {"command": command},
            "cwd": cwd,
        }
    ).encode()


def _time(argv: list[str], payload: bytes, runs: int, expect: int) -> list[float]:
    times: list[float] = []
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run(argv, input=payload, capture_output=True, check=False)
        times.append(time.perf_counter() - started)
        assert done.returncode == expect, done.stderr
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    hook = [str(TETHER), "guard", "--claude-hook"]
    with tempfile.TemporaryDirectory() as cwd:
        harmless = _event("ls -la && git status --short", cwd)
        huge = _event("tether lift; echo " + "a*" * (2 * 1024 * 1024 - 400), cwd)
        print(machine())
        print(summary("hook, harmless call", _time(hook, harmless, args.runs, 0)))
        floor = [sys.executable, "-c", "pass"]
        print(summary("python -c pass", _time(floor, b"", args.runs, 0)))
        print(
            summary("hook, 4 MB command", _time(hook, huge, max(3, args.runs // 10), 2))
        )


if __name__ == "__main__":
    main()
