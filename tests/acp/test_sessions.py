"""Sessions over ACP: the MCP servers `session/new` names, and what is refused at start."""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path

import pytest
from acp import PROTOCOL_VERSION, RequestError, text_block
from acp.schema import EnvVariable, McpServerStdio, SseMcpServer
from tests.acp.support import details, editor, embedded, write_script

from tether.runtime import default_system
from tether.testing import ModelServer, text_reply

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TIME_SERVER = Path(sys.executable).with_name("mcp-server-time")


def _time_server(name: str = "time", command: Path = TIME_SERVER) -> McpServerStdio:
    return McpServerStdio(
        name=name,
        command=str(command),
        args=["--local-timezone", "Etc/UTC"],
        env=[EnvVariable(name="TZ", value="UTC")],
    )


async def test_the_mcp_servers_of_session_new_are_the_sessions_tools(
    tmp_path: Path, workspace: Path
) -> None:
    """A stdio MCP server named in `session/new` is started for the session; its tool
    runs after the editor allows it always, and the second call is not asked again."""
    call = {"name": "mcp__time__get_current_time", "input": {"timezone": "Asia/Tokyo"}}
    model = write_script(
        tmp_path / "script.jsonl",
        [
            {"text": "", "tool_calls": [{"id": "m1", **call}]},
            {"text": "", "tool_calls": [{"id": "m2", **call}]},
            {"text": "It is late in Tokyo."},
        ],
    )

    async def always(_: object) -> str:
        return "allow_always"

    async with embedded(model, answer=always) as ed:
        sid = await ed.open_session(workspace, [_time_server()])
        response = await ed.conn.prompt(session_id=sid, prompt=[text_block("time?")])
        assert response.stop_reason == "end_turn"
        ends = [
            u
            for _, u in ed.recorder.updates
            if u.session_update == "tool_call_update" and u.status == "completed"
        ]
        assert len(ends) == 2
        data = json.loads(ends[0].raw_output["output"])
        assert data["datetime"].endswith("+09:00")
        assert len(ed.recorder.permission_requests) == 1


async def test_mcp_servers_tether_cannot_start_are_refused_at_session_new(
    tmp_path: Path, workspace: Path
) -> None:
    """A server whose command does not exist, or one over SSE, makes `session/new` fail
    with a message naming it and saying what to do; the connection keeps serving."""
    model = write_script(tmp_path / "script.jsonl", [{"text": "hi"}])
    async with embedded(model) as ed:
        await ed.conn.initialize(protocol_version=PROTOCOL_VERSION)
        missing = _time_server("gone", tmp_path / "no-such-server")
        with pytest.raises(RequestError) as broken:
            await ed.conn.new_session(cwd=str(workspace), mcp_servers=[missing])
        assert broken.value.code == -32602
        assert "'gone'" in details(broken.value)
        sse = SseMcpServer(
            type="sse", name="old", url="http://127.0.0.1:9/sse", headers=[]
        )
        with pytest.raises(RequestError) as refused:
            await ed.conn.new_session(cwd=str(workspace), mcp_servers=[sse])
        assert "streamable HTTP" in details(refused.value)
        sid = (await ed.conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
        response = await ed.conn.prompt(session_id=sid, prompt=[text_block("hi")])
        assert response.stop_reason == "end_turn"


@pytest.mark.parametrize(
    ("model", "env", "says"),
    [
        (None, {}, "no model configured for tether: set name in the [model] table"),
        ("openai:gpt-4.1-mini", {}, "no model endpoint: set TETHER_MODEL_URL"),
        (
            "openai:gpt-4.1-mini",
            {"TETHER_MODEL_URL": "http://127.0.0.1:9/v1"},
            "no key for the model endpoint http://127.0.0.1:9/v1: set TETHER_MODEL_KEY",
        ),
    ],
    ids=["no-model", "no-endpoint", "no-key"],
)
async def test_tether_acp_without_a_usable_model_answers_and_says_how_to_configure_one(
    workspace: Path, model: str | None, env: dict[str, str], says: str
) -> None:
    """With no model configured (or no endpoint, or no key), `tether acp` answers
    `initialize`; `session/new` and `session/prompt` get a JSON-RPC error whose message
    says how to configure a model, and the agent keeps serving."""
    async with editor(model, env=env) as ed:
        ready = await ed.conn.initialize(protocol_version=PROTOCOL_VERSION)
        assert ready.protocol_version == PROTOCOL_VERSION
        for _ in range(2):
            with pytest.raises(RequestError) as refused:
                await ed.conn.new_session(cwd=str(workspace), mcp_servers=[])
            assert refused.value.code == -32603
            assert says in str(refused.value)
            assert refused.value.data == {"details": str(refused.value)}
        with pytest.raises(RequestError) as prompted:
            await ed.conn.prompt(session_id="session_x", prompt=[text_block("hi")])
        assert says in str(prompted.value)
        again = await ed.conn.initialize(protocol_version=PROTOCOL_VERSION)
        assert again.protocol_version == PROTOCOL_VERSION
        assert ed.process.returncode is None


async def test_the_editor_is_told_when_a_configured_mcp_server_does_not_start(
    tmp_path: Path, workspace: Path, tether_home: Path
) -> None:
    """An MCP server of the account's config that cannot start does not refuse the
    session; the editor is told as an agent message, sent after the `session/new`
    answer (so the editor knows the session), and the session works."""
    config = tether_home / "config" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    missing = json.dumps(str(tmp_path / "no-such-server"))
    config.write_text(f"[mcpServers.gone]\ncommand = {missing}\n", encoding="utf-8")
    model = write_script(tmp_path / "script.jsonl", [{"text": "hi"}])
    async with editor(model) as ed:
        sid = await ed.open_session(workspace)
        frames = ed.recorder.frames

        def told() -> bool:
            return "note: MCP server 'gone'" in ed.recorder.text()

        await ed.recorder.wait_for(told)
        answer = next(
            n
            for n, f in enumerate(frames)
            if f.get("result", {}).get("sessionId") == sid
        )
        note = next(
            n
            for n, f in enumerate(frames)
            if f.get("method") == "session/update"
            and "MCP server 'gone'" in json.dumps(f)
        )
        assert answer < note
        assert frames[note]["params"]["sessionId"] == sid
        response = await ed.conn.prompt(session_id=sid, prompt=[text_block("hi")])
        assert response.stop_reason == "end_turn"
        assert ed.recorder.text().endswith("hi")


@pytest.mark.parametrize("source", ["default", "config"])
async def test_a_sessions_requests_carry_the_system_message(
    source: str, workspace: Path, tether_home: Path
) -> None:
    """Requests carry a system message: an ACP session's names its `cwd`
    and the date, or is `system` of the config's `[model]` table."""
    if source == "config":
        config = tether_home / "config" / "config.toml"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text('[model]\nsystem = "Be brief."\n', encoding="utf-8")
    async with (
        ModelServer.open([text_reply("Fine.")]) as model,
        editor(
            "openai:stub",
            env={"TETHER_MODEL_URL": model.url, "TETHER_MODEL_KEY": "local"},
        ) as ed,
    ):
        await ed.conn.initialize(protocol_version=PROTOCOL_VERSION)
        sid = (await ed.conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
        answer = await ed.conn.prompt(session_id=sid, prompt=[text_block("hi")])
        assert answer.stop_reason == "end_turn"
    system, user = model.requests[0]["messages"]
    assert user == {"role": "user", "content": "hi"}
    assert system["role"] == "system"
    if source == "config":
        assert system["content"] == "Be brief."
    else:
        today = datetime.date.today()
        assert system["content"] == default_system(workspace, today=today)
        assert f"the directory {workspace}:" in system["content"]
        assert today.isoformat() in system["content"]
