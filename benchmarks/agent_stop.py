"""From a run's stop to the end of a `builtin` stage agent's turn.

Each run is one builtin stage (tether's agent loop, walled, real Bash processes) whose
scripted model asks for a Bash call of `--call` seconds and then eight more calls, one
per model step. The stop (the run's halt event) is set at a random moment of the first
call; the call runs to its end, no later call starts, and the stage returns "stopped at
the person's stop after 1 tool call". Figures: stop → stage returned (the rest of the
call is in it, by design), and the call's end (its last write, by the file's mtime,
which the kernel stamps from a coarse clock: up to one tick late) → stage returned.

The second case sets the stop while the model answers step 2 (between calls): nothing
runs, so the figure is the stop → stage returned alone. The third sets it while a model
request hangs: the request is closed `--halt-wait` seconds later (the builtin's default
is 10 s; a smaller value measures the same path), so the figure is that wait plus the
closing.

Target (spec 05, "a stop reaching inside a stage agent"): stop → halted ≤ the rest of
the tool call in flight + 10 s, however many calls the stage had left.

    .venv/bin/python benchmarks/agent_stop.py --runs 50 --call 0.5 --halt-wait 0.5
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.to_thread

sys.path.insert(0, str(Path(__file__).parent))
from typing import TYPE_CHECKING

from _common import machine, summary

from tether.models import ModelRequest, Move, ScriptedModel, StepDone, StreamEvent
from tether.runs._builtin import run_builtin_agent

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

LATER = 8


def _script(path: Path, first: str) -> None:
    moves: list[dict[str, object]] = [
        {
            "text": "Call 1.",
            "tool_calls": [{"id": "c1", "name": "Bash", "input": {"command": first}}],
        }
    ]
    for n in range(2, LATER + 2):
        command = f"echo start > a{n}.txt; echo end >> a{n}.txt"
        moves.append(
            {
                "text": f"Call {n}.",
                "tool_calls": [
                    {"id": f"c{n}", "name": "Bash", "input": {"command": command}}
                ],
            }
        )
    moves.append({"text": "Done."})
    lines = [json.dumps({"tether_script": 1}), *(json.dumps(m) for m in moves)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


class _HaltInStep:
    """The scripted model, setting the halt as step 2 answers (or as step 1 starts
    to speak, with `at_text`)."""

    def __init__(
        self,
        inner: ScriptedModel,
        halt: anyio.Event,
        marks: list[float],
        *,
        at_text: bool = False,
    ) -> None:
        self.inner = inner
        self.halt = halt
        self.marks = marks
        self.at_text = at_text

    @property
    def name(self) -> str:
        return self.inner.name

    @asynccontextmanager
    async def stream(
        self, request: ModelRequest
    ) -> AsyncIterator[AsyncIterator[StreamEvent]]:
        step = len(self.inner.requests) + 1
        async with self.inner.stream(request) as events:

            async def play() -> AsyncIterator[StreamEvent]:
                async for event in events:
                    now = self.at_text or (isinstance(event, StepDone) and step == 2)
                    if now and not self.halt.is_set():
                        self.halt.set()
                        self.marks.append(time.monotonic())
                    yield event

            yield play()


async def _in_call(root: Path, call: float, rng: random.Random) -> tuple[float, float]:
    cwd = root / "lane"
    cwd.mkdir()
    os.mkfifo(cwd / "ready")
    _script(
        root / "moves.jsonl",
        f"echo start > a1.txt; echo go > ready; sleep {call}; echo end >> a1.txt",
    )
    halt = anyio.Event()
    done: list[float] = []

    async def stage() -> None:
        outcome = await run_builtin_agent(
            f"scripted:{root / 'moves.jsonl'}",
            "work",
            cwd=cwd,
            log=root / "lane.log",
            on_call=lambda _scope: None,
            halt=halt,
        )
        done.append(time.time())
        assert outcome.stopped, outcome
        assert outcome.calls == 1, outcome
        assert not (cwd / "a2.txt").exists()

    async with anyio.create_task_group() as tg:
        tg.start_soon(stage)
        await anyio.to_thread.run_sync((cwd / "ready").read_text)
        await anyio.sleep(rng.uniform(0, call / 2))
        halt.set()
        halted = time.time()
    call_end = (cwd / "a1.txt").stat().st_mtime_ns / 1e9
    assert (cwd / "a1.txt").read_text() == "start\nend\n"
    return done[0] - halted, done[0] - call_end


async def _between(root: Path) -> float:
    cwd = root / "lane"
    cwd.mkdir()
    _script(root / "moves.jsonl", "echo start > a1.txt; echo end >> a1.txt")
    halt = anyio.Event()
    marks: list[float] = []
    model = _HaltInStep(ScriptedModel.from_file(root / "moves.jsonl"), halt, marks)
    outcome = await run_builtin_agent(
        model,
        "work",
        cwd=cwd,
        log=root / "lane.log",
        on_call=lambda _scope: None,
        halt=halt,
    )
    assert outcome.stopped, outcome
    assert outcome.calls == 1, outcome
    return time.monotonic() - marks[0]


async def _model_hangs(root: Path, halt_wait: float) -> float:
    halt = anyio.Event()
    marks: list[float] = []
    hanging = ScriptedModel([Move(text="thinking", hang=True)])
    outcome = await run_builtin_agent(
        _HaltInStep(hanging, halt, marks, at_text=True),
        "work",
        cwd=root,
        log=root / "lane.log",
        on_call=lambda _scope: None,
        halt=halt,
        halt_wait=halt_wait,
    )
    assert outcome.stopped, outcome
    assert outcome.calls == 0, outcome
    return time.monotonic() - marks[0]


async def _main(runs: int, call: float, halt_wait: float, seed: int) -> None:
    rng = random.Random(seed)
    to_end: list[float] = []
    after_call: list[float] = []
    between: list[float] = []
    hung: list[float] = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            a, b = await _in_call(Path(tmp), call, rng)
            to_end.append(a)
            after_call.append(b)
        with tempfile.TemporaryDirectory() as tmp:
            between.append(await _between(Path(tmp)))
        with tempfile.TemporaryDirectory() as tmp:
            hung.append(await _model_hangs(Path(tmp), halt_wait))
    print(machine())
    print(f"load average {os.getloadavg()[0]:.1f}; call {call} s; {runs} runs")
    print(summary("stop during the call -> stage returned", to_end))
    print(summary("  the call's end -> stage returned", after_call))
    print(summary("stop between calls -> stage returned", between))
    print(summary(f"stop in a hung model request -> returned ({halt_wait} s)", hung))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--call", type=float, default=0.5, help="the first call's s")
    parser.add_argument("--halt-wait", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        os.environ["TETHER_HOME"] = home
        anyio.run(_main, args.runs, args.call, args.halt_wait, args.seed)


if __name__ == "__main__":
    main()
