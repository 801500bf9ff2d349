"""Cost per call of `tether guard --claude-hook`, as Claude Code runs it, beside `python -c pass`.

Run: .venv/bin/python benchmarks/guard_hook.py [--runs N] [--run-agent]

The hook is a fresh process before every agent tool call: one PreToolUse event on
stdin, an exit code. Timed in turn, round after round (hook Bash, floor, hook Write,
floor, ...), so load on the machine hits all alike: a harmless Bash call and a Write
into the working directory through the `tether` console script, and a bare
`python -c pass` of the same interpreter (the floor of any Python hook; spec 05: the
hook costs at most 3x it). Printed: p50 and p90 of each, their ratios, and the median
of the ratios round by round. `--run-agent` times the hook as a run's agent meets it
(`TETHER_RUN` set: the stop is read too). Then a 4 MB `tether lift; echo a*a*…` event
(a hook must answer before its host gives up).

Every process gets the same environment: bytecode is written to and read from a
temporary cache (`PYTHONPYCACHEPREFIX`), as an installed package has it, even where
`PYTHONDONTWRITEBYTECODE` is set; the first rounds, which write it, are not counted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import machine, percentile, summary

TETHER = Path(sys.executable).parent / "tether"
_WARMUP = 3


def _event(tool_name: str, tool_input: dict[str, str], cwd: str) -> bytes:
    return json.dumps(
        {
            "session_id": "bench",
            "transcript_path": f"{cwd}/transcript.jsonl",
            "cwd": cwd,
            "permission_mode": "default",
            "hook_event_name": "PreToolUse",
            "tool_name": tool_name,
            "tool_input": tool_input,
            "tool_use_id": "toolu_01",
        }
    ).encode()


def _once(argv: list[str], payload: bytes, env: dict[str, str], expect: int) -> float:
    started = time.perf_counter()
    done = subprocess.run(
        argv, input=payload, capture_output=True, env=env, check=False
    )
    elapsed = time.perf_counter() - started
    assert done.returncode == expect, done.stderr
    return elapsed


def _ratio_line(name: str, hook: list[float], floor: list[float]) -> str:
    pairs = statistics.median(h / f for h, f in zip(hook, floor, strict=True))
    return (
        f"{name} / python -c pass: p50 {percentile(hook, 50) / percentile(floor, 50):.2f}x"
        f", p90 {percentile(hook, 90) / percentile(floor, 90):.2f}x"
        f", median of the round-by-round ratios {pairs:.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--run-agent", action="store_true")
    args = parser.parse_args()
    hook = [str(TETHER), "guard", "--claude-hook"]
    floor_argv = [sys.executable, "-c", "pass"]
    with (
        tempfile.TemporaryDirectory() as cwd,
        tempfile.TemporaryDirectory() as pycache,
    ):
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = pycache
        if args.run_agent:
            env |= {"TETHER_RUN": "bench-run", "TETHER_LANE": "bench-lane"}
        bash = _event("Bash", {"command": "ls -la && git status --short"}, cwd)
        write = _event(
            "Write", {"file_path": f"{cwd}/notes.txt", "content": "hello\n"}, cwd
        )
        cases = {"hook, Bash": bash, "hook, Write": write}
        times: dict[str, list[float]] = {name: [] for name in cases}
        floors: dict[str, list[float]] = {name: [] for name in cases}
        for round_ in range(_WARMUP + args.runs):
            for name, payload in cases.items():
                hook_s = _once(hook, payload, env, 0)
                floor_s = _once(floor_argv, b"", env, 0)
                if round_ >= _WARMUP:
                    times[name].append(hook_s)
                    floors[name].append(floor_s)
        print(machine())
        print(f"load average {os.getloadavg()[0]:.1f}; run agent: {args.run_agent}")
        every_floor = [t for name in cases for t in floors[name]]
        print(summary("python -c pass", every_floor))
        for name in cases:
            print(summary(name, times[name]))
        for name in cases:
            print(_ratio_line(name, times[name], floors[name]))
        huge = _event(
            "Bash",
            {"command": "tether lift; echo " + "a*" * (2 * 1024 * 1024 - 400)},
            cwd,
        )
        runs = max(3, args.runs // 10)
        print(
            summary(
                "hook, 4 MB command", [_once(hook, huge, env, 2) for _ in range(runs)]
            )
        )


if __name__ == "__main__":
    main()
