"""The first `tether chat` offers to authorise an MCP server that needs it.

Real parts: the SDK's authorisation server and an `MCPServer` that takes only its
tokens (`tests/host/oauth_server.py`), tether's login and its loopback receiver. The
test is the person: it answers the offer and its browser follows the authorisation URL.
The offer is driven in this process (its keys through prompt_toolkit's input, as
typed); one test drives `tether chat` on a pseudo-terminal end to end.
"""

from __future__ import annotations

import json
import re
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio
import anyio.from_thread
import anyio.to_thread
import httpx2
import pytest
from prompt_toolkit.input import create_pipe_input
from rich.console import Console
from tests.cli._pty import Pty
from tests.cli._screen import Screen
from tests.host.oauth_server import OAuthServers, browse, oauth_servers

from tether._config import Config, paths
from tether.cli._chatlogin import LoginOffer, offers_login
from tether.host import ToolContext
from tether.host._mcpauth import TokenFile
from tether.stop import AGENT_MARKERS
from tether.tools import McpTools

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable
    from pathlib import Path

    from prompt_toolkit.input import PipeInput

LOGIN = "needs authorisation: run `tether mcp login docs`"
_URL = re.compile(r"open this URL\s+(http://\S+)")


@asynccontextmanager
async def _offered(
    servers: OAuthServers,
) -> AsyncIterator[tuple[PipeInput, Screen, LoginOffer]]:
    """The chat's offer on a pipe for keys and a string for its screen."""
    screen = Screen()
    console = Console(file=screen, force_terminal=False, width=80, color_system=None)
    config = Config(mcp_servers={"docs": {"url": servers.mcp_url}})
    with create_pipe_input() as keys:
        yield keys, screen, LoginOffer(console, keys, config, timeout=10)


async def _consent(screen: Screen, keys: PipeInput, *, paste: bool) -> None:
    """The person's browser follows the URL the offer's login shows; with `paste`, a
    browser on another machine, whose redirect the person pastes (typed, then Enter)."""
    await screen.wait_for("(Ctrl-C: go on without MCP server 'docs')")
    found = _URL.search(screen.getvalue())
    assert found is not None, screen.getvalue()
    if not paste:
        page = await browse(found.group(1))
        assert "tether is authorised" in page.text
        return
    async with httpx2.AsyncClient(timeout=10) as browser:
        answer = await browser.get(found.group(1))
    keys.send_text("not an answer\r")
    keys.send_text(answer.headers["location"] + "x\x7f\r")  # x, then Backspace


@pytest.mark.anyio
async def test_yes_logs_in_and_connects_the_server(workspace: Path) -> None:
    """Enter takes the default (yes): the login runs, the server's tools come at once
    and a call carries the new token. Later its access token has expired and the
    refresh is refused: the next start offers it again, answered by a pasted URL."""
    async with oauth_servers() as servers, _offered(servers) as (keys, screen, offer):
        config = Config(mcp_servers={"docs": {"url": servers.mcp_url}})
        ctx = ToolContext(call_id="c1", session_id="s1", workspace=workspace)

        async def person(paste: bool) -> None:
            await screen.wait_for("Authorise now? [Y/n] ")
            keys.send_text("\r")
            await _consent(screen, keys, paste=paste)

        for paste in (False, True):
            screen.seek(0)
            screen.truncate()
            async with anyio.create_task_group() as tg:
                tg.start_soon(person, paste)
                with anyio.fail_after(20):
                    async with McpTools.open(config, authorise=offer) as mcp:
                        assert mcp.problems == []
                        (echo,) = mcp.tools
                        assert await echo.run(ctx, {"text": "hi"}) == "hi"
            shown = screen.getvalue()
            assert (
                f"MCP server 'docs' ({servers.mcp_url}) needs authorisation." in shown
            )
            assert "tether is authorised at MCP server 'docs': 1 tools" in shown
            assert ("paste the URL again" in shown) is paste  # "not an answer"
            servers.issuer.revoke_all()  # the refresh will be refused
            _expire(TokenFile.open("docs", servers.mcp_url).path)
        assert servers.issuer.refreshed == 0


def _expire(path: Path) -> None:
    """The access token's life has ended, as the token file says."""
    record = json.loads(path.read_text())
    record["expires_at"] = 1.0
    path.write_text(json.dumps(record))


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("keys_typed", "last_line"),
    [
        (["n"], "Authorise now? [Y/n] no"),
        (["y", "\x03"], "login skipped: the chat goes on without MCP server 'docs'"),
    ],
    ids=["no", "ctrl-c-during-the-login"],
)
async def test_no_or_ctrl_c_goes_on_without_the_server_naming_the_login(
    keys_typed: list[str], last_line: str
) -> None:
    """No, or Ctrl-C while the login waits for the browser: nothing is stored, the
    server is skipped with the line naming the login, and the start goes on."""
    async with oauth_servers() as servers, _offered(servers) as (keys, screen, offer):
        config = Config(mcp_servers={"docs": {"url": servers.mcp_url}})

        async def person() -> None:
            markers = ["Authorise now? [Y/n] ", "(Ctrl-C: go on without MCP server"]
            for marker, key in zip(markers, keys_typed, strict=False):
                await screen.wait_for(marker)
                keys.send_text(key)

        async with anyio.create_task_group() as tg:
            tg.start_soon(person)
            with anyio.fail_after(10):
                async with McpTools.open(config, authorise=offer) as mcp:
                    assert mcp.tools == []
        assert [str(p) for p in mcp.problems] == [
            f"MCP server 'docs': {LOGIN}; its tools come with the next start"
        ]
        assert screen.getvalue().endswith(last_line + "\n")
        assert not TokenFile.open("docs", servers.mcp_url).authorised


def _configure(servers: OAuthServers, tmp_path: Path) -> None:
    config = paths().config_file
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        '[permissions]\nallow = ["mcp__docs"]\n'
        f"[mcpServers.docs]\nurl = {json.dumps(servers.mcp_url)}\n",
        encoding="utf-8",
    )
    (tmp_path / "moves.jsonl").write_text(
        '{"tether_script": 1}\n'
        '{"text": "Echoing.", "tool_calls": [{"id": "c1", "name": "mcp__docs__echo",'
        ' "input": {"text": "through"}}]}\n'
        '{"text": "Done."}\n'
    )


@pytest.fixture
def person(monkeypatch: pytest.MonkeyPatch) -> None:
    """The `tether chat` started here runs in a person's shell, not an agent's."""
    for name in AGENT_MARKERS:
        monkeypatch.delenv(name, raising=False)


async def _chat_on_a_pty(
    tmp_path: Path, drive: Callable[[Pty], None], *options: str
) -> str:
    """`tether chat` on a pseudo-terminal, driven by `drive` (in a thread: the
    servers run in this loop); what it showed."""
    pty = Pty(["chat", "--model", "scripted:moves.jsonl", *options], tmp_path)
    try:
        await anyio.to_thread.run_sync(drive, pty)
    finally:
        pty.close()
    return pty.text


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.usefixtures("person")
async def test_tether_chat_offers_the_login_at_a_terminal(tmp_path: Path) -> None:
    """On a pseudo-terminal: the offer before the first turn, the login, and the
    server's tool used in that turn."""

    def drive(pty: Pty) -> None:
        pty.expect("Authorise now? [Y/n]", timeout=60)
        pty.send("y")
        pty.expect("(Ctrl-C: go on without MCP server 'docs')")
        found = _URL.search(pty.text)
        assert found is not None, pty.text
        anyio.from_thread.run(browse, found.group(1))
        pty.expect("tether is authorised at MCP server 'docs': 1 tools")
        pty.expect("Ctrl-D exits")
        pty.expect("you:")
        pty.send("go\r")
        pty.expect("mcp__docs__echo: succeeded  through")
        pty.expect("you:")
        pty.send("\x04")
        assert pty.wait() == 0

    async with oauth_servers() as servers:
        _configure(servers, tmp_path)
        assert "note:" not in await _chat_on_a_pty(tmp_path, drive)


@pytest.mark.parametrize(
    ("no_login", "output_is_terminal", "agent", "offered"),
    [
        (False, True, False, True),
        (True, True, False, False),
        (False, False, False, False),
        (False, True, True, False),
    ],
    ids=["at-a-terminal", "no-login", "output-not-a-terminal", "in-an-agent-session"],
)
@pytest.mark.usefixtures("person")
def test_the_chat_offers_the_login_only_at_a_persons_terminal(
    monkeypatch: pytest.MonkeyPatch,
    *,
    no_login: bool,
    output_is_terminal: bool,
    agent: bool,
    offered: bool,
) -> None:
    """No question with --no-login, where no one may read it (the output is not a
    terminal), or inside an agent session; the server is then skipped with the line
    naming the login (`tests/host/test_mcp_oauth.py`)."""
    if agent:
        monkeypatch.setenv(AGENT_MARKERS[0], "1")
    assert (
        offers_login(no_login=no_login, output_is_terminal=output_is_terminal)
        is offered
    )
