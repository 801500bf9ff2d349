"""The agent loop's own cost per model step, against calling the `openai` SDK directly.

Run: .venv/bin/python benchmarks/loop_overhead.py [--steps N] [--rounds R]

Both sides talk to the same local OpenAI-compatible server (`tether.testing.ModelServer`,
127.0.0.1) that streams a short text answer in five chunks with usage. Rounds interleave:

- sdk: `AsyncOpenAI.chat.completions.create(stream=True)` and reading every chunk;
- loop: `AgentSession.prompt()` on a fresh session whose turn is one model step with the
  `openai:` model (turn opened and closed, transcript written to the in-memory ledger,
  events delivered to a callback, the turn's settling waited for).

The figure is the difference of the medians per step: what tether adds to one model step.
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
from _common import machine, percentile

from tether import Agent, Runtime
from tether.models import OpenAIModel
from tether.runtime import AgentEvent
from tether.testing import ModelServer, text_reply

PIECES = ["The ", "answer ", "is ", "forty", "-two."]


async def _sdk(client: openai.AsyncOpenAI, steps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(steps):
        stream = await client.chat.completions.create(
            model="stub",
            messages=[{"role": "user", "content": "question"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        async with stream:
            async for _chunk in stream:
                pass
    return (time.perf_counter() - t0) / steps


async def _loop(agent: Agent, steps: int) -> float:
    async def ignore(event: AgentEvent) -> None:
        pass

    t0 = time.perf_counter()
    for _ in range(steps):
        ended = await agent.session(on_event=ignore).prompt("question")
        assert ended.stop_reason == "end_turn", ended
    return (time.perf_counter() - t0) / steps


async def measure(steps: int, rounds: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"sdk": [], "loop": []}
    total = (rounds + 1) * steps * 2
    async with ModelServer.open() as server:
        server.add(*[text_reply(pieces=PIECES) for _ in range(total)])
        client = openai.AsyncOpenAI(base_url=server.url, api_key="k")
        model = OpenAIModel("stub", base_url=server.url, api_key="k")
        with tempfile.TemporaryDirectory() as ws:
            async with Runtime(workspace=ws, tools=[], guard=False) as rt:
                agent = Agent(rt, model)
                await _sdk(client, steps)  # warm both paths
                await _loop(agent, steps)
                for _ in range(rounds):
                    out["sdk"].append(await _sdk(client, steps))
                    out["loop"].append(await _loop(agent, steps))
        await client.close()
        await model.aclose()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    found = anyio.run(measure, args.steps, args.rounds)
    print(machine())
    for name, per_step in found.items():
        print(
            f"{name:>4}: median {statistics.median(per_step) * 1e3:7.3f} ms/step, "
            f"p90 {percentile(per_step, 90) * 1e3:7.3f} ms"
        )
    added = [loop - sdk for loop, sdk in zip(found["loop"], found["sdk"], strict=True)]
    print(
        f"loop overhead per step: median {statistics.median(added) * 1e3:.3f} ms, "
        f"p90 {percentile(added, 90) * 1e3:.3f} ms "
        f"({args.rounds} rounds of {args.steps} steps, interleaved)"
    )


if __name__ == "__main__":
    main()
