"""Record the real CLIs' event streams the renderer's tests read (`streams/`).

Not collected with the suite: run it by hand when a CLI's stream changes,
`.venv/bin/pytest -q -p no:cacheprovider -n 0 tests/runs/record_streams.py`. Each CLI
runs a preset stage against the stub model: a text and a shell call that succeeds, one
that fails, a long call during which the person sets the stop, two calls the hook
refuses, then a model that keeps thinking until tether ends it. The lane log is copied
to `streams/<cli>.log` with the test's own paths and ids as they were.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from tests.waiting import wait_until

from tether.runs._lane_git import lane_dir
from tether.stop import set_stop
from tether.testing._agent_server import Move, tool_results

from .presets_support import (
    WIRE,
    need_cli,
    preset_env,
    serving,
    shell_call,
    write_preset_plan,
)
from .support import make_repo, open_default_store, run_id_of, start

HERE = Path(__file__).parent / "streams"


class _Model:
    def __init__(self, marks: Path) -> None:
        self.marks = marks

    def __call__(self, body: dict[str, Any]) -> Move:
        if not body.get("tools"):
            return Move(text="A title")
        done = len(tool_results(body))
        m = self.marks
        steps = [
            Move(
                text="Looking at the tree first.",
                calls=(shell_call(body, "echo hello; ls"),),
            ),
            Move(calls=(shell_call(body, "cat no-such-file"),)),
            Move(
                text="Now the work.",
                calls=(
                    shell_call(
                        body, f"touch {m}/started; sleep 2; echo work > work.txt"
                    ),
                ),
            ),
            Move(calls=(shell_call(body, "echo later-1"),)),
            Move(calls=(shell_call(body, "echo later-2"),)),
        ]
        if done < len(steps):
            return steps[done]
        return Move(text="still thinking", think=60.0)


@pytest.mark.parametrize("preset", ["claude", "codex"])
def test_record(tmp_path: Path, preset: str) -> None:
    need_cli(preset)
    marks = tmp_path / "marks"
    marks.mkdir()
    repo = make_repo(tmp_path)
    plan = write_preset_plan(tmp_path, repo, preset, stop_wait=3.0)
    with serving(WIRE[preset], _Model(marks)) as server:
        env = preset_env(preset, server, tmp_path / "home")
        env["TETHER_WRITABLE"] = str(marks)
        proc = start("run", str(plan), env=env)
        run = run_id_of(proc)
        wait_until(lambda: (marks / "started").exists(), what="the long call", bound=90)
        set_stop("recording")
        proc.wait(timeout=120)
    (receipt,) = open_default_store().receipts(run)
    log = lane_dir(run, receipt.lane).parent / f"{receipt.lane}.log"
    HERE.mkdir(exist_ok=True)
    shutil.copyfile(log, HERE / f"{preset}.log")
