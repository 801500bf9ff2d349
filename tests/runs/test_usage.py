"""Usage windows: a model at 95 % of its window, or a command-line agent that says it
hit a usage limit, makes its lane wait for the reset and go on at it; a wait, not a
stop (nothing is released). Tested on a run clock the test moves by hand."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import anyio
import anyio.abc
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from tether.testing import ModelServer, text_reply

from .support import git, make_repo, open_default_store

pytestmark = pytest.mark.slow


CLOCKED_RUN = Path(__file__).with_name("clocked_run.py")

LIMITED_ONCE = (
    'if [ ! -e "$MARKS/limited" ]; then touch "$MARKS/limited"; '
    'echo "usage limit reached; resets at $RESET"; exit 1; fi; '
    "echo done > done.txt; git add done.txt; "
    "git -c user.email=a@b -c user.name=agent commit -qm done"
)


class _Lines:
    """Lines of a process's stdout, read without blocking the event loop."""

    def __init__(self, proc: anyio.abc.Process) -> None:
        assert proc.stdout is not None
        self._stream = BufferedByteReceiveStream(proc.stdout)

    async def next(self) -> str:
        line = await self._stream.receive_until(b"\n", 1 << 16)
        return line.decode().strip()


async def run_through_the_wait(
    plan: Path, *, start: float, reset: float, env: dict[str, str]
) -> str:
    """Run `plan` on a clock at `start`; once the run waits on it, check the wait ends
    exactly at `reset` with the lane's claim kept throughout; the run must end 0.

    Returns the run's id.
    """
    with anyio.fail_after(60):
        async with await anyio.open_process(
            [sys.executable, str(CLOCKED_RUN), str(plan), repr(start)],
            env={**os.environ, **env},
            stderr=None,
        ) as proc:
            assert proc.stdin is not None
            lines = _Lines(proc)
            run = (await lines.next()).split()[1]
            while not (line := await lines.next()).startswith("asleep "):
                pass
            assert float(line.split()[1]) == reset
            store = open_default_store()
            kinds = [e.kind for e in store.events(run)]
            assert kinds.count("stage-start") == 1
            assert "usage-wait" in kinds
            assert "released" not in kinds
            assert [c.item for c in store.claims(run)] == ["one"]
            (lane,) = store.lanes(run)
            assert "waiting for the usage window (resets at " in (lane.note or "")
            await proc.stdin.send(f"{reset - 0.1!r}\n".encode())
            assert await lines.next() == f"still asleep at {reset - 0.1!r}"
            assert [e.kind for e in store.events(run)].count("stage-start") == 1
            assert [c.item for c in store.claims(run)] == ["one"]
            await proc.stdin.send(f"{reset!r}\n".encode())
            assert await lines.next() == "awake"
            assert await proc.wait() == 0
    kinds = [e.kind for e in store.events(run)]
    assert kinds.count("stage-start") == 2
    resumed = kinds.index("usage-resumed")
    assert kinds.index("usage-wait") < resumed < kinds.index("stage-start", resumed)
    assert "released" not in kinds[:resumed]
    return run


@pytest.mark.rule("usage-window")
@pytest.mark.anyio
async def test_a_usage_limit_makes_the_lane_wait_for_the_reset_and_go_on(
    tmp_path: Path,
) -> None:
    """The agent's first call exits naming a reset 30 s ahead: the lane waits (shown in
    its note and the ledger) holding its claim, runs the same stage again at the reset,
    and the run ends 0."""
    repo = make_repo(tmp_path)
    marks = tmp_path / "marks"
    marks.mkdir()
    plan = tmp_path / "plan.toml"
    plan.write_text(
        f'repo = "{repo}"\npoll = 0.1\n\n[[stage]]\nname = "work"\n'
        f"agent = ['sh', '-c', '''{LIMITED_ONCE}''']\n"
        "usage_limit = 'usage limit reached; resets at (?P<reset>\\d+)'\n\n"
        '[[item]]\nid = "one"\nbrief = "b"\n',
        encoding="utf-8",
    )
    start = float(int(time.time()))
    # The agent keeps its mark outside its lane: the run declares that folder (S15).
    env = {
        "MARKS": str(marks),
        "TETHER_WRITABLE": str(marks),
        "RESET": str(int(start) + 30),
    }
    run = await run_through_the_wait(plan, start=start, reset=start + 30, env=env)
    store = open_default_store()
    assert [r.exit_status for r in store.receipts(run)] == [1, 0]
    assert git(repo, "show", "tether/one:done.txt") == "done"


@pytest.mark.rule("usage-window")
@pytest.mark.anyio
async def test_a_model_at_95_percent_of_its_window_waits_for_the_reset(
    tmp_path: Path,
) -> None:
    """A local OpenAI-compatible server answers the first builtin stage with headers
    saying 96 % of the request window is used, resetting in 30 s: the second stage on
    that model is not started before the reset (the lane waits, its claim kept, nothing
    released), and it starts, and the run ends 0, once the run's clock reaches it."""
    repo = make_repo(tmp_path)
    headers = [
        ("x-ratelimit-limit-requests", "100"),
        ("x-ratelimit-remaining-requests", "4"),
        ("x-ratelimit-reset-requests", "30s"),
    ]
    plan = tmp_path / "plan.toml"
    plan.write_text(
        f'repo = "{repo}"\npoll = 0.1\n\n'
        '[[stage]]\nname = "first"\nagent = "builtin"\nmodel = "openai:m"\n\n'
        '[[stage]]\nname = "second"\nagent = "builtin"\nmodel = "openai:m"\n\n'
        '[[item]]\nid = "one"\nbrief = "b"\n',
        encoding="utf-8",
    )
    start = float(int(time.time()))
    async with ModelServer.open(
        [text_reply("first done", headers=headers), text_reply("second done")]
    ) as server:
        env = {"TETHER_MODEL_URL": server.url, "TETHER_MODEL_KEY": "t"}
        run = await run_through_the_wait(plan, start=start, reset=start + 30, env=env)
    store = open_default_store()
    assert [r.exit_status for r in store.receipts(run)] == [0, 0]
