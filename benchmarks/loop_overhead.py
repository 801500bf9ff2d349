"""The agent loop's own cost per model step, against calling the model directly.

Run: .venv/bin/python benchmarks/loop_overhead.py [--steps N] [--rounds R]

Two pairs, rounds interleaved so that load on the machine hits both sides of a pair:

- `openai:` pair. Both sides talk to the same local OpenAI-compatible server
  (`tether.testing.ModelServer` on 127.0.0.1, in this process) that streams a short
  answer in five chunks with usage. sdk: `AsyncOpenAI.chat.completions.create(stream=True)`
  and reading every chunk. loop: `AgentSession.prompt()` on a fresh session whose turn
  is one model step with the `openai:` model (turn opened and closed, the transcript
  written to the ledger, events delivered to a callback, settling waited for).
- scripted pair, the loop alone without HTTP: direct iterates a `ScriptedModel`'s
  stream; loop runs the same step through `AgentSession.prompt()`.

Each figure is given in wall time and in CPU time of the process (client and server
together, so the same on both sides of a pair); CPU time is what the loop costs, wall
time what a person waits, and CPU time holds better on a loaded machine. The overhead
is the median over rounds of (loop - direct) per step.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
import openai

sys.path.insert(0, str(Path(__file__).parent))
from typing import TYPE_CHECKING

from _common import machine, percentile

from tether import Agent, Runtime
from tether.models import Message, ModelRequest, Move, OpenAIModel, ScriptedModel
from tether.testing import ModelServer, text_reply

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from tether.runtime import AgentEvent

PIECES = ["The ", "answer ", "is ", "forty", "-two."]
Timing = tuple[float, float]
"""Seconds per step: (wall, CPU)."""


async def _timed(steps: int, one: Callable[[], Awaitable[None]]) -> Timing:
    w0, c0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        await one()
    return (
        (time.perf_counter() - w0) / steps,
        (time.process_time() - c0) / steps,
    )


async def _ignore(event: AgentEvent) -> None:
    pass


def _sdk_step(client: openai.AsyncOpenAI) -> Callable[[], Awaitable[None]]:
    async def one() -> None:
        stream = await client.chat.completions.create(
            model="stub",
            messages=[{"role": "user", "content": "question"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        async with stream:
            async for _chunk in stream:
                pass

    return one


def _scripted_step(model: ScriptedModel) -> Callable[[], Awaitable[None]]:
    request = ModelRequest(messages=(Message(role="user", content="question"),))

    async def one() -> None:
        async with model.stream(request) as stream:
            async for _event in stream:
                pass

    return one


def _loop_step(agent: Agent) -> Callable[[], Awaitable[None]]:
    async def one() -> None:
        ended = await agent.session(on_event=_ignore).prompt("question")
        assert ended.stop_reason == "end_turn", ended

    return one


async def measure(steps: int, rounds: int) -> dict[str, list[Timing]]:
    names = ("sdk", "loop (openai)", "scripted", "loop (scripted)")
    out: dict[str, list[Timing]] = {n: [] for n in names}
    total = (rounds + 1) * steps * 2
    move = Move(text="".join(PIECES), chunks=tuple(PIECES))
    async with ModelServer.open() as server:
        server.add(*[text_reply(pieces=PIECES) for _ in range(total)])
        client = openai.AsyncOpenAI(base_url=server.url, api_key="k")
        model = OpenAIModel("stub", base_url=server.url, api_key="k")
        direct = ScriptedModel([move] * total)
        looped = ScriptedModel([move] * total)
        with tempfile.TemporaryDirectory() as ws:
            async with Runtime(workspace=ws, tools=[], guard=False) as rt:
                pairs = [
                    (_sdk_step(client), _loop_step(Agent(rt, model))),
                    (_scripted_step(direct), _loop_step(Agent(rt, looped))),
                ]
                for a, b in pairs:  # warm every path
                    await _timed(steps // 10 or 1, a)
                    await _timed(steps // 10 or 1, b)
                for _ in range(rounds):
                    for index, (a, b) in enumerate(pairs):
                        out[names[2 * index]].append(await _timed(steps, a))
                        out[names[2 * index + 1]].append(await _timed(steps, b))
        await client.close()
        await model.aclose()
    return out


def _ms(values: list[float]) -> str:
    return (
        f"median {statistics.median(values) * 1e3:7.3f} ms, "
        f"p90 {percentile(values, 90) * 1e3:7.3f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    found = anyio.run(measure, args.steps, args.rounds)
    print(machine())
    for name, timings in found.items():
        print(
            f"{name:>16}: wall {_ms([w for w, _ in timings])}; "
            f"cpu {_ms([c for _, c in timings])}  per step"
        )
    for direct, loop in (("sdk", "loop (openai)"), ("scripted", "loop (scripted)")):
        for kind, at in (("wall", 0), ("cpu", 1)):
            added = [
                b[at] - a[at] for a, b in zip(found[direct], found[loop], strict=True)
            ]
            print(f"overhead {loop} over {direct}, {kind}: {_ms(added)} per step")
    print(f"{args.rounds} rounds of {args.steps} steps, pairs interleaved")


if __name__ == "__main__":
    main()
