"""The ACP connection's error boundary, seen by the SDK's client over real pipes."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from acp import PROTOCOL_VERSION
from tests.acp.support import editor, write_script

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


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


@pytest.mark.parametrize("version", [1, 0, 7])
async def test_the_early_initialize_answer_is_the_servers_answer(version: int) -> None:
    """`tether acp` answers its first `initialize` before loading the SDK: that answer
    is exactly `AcpServer.initialize`'s, and the version is the installed one."""
    import importlib.metadata

    import acp

    from tether.acp import AcpServer
    from tether.acp._early import PROTOCOL_VERSION, _early_answer, agent_version

    assert PROTOCOL_VERSION == acp.PROTOCOL_VERSION
    assert agent_version() == importlib.metadata.version("tether")
    line = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "initialize",
            "params": {
                "protocolVersion": version,
                "clientCapabilities": {"elicitation": {"form": {}}},
            },
        }
    ).encode()
    answered = _early_answer(line)
    assert answered is not None
    early, capabilities = answered
    assert capabilities == {"elicitation": {"form": {}}}  # for the server to keep
    # As the SDK's connection writes a result on the wire.
    async with anyio.create_task_group() as tg:
        server = AcpServer(model=None, task_group=tg)
        sdk = await server.initialize(protocol_version=version)
    assert json.loads(early) == {
        "jsonrpc": "2.0",
        "id": 3,
        "result": sdk.model_dump(
            mode="json", by_alias=True, exclude_none=True, exclude_unset=True
        ),
    }


@pytest.mark.parametrize(
    "params",
    [{}, {"protocolVersion": "1"}, {"protocolVersion": 1, "clientInfo": 3}, None],
)
def test_a_first_line_the_early_answer_does_not_check_goes_to_the_server(
    params: object,
) -> None:
    """Parameters the early answer does not check are left to the server (which
    answers them as the SDK does); so is anything but an `initialize` request."""
    from tether.acp._early import _early_answer

    frame = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}
    assert _early_answer(json.dumps(frame).encode()) is None
    assert _early_answer(b"not json") is None
    assert (
        _early_answer(json.dumps({**frame, "method": "session/new"}).encode()) is None
    )


@pytest.mark.rule("acp-errors")
async def test_a_malformed_first_line_is_answered_by_the_server(tmp_path: Path) -> None:
    """The first line read before the SDK is loaded, when it is no `initialize`, is
    answered by the server as any line is (-32700 here); `initialize` comes after."""
    model = write_script(tmp_path / "script.jsonl", [{"text": "hi"}])
    async with editor(model) as ed:
        await ed.write_raw(b"{this is not json\n")
        await ed.recorder.wait_for(lambda: bool(_errors(ed.recorder.frames)))
        assert _errors(ed.recorder.frames) == [(None, -32700)]
        ready = await ed.conn.initialize(protocol_version=PROTOCOL_VERSION)
        assert ready.agent_info is not None
        assert ready.agent_info.name == "tether"
