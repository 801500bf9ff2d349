"""The ACP examples of README.md and docs/acp.md, run as printed."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from acp import PROTOCOL_VERSION, spawn_agent_process, text_block
from tests.acp.support import Recorder, agent_env, write_script

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).parent.parent.parent


def _blocks(path: Path, language: str) -> list[str]:
    text = path.read_text(encoding="utf-8")
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


async def test_the_embedding_example_serves_an_editor(tmp_path: Path) -> None:
    """`my_agent.py` of docs/acp.md, run by an editor as `python my_agent.py`, answers
    a prompt with its own tools."""
    [example] = [
        b for b in _blocks(ROOT / "docs" / "acp.md", "python") if "my_agent" in b
    ]
    (tmp_path / "my_agent.py").write_text(example, encoding="utf-8")
    write_script(tmp_path / "moves.jsonl", [{"text": "Hello from my agent."}])
    recorder = Recorder()
    async with spawn_agent_process(
        recorder,
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
