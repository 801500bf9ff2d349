"""Runs a plan as `tether run PLAN` does, on a wall clock the test moves through stdin.

`python clocked_run.py PLAN START`: the run's clock reads START until moved. When the
run waits on it, `asleep UNTIL` is printed; each line then read from stdin (a time)
moves the clock there, answered `still asleep at NOW` until it reaches UNTIL, then
`awake`. The run's own lines go
to stdout too (`run <id>` first). Exits with the run's exit code.

A process of its own, so the run's threads and state never touch the test process.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

from tether.runs._entry import run_plan


class StdinClock:
    """A run clock moved by lines on stdin."""

    def __init__(self, now: float) -> None:
        self._now = now

    def now(self) -> float:
        return self._now

    async def sleep_until(self, when: float) -> None:
        print(f"asleep {when!r}", flush=True)
        while self._now < when:
            line = await anyio.to_thread.run_sync(
                sys.stdin.readline, abandon_on_cancel=True
            )
            if not line:
                raise SystemExit("stdin closed while the run waited on its clock")
            self._now = float(line)
            if self._now < when:
                print(f"still asleep at {self._now!r}", flush=True)
        print("awake", flush=True)


async def main() -> int:
    plan, start = Path(sys.argv[1]), float(sys.argv[2])
    code = await run_plan(
        plan,
        say=lambda line: print(line, flush=True),
        handle_sigint=False,
        clock=StdinClock(start),
    )
    return int(code)


if __name__ == "__main__":
    sys.exit(anyio.run(main))
