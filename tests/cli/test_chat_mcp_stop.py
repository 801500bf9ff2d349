"""`tether chat` with a hung MCP tool: both steps of the stop are said, and the second
press gives the prompt back within 2 s."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from tests.cli._pty import Pty

pytestmark = pytest.mark.slow


_FIXTURE = Path(__file__).parents[1] / "host" / "mcp_server_fixture.py"

SCRIPT = "\n".join(
    [
        '{"tether_script": 1}',
        '{"text": "Calling it.", "tool_calls": [{"id": "c1", "name": "mcp__fx__hang",'
        ' "input": {}}]}',
        '{"text": "Understood, stopped."}',
    ]
)


@pytest.mark.rule("chat-stop")
@pytest.mark.parametrize("second", ["\x1b", "\x03"], ids=["esc", "ctrl-c"])
def test_chat_hung_mcp_tool_two_presses_prompt_back(
    tether_home: Path, tmp_path: Path, second: str
) -> None:
    """Esc says what is waited for and how to stop waiting; Esc (or Ctrl-C) again ends
    the call unknown and the prompt is back within 2 s."""
    config = tether_home / "config" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        "[permissions]\n"
        'allow = ["mcp__fx"]\n'
        "[mcpServers.fx]\n"
        f"command = {json.dumps(sys.executable)}\n"
        f"args = [{json.dumps(str(_FIXTURE))}]\n",
        encoding="utf-8",
    )
    (tmp_path / "moves.jsonl").write_text(SCRIPT + "\n")
    pty = Pty(["chat", "--model", "scripted:moves.jsonl"], tmp_path)
    try:
        pty.expect("Ctrl-D exits", timeout=60)
        pty.expect("you:")
        pty.send("go\r")
        pty.expect("(extension)")
        pty.expect("mcp__fx__hang: running")
        pty.send("\x1b")
        pty.expect("waiting for hang on fx: press Esc again to stop waiting")
        time.sleep(0.3)  # the first press is not the last: nothing ends by itself
        assert "ended unknown" not in pty.text
        started = time.monotonic()
        pty.send(second)
        pty.expect("stopped waiting for hang on fx: it ended unknown", timeout=5)
        pty.expect("you:", timeout=5)
        took = time.monotonic() - started
        assert took <= 2.0, (took, pty.text)
        assert "the server never answered; its effect is unknown" in pty.text
        pty.send("\x04")
        pty.expect("bye: resume with tether chat --resume session")
        assert pty.wait() == 0
    finally:
        pty.close()
