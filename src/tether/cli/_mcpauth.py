"""`tether mcp login / logout / list`: the person's OAuth at streamable-HTTP MCP servers.

The flow is the `mcp` SDK's (`tether.host._mcplogin`); the tokens live in the account's
state (`tether.host._mcpauth.TokenFile`), never in a walled tree.
"""

from __future__ import annotations

import math
import sys
import threading
from typing import TYPE_CHECKING, Any

import click

from ._options import seconds_option
from ._output import echo_json

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ..host._mcplogin import LoginResult

__all__ = (
    "agent_marker",
    "list_servers",
    "login",
    "login_line",
    "logout",
    "url_shower",
)


def agent_marker() -> str | None:
    """The variable that says this runs inside an agent session, if one is set."""
    import os

    from ..stop import AGENT_MARKERS

    return next((name for name in AGENT_MARKERS if os.environ.get(name)), None)


def _refuse_agent(verb: str) -> None:
    """Authorising tether is the person's act: an agent session is refused."""
    from ..errors import Refused

    marker = agent_marker()
    if marker is not None:
        raise Refused(
            f"mcp {verb} refused: this runs inside an agent session "
            f"({marker} is set); authorising tether at a server is the person's "
            "act, run from their own terminal"
        )


def url_shower(
    server: str, echo: Callable[[str], object], *, open_browser: bool = False
) -> Callable[[str], None]:
    """The login's `show`: the authorisation URL and what to do with it, or a note."""

    def show(text: str) -> None:
        if not text.startswith(("http://", "https://")):
            echo(text)
            return
        echo(f"Authorise tether at MCP server {server!r}: open this URL")
        echo(f"  {text}")
        echo(
            "then consent; or paste here the URL the browser is sent to (or the code) "
            "and press Enter"
        )
        if open_browser:
            import webbrowser

            webbrowser.open(text)

    return show


def login_line(result: LoginResult) -> str:
    """What a login did, in one line."""
    if result.asked:
        return (
            f"tether is authorised at MCP server {result.server!r}: {result.tools} "
            f"tools; the tokens are in {result.path}"
        )
    return (
        f"MCP server {result.server!r} did not ask for authorisation "
        f"({result.tools} tools); nothing was stored"
    )


def _needs_mcp(what: str) -> None:
    from .. import _extras
    from ..errors import UsageError

    if not _extras.installed("mcp"):
        raise UsageError(_extras.missing("mcp", what))


def _stdin_lines() -> Callable[[], Awaitable[str]]:
    """Lines the person pastes on stdin, read by a daemon thread ("" at the end).

    The thread starts at the first read and is left blocked when the login ends: a
    daemon, it never holds the process.
    """
    import anyio
    import anyio.from_thread
    import anyio.lowlevel

    send, receive = anyio.create_memory_object_stream[str](math.inf)
    started: list[bool] = []

    def reader(token: Any) -> None:
        try:
            for line in sys.stdin:
                anyio.from_thread.run_sync(send.send_nowait, line, token=token)
            anyio.from_thread.run_sync(send.send_nowait, "", token=token)
        except Exception:
            pass

    async def next_line() -> str:
        if not started:
            started.append(True)
            token = anyio.lowlevel.current_token()
            threading.Thread(target=reader, args=(token,), daemon=True).start()
        return await receive.receive()

    return next_line


@click.command()
@click.argument("name")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=None,
    help="The loopback port the browser is sent back to; default: the one used at "
    "the last login, else any free one.",
)
@click.option(
    "--open",
    "open_browser",
    is_flag=True,
    help="Open the authorisation URL in this machine's browser too.",
)
@seconds_option(
    "--timeout",
    default=300.0,
    help="How long to wait for the authorisation.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
def login(
    name: str, port: int | None, open_browser: bool, timeout: float, as_json: bool
) -> None:
    """Authorise tether at the streamable-HTTP MCP server NAME (OAuth).

    tether connects to the server as a session would; when the server asks for
    authorisation, the MCP SDK's OAuth flow (discovery, client registration, PKCE)
    gives an authorisation URL, printed here (opened only with --open). Open it in a
    browser and consent. The browser is sent back to http://127.0.0.1:PORT/callback,
    where this command is listening; with a browser on another machine that redirect
    cannot arrive: paste the URL the browser was sent to (or the code alone) here and
    press Enter. The tokens are kept in the account's state (owner-only, never shown
    to a tool or agent) and refreshed by themselves; `tether chat`, `tether run` and
    `tether mcp serve` use them. A server that needs a login again fails its calls
    with one line naming this command; nothing waits for a browser, but the first
    `tether chat` at a terminal offers this login for the servers that need it.

    \b
    Examples:
      tether mcp login docs
      tether mcp login docs --open              open the browser on this machine
      tether mcp login docs --port 8765         a fixed port for the redirect
    On a machine you reach over SSH, forward that port from your own machine
    (ssh -L 8765:127.0.0.1:8765 HOST) and run the last line on HOST; or paste.
    """
    import functools

    import anyio

    from .._config import load_config

    _refuse_agent("login")
    _needs_mcp("tether mcp login")
    from ..host._mcp import server_name
    from ..host._mcplogin import login_named, utc_text

    config = load_config()
    show = url_shower(
        server_name(name),
        functools.partial(click.echo, err=True),
        open_browser=open_browser,
    )
    result = anyio.run(
        lambda: login_named(
            config,
            name,
            port=port,
            show=show,
            pasted=_stdin_lines(),
            timeout=timeout,
        )
    )
    view = {
        "server": result.server,
        "authorised": result.asked,
        "tools": result.tools,
        "expires_at": utc_text(result.expires_at),
        "file": str(result.path) if result.asked else None,
    }
    if as_json:
        echo_json(view)
    else:
        click.echo(login_line(result))


@click.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
def logout(name: str, as_json: bool) -> None:
    """Remove the OAuth tokens tether holds for the MCP server NAME.

    The tokens and the client registration are deleted from the account's state; the
    authorisation server is not told (revoke the grant there too if it offers that).
    The server's next connection fails until `tether mcp login NAME`.

    \b
    Examples:
      tether mcp logout docs
      tether mcp logout docs --json
    """
    from .._config import load_config

    _refuse_agent("logout")
    _needs_mcp("tether mcp logout")
    from ..host._mcpauth import TokenFile
    from ..host._mcplogin import http_server

    server, url, _client = http_server(load_config(), name)
    file = TokenFile.open(server, url, start_over=True)
    removed = file.remove()
    if as_json:
        echo_json({"server": server, "removed": removed, "file": str(file.path)})
    elif removed:
        click.echo(f"removed the tokens for MCP server {server!r} ({file.path})")
    else:
        click.echo(f"tether holds no tokens for MCP server {server!r}")


@click.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def list_servers(as_json: bool) -> None:
    """List the configured MCP servers and whether tether is authorised at each.

    Reads the config and the token files only: no server is started or contacted
    (`tether tools` starts them and lists their tools). An HTTP server's `auth` is
    `authorised` (tether holds tokens for it), `not authorised` (none: run `tether mcp
    login NAME` if it asks for them), or `headers` (the entry gives its own
    Authorization header); a stdio server needs none.

    \b
    Examples:
      tether mcp list
      tether mcp list --json | jq '.servers[] | select(.auth == "not authorised")'
    """
    from .._config import load_config

    _needs_mcp("tether mcp list")
    from ..host._mcplogin import server_status

    config = load_config()
    rows = [server_status(key, entry) for key, entry in config.mcp_servers.items()]
    if as_json:
        echo_json({"servers": rows})
        return
    if not rows:
        click.echo(f"no MCP servers are configured ({config.looked_at})")
        return
    width = max(len(row["name"]) for row in rows)
    for row in rows:
        transport = row["transport"] or "-"
        click.echo(f"{row['name']:<{width}}  {transport:<5}  {_auth_text(row)}")


def _auth_text(row: dict[str, Any]) -> str:
    if row["problem"] is not None:
        return f"not usable: {row['problem']}"
    auth = row["auth"]
    if auth == "authorised":
        expiry = row["expires_at"]
        refresh = "refreshed by itself" if row["refreshable"] else "no refresh token"
        return f"{row['target']}  authorised" + (
            f" (access token until {expiry}; {refresh})" if expiry else ""
        )
    if auth == "not authorised":
        return f"{row['target']}  not authorised (`tether mcp login {row['name']}`)"
    if auth == "headers":
        return f"{row['target']}  its own Authorization header"
    return str(row["target"])
