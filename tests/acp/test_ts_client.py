"""ACP v1's session methods through the official TypeScript client: `ts_client.mjs`
drives `tether acp` with `@agentclientprotocol/sdk` (pinned with the Node.js it runs on
in tests/conformance/package.json; `npm ci --prefix tests/conformance` installs both, as
`.ci/run` does) and prints what it saw, which these tests judge. One run of it serves
them all: `initialize`, a prompt with a Bash call, `session/load` of that session on the
same connection and of one never prompted, `session/list`, `session/resume`,
`session/close`, `session/delete` (of an unknown id too), `session/close` during a Bash
call that ignores SIGTERM, then a second `tether acp` on the same account that lists
and resumes (spec 04)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.acp.support import alive, write_script
from tests.machine import NODE_INSTALL, NODE_PACKAGES, missing, node

pytestmark = pytest.mark.slow

CLIENT = Path(__file__).with_name("ts_client.mjs")
SDK = NODE_PACKAGES / "node_modules" / "@agentclientprotocol" / "sdk"
SDK_VERSION = "2.4.0"


def _bash(marker: str) -> str:
    """The Bash call's command: in a folder holding `hold`, a shell that ignores SIGTERM
    with a child and a grandchild that left its session (which prints `started`), each
    with `marker` in its command line; elsewhere it prints `quick` and ends."""
    return (
        "[ -e hold ] || { echo quick; exit 0; }; trap '' TERM; "
        f"sleep {marker} & setsid sh -c 'echo started; exec sleep {marker}' & wait"
    )


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Run the TypeScript client once; each step it took, by name."""
    node_path = node("the ACP TypeScript client")
    manifest = SDK / "package.json"
    if not manifest.exists():
        missing("the ACP TypeScript client", f"it is not installed ({NODE_INSTALL})")
    assert json.loads(manifest.read_text())["version"] == SDK_VERSION
    root = tmp_path_factory.mktemp("ts")
    quick, hold = root / "quick", root / "hold"
    for folder in (quick, hold):
        folder.mkdir()
    (hold / "hold").touch()
    marker = f"33{os.getpid() % 10**6}.5"
    call = {"id": "c1", "name": "Bash", "input": {"command": _bash(marker)}}
    model = write_script(
        root / "moves.jsonl",
        [{"text": "", "tool_calls": [call]}, {"text": "Ran it."}],
    )
    plan = {
        "packages": str(NODE_PACKAGES),
        "agent": [sys.executable, "-m", "tether", "acp", "--model", model],
        "quick": str(quick),
        "hold": str(hold),
        "marker": marker,
    }
    env = {
        "TETHER_HOME": str(tmp_path_factory.mktemp("home")),
        "TETHER_GRACE": "0.5",
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    done = subprocess.run(
        [node_path, str(CLIENT), json.dumps(plan)],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    said = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    steps = {s["step"]: s for s in said}
    assert done.returncode == 0, done.stdout + done.stderr
    assert "done" in steps, done.stdout + done.stderr
    assert alive(marker) == []
    steps["plan"] = plan
    return steps


def _kinds(step: dict[str, Any]) -> list[str]:
    return [u["kind"] for u in step["beforeAnswer"]]


def test_every_session_method_answers_the_typescript_client(
    seen: dict[str, dict[str, Any]],
) -> None:
    """The SDK speaks v1 and tether advertises load, list, resume, close and delete;
    a load replays the session (its tool call too) before it answers, on the
    connection that opened it; one never prompted loads with nothing replayed; resume
    sends nothing; a closed then deleted session leaves the list; deleting an unknown
    id answers success."""
    ready = seen["initialize"]["result"]
    assert seen["new"]["sdkProtocolVersion"] == ready["protocolVersion"] == 1
    caps = ready["agentCapabilities"]
    assert caps["loadSession"] is True
    assert caps["sessionCapabilities"] == {
        "list": {},
        "resume": {},
        "close": {},
        "delete": {},
    }
    prompted = seen["new"]["sessionId"]
    prompt = seen["prompt"]
    assert prompt["result"] == {"stopReason": "end_turn"}
    [call] = [u for u in prompt["beforeAnswer"] if u["kind"] == "tool_call"]
    assert prompt["permissions"] == [call["toolCallId"]]
    statuses = [u["status"] for u in prompt["beforeAnswer"] if "status" in u]
    assert statuses == ["pending", "in_progress", "completed"]
    load = seen["load prompted"]
    assert "error" not in load
    replayed = load["beforeAnswer"]
    assert {u["sessionId"] for u in replayed} == {prompted}
    assert [u.get("text") for u in replayed if u["kind"].endswith("message_chunk")] == [
        "run it",
        "Ran it.",
    ]
    assert "tool_call" in _kinds(load)
    assert any("quick" in u.get("output", "") for u in replayed)
    quiet = seen["load unprompted"]
    assert "error" not in quiet
    assert _kinds(quiet) == []
    listed = [s["sessionId"] for s in seen["list"]["result"]["sessions"]]
    assert prompted in listed
    assert len(listed) == 2
    [quiet_id] = set(listed) - {prompted}
    assert "error" not in seen["resume"]
    assert _kinds(seen["resume"]) == []
    assert seen["close"]["result"] == {}
    assert seen["delete"]["result"] == {}
    after = [s["sessionId"] for s in seen["list after delete"]["result"]["sessions"]]
    assert quiet_id not in after
    assert prompted in after
    assert seen["delete unknown"]["result"] == {}


@pytest.mark.rule("acp-cancel")
def test_close_during_bash_answers_once_the_process_tree_is_gone(
    seen: dict[str, dict[str, Any]],
) -> None:
    """`session/close` while a Bash call's shell ignores SIGTERM: the prompt answers
    `cancelled`, then the close answers, and by then no process of the call's tree
    (the shell, its child, its grandchild in a session of its own) is alive."""
    closed = seen["close during bash"]
    assert closed["order"] == ["prompt cancelled", "close"]
    # The shell, its child and its grandchild (each may not have exec'd yet: its
    # command line is then its parent's, which holds the marker too).
    assert len(closed["aliveBefore"]) >= 3, closed["aliveBefore"]
    assert closed["aliveAtAnswer"] == []
    [final] = [u for u in closed["updates"] if u.get("status") == "failed"]
    assert final["code"] == "TOOL_ABORTED"


def test_a_restarted_agent_lists_and_resumes_the_sessions(
    seen: dict[str, dict[str, Any]],
) -> None:
    """A second `tether acp` on the same account lists the sessions the first one
    kept (the closed one too, latest first; the deleted one not) and resumes one with
    nothing sent."""
    listed = seen["list after restart"]["result"]["sessions"]
    closed = seen["close during bash"]["sessionId"]
    prompted = seen["new"]["sessionId"]
    assert [s["sessionId"] for s in listed] == [closed, prompted]
    assert [s["cwd"] for s in listed] == [seen["plan"]["hold"], seen["plan"]["quick"]]
    resumed = seen["resume after restart"]
    assert "error" not in resumed
    assert _kinds(resumed) == []
