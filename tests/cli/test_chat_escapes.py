"""S16 on the chat's screen: what a tool printed or a model wrote reaches the terminal
with every escape shown as text, never as a control sequence."""

from __future__ import annotations

import io

import anyio
import pytest
from rich.console import Console

from tether.cli.chat import _Terminal
from tether.runtime import MessageChunk, ToolCallProgress

pytestmark = pytest.mark.rule("S16")

HOSTILE = "ok \x1b]0;owned\x07 \x1b]52;c;aGk=\x07 \x1b[2J\x9b31m done"


def test_s16_tool_output_and_model_text_reach_the_terminal_without_escapes() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=200, color_system=None)
    screen = _Terminal(console, keys=None)  # type: ignore[arg-type]

    async def show() -> None:
        await screen.on_event(
            ToolCallProgress(
                session_id="s", turn_id="t", call_id="c", tool="Bash", text=HOSTILE
            )
        )
        await screen.on_event(MessageChunk(session_id="s", turn_id="t", text=HOSTILE))

    anyio.run(show)
    printed = out.getvalue()
    for byte in ("\x1b", "\x07", "\x9b"):
        assert byte not in printed
    assert printed.count("␛]52;c;aGk=") == 2  # shown, not acted on
    assert printed.count("done") == 2
