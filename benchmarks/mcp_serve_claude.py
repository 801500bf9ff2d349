"""`tether mcp serve` with the real Claude Code as its client, interrupted: trials.

Run: .venv/bin/python benchmarks/mcp_serve_claude.py [--trials N] [--scenario S]
     [--grace G] [--write-seconds W]

Each trial starts `claude -p` (stream-json) with tether as its only MCP server
(tests/mcpserve/_claude.py) against a stub model that calls one tether tool, waits until
the call has started, and sends SIGINT to the CLI. `--scenario`:

- `bash`: a hung shell that ignores SIGTERM, with a `sleep` child and a `setsid`
  grandchild. Counted: a process of the tree alive 10 s after the interrupt, a ledger
  row that says neither `aborted` with the reason nor `end_unknown` (where Claude Code's
  SIGKILL cut the server first): a false report; timed: from the interrupt to the whole
  tree gone.
- `write`: a write in two steps (`--write-seconds` apart), interrupted between them.
  Counted: a file left with one step, a ledger row that does not say how the write
  ended (`succeeded` with both steps; `end_unknown` where Claude Code's SIGKILL cut
  the server first); timed: from the interrupt to the second step written.

Also timed: from the interrupt to the CLI's exit and to the server's. The ledger's
reasons are counted: whether Claude Code's SIGINT or its `notifications/cancelled`
reached the server first.
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))
from _common import machine, summary
from tests.mcpserve._claude import Caller, claude_code, served_by
from tests.mcpserve._procs import alive, marked, sleeps
from tests.mcpserve._steps import STEPS
from tests.waiting import wait_until

from tether.runtime._ledger import read_ledger_file

if TYPE_CHECKING:
    from collections.abc import Callable


@dataclass
class Trial:
    gone: float | None
    """Seconds from the interrupt to the tree gone (the write whole); None: never."""
    cli: float
    server: float
    state: str
    reason: str
    left: bool
    """A process of the tree alive, or the write half-done, at the end."""
    false: bool
    """The ledger's row does not say what happened."""


def _until(check: Callable[[], bool], bound: float) -> float | None:
    """Seconds until `check()` holds (None: not within `bound`)."""
    start = time.monotonic()
    while time.monotonic() - start < bound:
        if check():
            return time.monotonic() - start
        time.sleep(0.005)
    return None


def trial(root: Path, scenario: str, grace: float, seconds: float) -> Trial:
    ledger = root / "ledger.sqlite"
    out = root / "ws" / "out.txt"
    mark = f"60.{random.randrange(10**8):08d}"
    if scenario == "bash":
        command = f"trap '' TERM; setsid sleep {mark} & sleep {mark}; wait"
        model = Caller(("Bash", {"command": command}))
        tools, allow = ("builtin:Bash",), ("Bash",)
    else:
        model = Caller(("TwoStepWrite", {"path": "out.txt", "seconds": seconds}))
        tools, allow = ("tests.mcpserve._steps:TwoStepWrite",), ("TwoStepWrite",)
    with claude_code(
        root, model, ledger=ledger, grace=grace, tools=tools, allow=allow
    ) as (claude, _):
        if scenario == "bash":
            wait_until(lambda: len(sleeps(marked(mark))) >= 2, what="tree", bound=90)
            tree = marked(mark)
        else:
            started = out.with_name("out.txt.started")
            wait_until(started.exists, what="the write's first step", bound=90)
        interrupted = time.monotonic()
        claude.send_signal(signal.SIGINT)

        def settled() -> bool:
            if scenario == "bash":
                return not any(alive(p) for p in tree)
            return out.read_text() == STEPS

        bound = 10.0 if scenario == "bash" else seconds + 2
        # Both watched at once: the end of the work, and the CLI's exit.
        gone: float | None = None
        cli: float | None = None
        while time.monotonic() - interrupted < bound and (gone is None or cli is None):
            now = time.monotonic() - interrupted
            if gone is None and settled():
                gone = now
            if cli is None and claude.poll() is not None:
                cli = now
            time.sleep(0.005)
        claude.wait(timeout=30)
        cli = cli if cli is not None else time.monotonic() - interrupted
        _until(lambda: not served_by(ledger), 30.0)
        server = time.monotonic() - interrupted
    (call,) = read_ledger_file(ledger)
    state = str(call.state)
    reason = (call.abort_reason or "").split(" request ")[0]
    if scenario == "bash":
        left = bool(marked(mark))
        # True to what happened: stopped, with who stopped it, or not known to have
        # ended (the server killed before the tree's end was recorded).
        false = not ((state == "aborted" and reason) or state == "end_unknown")
    else:
        left = out.read_text() != STEPS
        # True to what happened: succeeded with both steps, or not known to have ended.
        false = not ((state == "succeeded" and not left) or state == "end_unknown")
    return Trial(gone, cli, server, state, reason, left, false)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--scenario", choices=("bash", "write"), default="bash")
    parser.add_argument("--grace", type=float, default=0.2)
    parser.add_argument("--write-seconds", type=float, default=0.3)
    args = parser.parse_args()
    results = []
    for n in range(args.trials):
        root = Path(tempfile.mkdtemp(prefix="mcp-claude-bench-"))
        found = trial(root, args.scenario, args.grace, args.write_seconds)
        print(n, found, flush=True)
        results.append(found)
    print(machine())
    print(
        f"scenario: {args.scenario}; grace {args.grace} s; write steps "
        f"{args.write_seconds} s apart; load average: {os.getloadavg()}"
    )
    done = [r.gone for r in results if r.gone is not None]
    what = "tree gone" if args.scenario == "bash" else "second step written"
    if done:
        print(summary(f"interrupt -> {what}", done))
    print(f"not within the bound: {len(results) - len(done)}")
    print(summary("interrupt -> claude exited", [r.cli for r in results]))
    print(summary("interrupt -> server exited", [r.server for r in results]))
    left = sum(1 for r in results if r.left)
    print(f"trials leaving a process or a half-done write: {left}")
    print(f"false reports in the ledger: {sum(1 for r in results if r.false)}")
    states = collections.Counter((r.state, r.reason) for r in results)
    for (state, reason), count in states.most_common():
        print(f"  {count} x {state}: {reason or '-'}")


if __name__ == "__main__":
    main()
