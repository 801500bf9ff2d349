"""Turns over ACP: updates, tool calls and their statuses, seen by the SDK's client."""

from __future__ import annotations

from pathlib import Path

import pytest
from acp import text_block
from tests.acp.support import editor, write_script

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
    async with editor(model) as ed:
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
