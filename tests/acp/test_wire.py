"""The ACP connection's error boundary, seen by the SDK's client over real pipes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from acp import PROTOCOL_VERSION
from tests.acp.support import editor, write_script

pytestmark = pytest.mark.anyio


def _errors(frames: list[dict[str, Any]]) -> list[tuple[Any, int]]:
    return [(f.get("id"), f["error"]["code"]) for f in frames if "error" in f]


@pytest.mark.rule("acp-errors")
async def test_malformed_lines_get_parse_errors_and_the_server_keeps_serving(
    tmp_path: Path,
) -> None:
    """A line that is not JSON gets -32700, one that is not a JSON-RPC message -32600,
    an unknown method -32601 with its id; an unknown notification gets nothing; and the
    same connection still answers (spec 04)."""
    model = write_script(tmp_path / "script.jsonl", [{"text": "hi"}])
    async with editor(model) as ed:
        first = await ed.conn.initialize(protocol_version=PROTOCOL_VERSION)
        frames = ed.recorder.frames
        await ed.write_raw(b"{this is not json\n")
        await ed.write_raw(b"\xff\xfe\n")
        await ed.write_raw(b"[1, 2, 3]\n")
        await ed.write_raw(b'{"jsonrpc": "2.0", "id": 5}\n')
        await ed.write_raw(b'{"id": 6, "method": "initialize", "params": {}}\n')
        await ed.write_raw(b'{"jsonrpc": "2.0", "method": "no/such/note"}\n')
        await ed.write_raw(b'{"jsonrpc": "2.0", "id": 7, "method": "no/such"}\n')
        await ed.recorder.wait_for(lambda: (7, -32601) in _errors(frames))
        assert _errors(frames) == [
            (None, -32700),
            (None, -32700),
            (None, -32600),
            (5, -32600),
            (6, -32600),
            (7, -32601),
        ]
        again = await ed.conn.initialize(protocol_version=PROTOCOL_VERSION)
        assert again == first
        assert ed.process.returncode is None


@pytest.mark.rule("acp-errors")
async def test_bad_parameters_and_unknown_sessions_are_answered_not_fatal(
    tmp_path: Path,
) -> None:
    """A request whose parameters do not fit gets -32602, a prompt for a session that
    does not exist a clear error, and the server keeps serving (spec 04)."""
    model = write_script(tmp_path / "script.jsonl", [{"text": "hi"}])
    async with editor(model) as ed:
        frames = ed.recorder.frames
        await ed.write_raw(
            b'{"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": 3}}\n'
        )
        await ed.write_raw(
            b'{"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": '
            b'{"sessionId": "nope", "prompt": [{"type": "text", "text": "x"}]}}\n'
        )
        await ed.write_raw(
            b'{"jsonrpc": "2.0", "id": 3, "method": "session/new", "params": '
            b'{"cwd": "relative/dir", "mcpServers": []}}\n'
        )
        await ed.recorder.wait_for(lambda: len(_errors(frames)) == 3)
        assert sorted(_errors(frames)) == [(1, -32602), (2, -32602), (3, -32602)]
        by_id = {f["id"]: f["error"] for f in frames if "error" in f}
        assert "no session nope" in by_id[2]["data"]["details"]
        assert "absolute" in by_id[3]["data"]["details"]
        response = await ed.conn.initialize(protocol_version=PROTOCOL_VERSION)
        assert response.agent_capabilities is not None
        assert response.agent_capabilities.load_session is True
