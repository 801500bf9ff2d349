"""`tether chat` puts an MCP server's question (elicitation) to the person: field by
field on the terminal; Esc while it is asked withdraws it and the turn settles.

One test drives `tether chat` on a pseudo-terminal; the others drive the chat's terminal
in this process (its keys through prompt_toolkit's input, as typed), which is cheaper."""

from __future__ import annotations

import json
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import pytest
from prompt_toolkit.input import create_pipe_input
from rich.console import Console
from tests.cli._pty import Pty
from tests.cli._screen import Screen

from tether._config import Config
from tether.cli.chat import _Terminal
from tether.models import model_from_spec
from tether.runtime import Agent, Runtime

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from prompt_toolkit.input import PipeInput

pytestmark = pytest.mark.slow


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


@asynccontextmanager
async def _chat_turn(
    workspace: Path, tmp_path: Path
) -> AsyncIterator[tuple[PipeInput, Screen]]:
    """A turn of the chat's terminal, in this process, on a pipe for keys and a string
    for its screen, over a runtime whose MCP server is the fixture (its permission and
    elicitation prompts are the terminal's, as `tether chat` wires them); the block
    ends once the turn has."""
    (tmp_path / "moves.jsonl").write_text(SCRIPT + "\n")
    config = Config(
        mcp_servers={"fx": {"command": sys.executable, "args": [str(_FIXTURE)]}}
    )
    screen = Screen()
    console = Console(file=screen, force_terminal=False, width=200, color_system=None)
    with create_pipe_input() as keys:
        terminal = _Terminal(console, keys)
        async with Runtime(
            workspace=workspace,
            config=config,
            permissions={"allow": ["mcp__fx__*"]},
            approver=terminal.approve,
            elicitor=terminal.elicit,
        ) as runtime:
            model = model_from_spec(f"scripted:{tmp_path / 'moves.jsonl'}")
            session = Agent(runtime, model).session(on_event=terminal.on_event)
            terminal.session = session
            async with anyio.create_task_group() as tg:
                tg.start_soon(terminal.run_turn, session, "go")
                yield keys, screen


@pytest.mark.anyio
async def test_chat_decline(workspace: Path, tmp_path: Path) -> None:
    """`n` declines: the server is told so (the chat's prompt driven in-process, its
    keys through prompt_toolkit's input as typed)."""
    async with _chat_turn(workspace, tmp_path) as (keys, screen):
        await screen.wait_for("[y] answer  [n] decline  [c] cancel")
        assert "? fx asks: Order something?" in screen.getvalue()
        keys.send_text("n")
    assert "mcp__fx__ask: succeeded  decline" in screen.getvalue()


@pytest.mark.anyio
async def test_chat_esc_withdraws_the_question(workspace: Path, tmp_path: Path) -> None:
    """Esc while a field is typed: the question is withdrawn, the server answers
    `cancel` and the turn settles with no second press."""
    async with _chat_turn(workspace, tmp_path) as (keys, screen):
        await screen.wait_for("[y] answer  [n] decline  [c] cancel")
        keys.send_text("y")
        await screen.wait_for("Name * (string): ")
        keys.send_text("An\x1b")
    printed = screen.getvalue()
    assert "question withdrawn by the stop" in printed
    assert "mcp__fx__ask: succeeded  cancel" in printed
    assert "stopped: the turn has settled" in printed
