"""`tether chat` puts an MCP server's question (elicitation) to the person: field by
field on the terminal; Esc while it is asked withdraws it and the turn settles."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.cli._pty import Pty

_FIXTURE = Path(__file__).parents[1] / "host" / "mcp_server_fixture.py"

SCRIPT = "\n".join(
    [
        '{"tether_script": 1}',
        '{"text": "Asking.", "tool_calls": [{"id": "c1", "name": "mcp__fx__ask",'
        ' "input": {}}]}',
        '{"text": "Done."}',
    ]
)


def _chat(tether_home: Path, tmp_path: Path) -> Pty:
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
    pty.expect("Ctrl-D exits", timeout=60)
    pty.expect("you:")
    pty.send("go\r")
    pty.expect("? fx asks: Order something?")
    pty.expect("[y] answer  [n] decline  [c] cancel")
    return pty


def test_chat_answers_a_server_question_field_by_field(
    tether_home: Path, tmp_path: Path
) -> None:
    """Each field is asked with its type; a bad line is asked again; defaults on Enter;
    the tool receives what was typed."""
    pty = _chat(tether_home, tmp_path)
    try:
        pty.send("y")
        pty.expect("Name * (string): ")
        pty.send("Ann\r")
        pty.expect("Count * (integer): ")
        pty.send("two\r")
        pty.expect("a number (whole)")
        pty.send("2\r")
        pty.expect("Gift (y/n; Enter: False): ")
        pty.send("y\r")
        pty.expect("Color (one of red, green; Enter: red): ")
        pty.send("\r")
        pty.expect("mcp__fx__ask: succeeded")
        pty.expect('accept {"name":"Ann","count":2,"gift":true,"color":"red"}')
        pty.expect("you:")
        pty.send("\x04")
        assert pty.wait() == 0
    finally:
        pty.close()


def test_chat_decline(tether_home: Path, tmp_path: Path) -> None:
    """`n` declines: the server is told so."""
    pty = _chat(tether_home, tmp_path)
    try:
        pty.send("n")
        pty.expect("mcp__fx__ask: succeeded  decline")
        pty.expect("you:")
        pty.send("\x04")
        assert pty.wait() == 0
    finally:
        pty.close()


def test_chat_esc_withdraws_the_question(tether_home: Path, tmp_path: Path) -> None:
    """Esc while a field is typed: the question is withdrawn, the server answers
    `cancel` and the turn settles with no second press."""
    pty = _chat(tether_home, tmp_path)
    try:
        pty.send("y")
        pty.expect("Name * (string): ")
        pty.send("An")
        pty.send("\x1b")
        pty.expect("question withdrawn by the stop")
        pty.expect("mcp__fx__ask: succeeded  cancel", timeout=10)
        pty.expect("stopped: the turn has settled", timeout=10)
        pty.expect("you:")
        pty.send("\x04")
        assert pty.wait() == 0
    finally:
        pty.close()
