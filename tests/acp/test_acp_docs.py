"""The ACP examples of README.md and docs/acp.md, run as an editor runs them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from acp import PROTOCOL_VERSION, RequestError, spawn_agent_process, text_block
from tests.acp.support import Recorder, agent_env, details, write_script
from tests.docs._blocks import ROOT, blocks

from tether.acp._early import initialize_result
from tether.testing import ModelServer, error_reply, text_reply

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TETHER = Path(sys.executable).with_name("tether")


def _zed_settings(doc: Path) -> dict[str, object]:
    [settings] = [
        json.loads(b.text)
        for b in blocks(doc)
        if b.lang == "json" and "agent_servers" in b.text
    ]
    server = settings["agent_servers"]["tether"]
    assert isinstance(server, dict)
    return server


@pytest.mark.parametrize("doc", ["README.md", "docs/acp.md"])
async def test_the_zed_settings_start_a_working_agent(doc: str, tmp_path: Path) -> None:
    """The `agent_servers` entry, started as Zed starts it (its command, args and env;
    only the model server's URL points at a local stub), answers a prompt with the
    model's words."""
    server = _zed_settings(ROOT / doc)
    assert server["type"] == "custom"
    assert server["command"] == "tether"
    env = dict(server["env"])  # type: ignore[call-overload]
    recorder = Recorder()
    async with ModelServer.open([text_reply(pieces=["Hello ", "from Zed."])]) as model:
        env["TETHER_MODEL_URL"] = model.url
        async with spawn_agent_process(
            recorder.as_client(),
            str(TETHER),
            *server["args"],  # type: ignore[misc]
            env=agent_env(**env),
            transport_kwargs={"stderr": None},
        ) as (conn, _):
            await conn.initialize(protocol_version=PROTOCOL_VERSION)
            sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
            response = await conn.prompt(session_id=sid, prompt=[text_block("hi")])
        assert response.stop_reason == "end_turn"
        assert recorder.text() == "Hello from Zed."
        assert model.requests[0]["model"] == "qwen2.5-coder"


async def test_a_model_that_refuses_is_an_error_answer_with_its_reason(
    tmp_path: Path,
) -> None:
    """The endpoint answers 400: the prompt gets a JSON-RPC error (-32603) whose details
    carry the model's one-line reason, and the session stays usable."""
    recorder = Recorder()
    replies = [error_reply(400, "context too long"), text_reply("Fine now.")]
    async with ModelServer.open(replies) as model:
        env = {"TETHER_MODEL_URL": model.url, "TETHER_MODEL_KEY": "local"}
        async with spawn_agent_process(
            recorder.as_client(),
            str(TETHER),
            "acp",
            "--model",
            "openai:stub",
            env=agent_env(**env),
            transport_kwargs={"stderr": None},
        ) as (conn, _):
            await conn.initialize(protocol_version=PROTOCOL_VERSION)
            sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
            with pytest.raises(RequestError) as refused:
                await conn.prompt(session_id=sid, prompt=[text_block("hi")])
            assert refused.value.code == -32603
            assert "context too long" in details(refused.value)
            again = await conn.prompt(session_id=sid, prompt=[text_block("hi")])
            assert again.stop_reason == "end_turn"
            assert recorder.text() == "Fine now."


async def test_the_embedding_example_serves_an_editor(tmp_path: Path) -> None:
    """`my_agent.py` of docs/acp.md, started by an editor as `python my_agent.py`,
    answers a prompt with its own tools."""
    [example] = [b for b in blocks(ROOT / "docs" / "acp.md") if b.file_name]
    assert example.file_name == "my_agent.py"
    (tmp_path / "my_agent.py").write_text(example.text, encoding="utf-8")
    write_script(tmp_path / "moves.jsonl", [{"text": "Hello from my agent."}])
    recorder = Recorder()
    async with spawn_agent_process(
        recorder.as_client(),
        sys.executable,
        "my_agent.py",
        cwd=tmp_path,
        env=agent_env(),
        transport_kwargs={"stderr": None},
    ) as (conn, _):
        await conn.initialize(protocol_version=PROTOCOL_VERSION)
        sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
        response = await conn.prompt(session_id=sid, prompt=[text_block("hi")])
        assert response.stop_reason == "end_turn"
        assert recorder.text() == "Hello from my agent."


def test_the_session_capabilities_shown_are_those_initialize_advertises() -> None:
    """The capabilities docs/acp.md shows for the session methods are exactly those of
    the `initialize` answer (no more is claimed than is served)."""
    [shown] = [
        json.loads(b.text)
        for b in blocks(ROOT / "docs" / "acp.md")
        if b.lang == "json" and "sessionCapabilities" in b.text
    ]
    advertised = initialize_result(PROTOCOL_VERSION)["agentCapabilities"]
    assert shown == {
        "loadSession": advertised["loadSession"],
        "sessionCapabilities": advertised["sessionCapabilities"],
    }
