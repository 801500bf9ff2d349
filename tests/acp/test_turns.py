"""Turns over ACP: updates, tool calls and their statuses, seen by the SDK's client."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from acp import PROTOCOL_VERSION, text_block
from tests.acp.support import embedded, write_script

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio


async def test_a_prompt_runs_tools_and_streams_every_status(
    tmp_path: Path, workspace: Path
) -> None:
    """A prompt whose model reads a file and runs a command: the text streams as
    message chunks, each call goes pending -> in_progress -> completed with its kind,
    title and output, and the answer is `end_turn` (spec 04)."""
    (workspace / "a.txt").write_text("hello from a\n", encoding="utf-8")
    model = write_script(
        tmp_path / "script.jsonl",
        [
            {
                "text": "Looking.",
                "tool_calls": [
                    {"id": "m1", "name": "Read", "input": {"file_path": "a.txt"}},
                    {"id": "m2", "name": "Bash", "input": {"command": "echo hi"}},
                ],
            },
            {"text": "Done.", "chunks": ["Do", "ne."]},
        ],
    )
    async with embedded(model) as ed:
        sid = await ed.open_session(workspace)
        response = await ed.conn.prompt(session_id=sid, prompt=[text_block("go")])
        assert response.stop_reason == "end_turn"
        rec = ed.recorder
        assert rec.text() == "Looking.Done."
        starts = {u.title: u for _, u in rec.updates if u.session_update == "tool_call"}
        read, bash = starts["Read: a.txt"], starts["Bash: echo hi"]
        assert (read.kind, bash.kind) == ("read", "execute")
        assert read.locations[0].path == str(workspace / "a.txt")
        for call in (read, bash):
            assert rec.statuses(call.tool_call_id) == [
                "pending",
                "in_progress",
                "completed",
            ]
        last = rec.tool_updates(bash.tool_call_id)[-1]
        assert "hi" in last.content[0].content.text
        assert last.raw_output["output"].strip().endswith("hi")
        # Bash asks first (PROCESS calls ask by default); Read does not.
        assert [r.tool_call_id for r in rec.permission_requests] == [bash.tool_call_id]


async def test_session_load_replays_the_transcript_from_the_ledger(
    tmp_path: Path, workspace: Path
) -> None:
    """A session closed with its editor is loaded by a new `tether acp`: the user's
    prompt, the agent's text and each tool call with its final status and result are
    replayed as updates, titled as they were live, and the session goes on (spec 04)."""
    name = "a-file-whose-name-is-longer-than-a-title-keeps-" + "x" * 40 + ".txt"
    (workspace / name).write_text("alpha\n", encoding="utf-8")
    model = write_script(
        tmp_path / "script.jsonl",
        [
            {
                "text": "Reading.",
                "tool_calls": [
                    {"id": "m1", "name": "Read", "input": {"file_path": name}}
                ],
            },
            {"text": "It says alpha."},
        ],
    )
    later = write_script(tmp_path / "later.jsonl", [{"text": "Still here."}])
    async with embedded(model) as ed:
        sid = await ed.open_session(workspace)
        await ed.conn.prompt(session_id=sid, prompt=[text_block("read a.txt")])
        live = [
            (u.session_update, getattr(u, "status", None))
            for _, u in ed.recorder.updates
        ]
        (live_title,) = [
            u.title for _, u in ed.recorder.updates if u.session_update == "tool_call"
        ]
    async with embedded(later) as ed:
        await ed.conn.initialize(protocol_version=PROTOCOL_VERSION)
        await ed.conn.load_session(cwd=str(workspace), session_id=sid, mcp_servers=[])
        replayed = ed.recorder.updates
        assert {s for s, _ in replayed} == {sid}
        kinds = [u.session_update for _, u in replayed]
        assert kinds == [
            "user_message_chunk",
            "agent_message_chunk",
            "tool_call",
            "tool_call_update",
            "agent_message_chunk",
        ]
        assert replayed[0][1].content.text == "read a.txt"
        assert ed.recorder.text() == "Reading.It says alpha."
        start, end = replayed[2][1], replayed[3][1]
        assert (start.title, start.kind) == (live_title, "read")
        assert start.title == f"Read: {name[:79]}…"
        assert end.status == "completed"
        assert "alpha" in end.content[0].content.text
        assert ("tool_call_update", "completed") in live
        again = await ed.conn.prompt(session_id=sid, prompt=[text_block("more")])
        assert again.stop_reason == "end_turn"
        assert ed.recorder.text().endswith("Still here.")


async def test_a_rejected_call_ends_permission_denied_and_the_turn_goes_on(
    tmp_path: Path, workspace: Path
) -> None:
    """The editor's *Reject* ends the call `PERMISSION_DENIED` without running it; the
    model is told and the turn ends normally (a refusal, not a stop)."""
    model = write_script(
        tmp_path / "script.jsonl",
        [
            {
                "tool_calls": [
                    {
                        "id": "m1",
                        "name": "Write",
                        "input": {"file_path": "w.txt", "content": "no"},
                    }
                ]
            },
            {"text": "Understood."},
        ],
    )

    async def reject(_: object) -> str:
        return "reject_once"

    async with embedded(model, answer=reject) as ed:
        sid = await ed.open_session(workspace)
        response = await ed.conn.prompt(session_id=sid, prompt=[text_block("go")])
        assert response.stop_reason == "end_turn"
        [start] = [u for _, u in ed.recorder.updates if u.session_update == "tool_call"]
        assert start.kind == "edit"
        assert ed.recorder.statuses(start.tool_call_id) == ["pending", "failed"]
        final = ed.recorder.tool_updates(start.tool_call_id)[-1]
        assert final.raw_output["code"] == "PERMISSION_DENIED"
        assert ed.recorder.text() == "Understood."
    assert not (workspace / "w.txt").exists()
