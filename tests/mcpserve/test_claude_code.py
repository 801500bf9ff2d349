"""`tether mcp serve` with the real Claude Code CLI as its MCP client.

Claude Code (`claude -p`) has tether as its only MCP server and a stub model that calls
tether's tools (tests/mcpserve/_claude.py). Interrupted, Claude Code signals its server
(SIGINT, then SIGTERM, then SIGKILL half a second later) and sends
`notifications/cancelled` for the call in flight: the server stops every running call
at the first signal, so a Bash tree gets its grace window and is ended, a started write
runs to its end, and the ledger says so. Skipped with the install line where `claude`
is not installed, except in CI; benchmarks/mcp_serve_claude.py repeats the
interrupts.
"""

from __future__ import annotations

import signal
import time
from typing import TYPE_CHECKING

import pytest
from tests.mcpserve._claude import Caller, claude_code, ended
from tests.mcpserve._procs import alive, marked, new_mark, sleeps
from tests.mcpserve._steps import STEPS
from tests.runs.presets_support import need_cli
from tests.waiting import wait_until

from tether.runtime._ledger import read_ledger_file
from tether.testing._agent_server import tool_results

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

GRACE = 0.2
"""The served calls' grace window: under Claude Code's half second before SIGKILL."""
STARTED = 60.0
"""Bound on Claude Code's start, its MCP server's start and the first calls."""
STOPPED = "the MCP server got SIGINT", "the MCP client cancelled request"
"""What the ledger may say stopped a call: Claude Code's SIGINT to the server, or its
cancel when that came first."""


def hung_setsid(mark: str) -> str:
    """A shell that ignores SIGTERM, with a `setsid` grandchild in a session of its own."""
    return f"trap '' TERM; setsid sleep {mark} & sleep {mark}; wait"


def test_claude_code_lists_tethers_tools_and_each_call_is_a_tether_call(
    tmp_path: Path,
) -> None:
    """Claude Code sees tether's tools (`mcp__tether__Bash`, ...); a call runs as a
    tether call, kept in the ledger; the account's rules apply (a call they do not
    allow is refused with the reason, and Claude Code's model is told)."""
    need_cli("claude")
    ledger = tmp_path / "ledger.sqlite"
    model = Caller(
        ("Bash", {"command": "echo made by tether"}),
        ("Bash", {"command": "touch refused.txt"}),
    )
    with claude_code(
        tmp_path,
        model,
        ledger=ledger,
        grace=GRACE,
        tools=("builtin:Bash", "builtin:Read"),
        allow=("Bash(echo made by tether)",),
    ) as (claude, server):
        assert claude.wait(timeout=STARTED) == 0, (
            tmp_path / "claude.jsonl"
        ).read_text()
        requests = list(server.requests)
    offered = {t["name"] for r in requests for t in r.get("tools", ())}
    assert {"mcp__tether__Bash", "mcp__tether__Read"} <= offered
    made, refused = [
        r for r in tool_results(requests[-1]) if not r.startswith("ready:")
    ]
    assert "made by tether" in made
    assert "PERMISSION_DENIED: Bash needs permission and no approver is set" in refused
    assert not (tmp_path / "ws" / "refused.txt").exists()
    calls = sorted(read_ledger_file(ledger), key=lambda c: c.requested_at)
    assert [(c.tool, str(c.state)) for c in calls] == [
        ("Bash", "succeeded"),
        ("Bash", "failed"),
    ]
    assert calls[1].started_at is None, calls[1]  # refused: never started


def test_claude_code_interrupted_in_a_hung_bash_leaves_no_process_of_its_tree(
    tmp_path: Path,
) -> None:
    """The shell ignores SIGTERM and has a `setsid` grandchild; Claude Code is
    interrupted while the call hangs: the tree gets its grace window, then no process
    of it is alive, and the ledger says the call was stopped and by what."""
    need_cli("claude")
    ledger = tmp_path / "ledger.sqlite"
    mark = new_mark()
    model = Caller(("Bash", {"command": hung_setsid(mark)}))
    with claude_code(
        tmp_path,
        model,
        ledger=ledger,
        grace=GRACE,
        tools=("builtin:Bash",),
        allow=("Bash",),
    ) as (claude, _):
        wait_until(
            lambda: len(sleeps(marked(mark))) >= 2,
            what="both sleeps of the hung call",
            bound=STARTED,
        )
        tree = marked(mark)
        interrupted = time.monotonic()
        claude.send_signal(signal.SIGINT)
        wait_until(
            lambda: not any(alive(p) for p in tree),
            what="the tree ended",
            bound=GRACE + 10,
            explain=lambda: [p.info["cmdline"] for p in tree if alive(p)],
        )
        gone = time.monotonic() - interrupted
        ended(claude, ledger)
    assert gone >= GRACE * 0.5, "the tree was killed before its grace window"
    assert not marked(mark)
    (call,) = read_ledger_file(ledger)
    assert str(call.state) == "aborted", call
    assert call.abort_reason is not None
    assert call.abort_reason.startswith(STOPPED), call.abort_reason


def test_claude_code_interrupted_in_a_write_leaves_it_whole(tmp_path: Path) -> None:
    """A write in two steps, interrupted between them: the second step still comes
    (a started write runs to its end), and the ledger says the write succeeded."""
    need_cli("claude")
    ledger = tmp_path / "ledger.sqlite"
    model = Caller(("TwoStepWrite", {"path": "out.txt", "seconds": 0.3}))
    out = tmp_path / "ws" / "out.txt"
    with claude_code(
        tmp_path,
        model,
        ledger=ledger,
        grace=GRACE,
        tools=("tests.mcpserve._steps:TwoStepWrite",),
        allow=("TwoStepWrite",),
    ) as (claude, _):
        wait_until(
            lambda: out.with_name("out.txt.started").exists(),
            what="the write's first step",
            bound=STARTED,
        )
        claude.send_signal(signal.SIGINT)
        ended(claude, ledger)
    assert out.read_text() == STEPS
    (call,) = read_ledger_file(ledger)
    assert str(call.state) == "succeeded", call
