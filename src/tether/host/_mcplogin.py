"""`tether mcp login NAME`: the person authorises tether at an MCP server (OAuth).

The flow is the `mcp` SDK's (`_mcpauth.provider_for`): tether connects to the server as
`McpTools` would; the server's 401 starts the SDK's discovery, client registration and
PKCE authorisation request, whose URL is shown to the person (`show`). The answer comes
back either way, whichever is first:

- the browser's redirect to `http://127.0.0.1:PORT/callback` on this machine (`sock`,
  a loopback socket the caller listens on), or
- the redirect URL, or the code alone, pasted by the person (`pasted`: a browser on
  another machine, whose redirect to this machine's loopback cannot arrive).

The SDK then exchanges the code for tokens, which `TokenFile` keeps in the account's
state, and the connection lists the server's tools to show the tokens work.
"""

from __future__ import annotations

import html
import math
import time
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import anyio
import attrs
import httpx2
import mcp_types
from mcp import Client, MCPError
from mcp.client.auth import AuthorizationCodeResult
from mcp.client.streamable_http import streamable_http_client

from .._loopback import listen_loopback, quiet_uvicorn
from ..errors import TetherError, UsageError
from ._mcpauth import LoginNeeded, McpAuth, OAuthClient, TokenFile, provider_for

if TYPE_CHECKING:
    import socket
    from collections.abc import Awaitable, Callable, Coroutine

    from anyio.streams.memory import MemoryObjectSendStream

    from .._config import Config

__all__ = (
    "LoginResult",
    "callback_socket",
    "http_server",
    "login",
    "login_named",
    "parse_answer",
    "server_status",
    "utc_text",
)

_CALLBACK = "/callback"


@attrs.frozen(kw_only=True)
class LoginResult:
    """What a login did."""

    server: str
    asked: bool
    """The server asked for authorisation and tokens were saved (False: it did not ask)."""
    tools: int
    """How many tools the server listed with the new tokens."""
    expires_at: float | None
    """When the access token expires (epoch seconds); the SDK refreshes it."""
    path: Path
    """The token file."""


def parse_answer(text: str, state: str | None) -> AuthorizationCodeResult:
    """The authorisation answer the person pasted: the redirect URL, or the code alone.

    Raises:
        LoginNeeded: the URL carries the server's refusal (`error=...`); the line says it.
        ValueError: nothing usable was pasted.
    """
    text = text.strip()
    if not text:
        raise ValueError("nothing was pasted")
    if "=" not in text and "/" not in text and " " not in text:
        return AuthorizationCodeResult(code=text, state=state)
    query = parse_qs(urlsplit(text).query or text.lstrip("?"))
    return _answer(query)


def _answer(query: dict[str, list[str]]) -> AuthorizationCodeResult:
    def one(key: str) -> str | None:
        values = query.get(key)
        return values[0] if values else None

    error = one("error")
    if error is not None:
        why = one("error_description")
        raise LoginNeeded(
            f"the authorisation server answered {error}" + (f": {why}" if why else "")
        )
    code = one("code")
    if not code:
        raise ValueError("the answer holds no `code`")
    return AuthorizationCodeResult(code=code, state=one("state"), iss=one("iss"))


def _callback_app(
    answers: MemoryObjectSendStream[AuthorizationCodeResult | LoginNeeded],
) -> Any:
    """The redirect's receiver: one page for the browser, the answer to the flow."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] != _CALLBACK:
            await _page(send, 404, "Not the authorisation callback.")
            return
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        try:
            answer: AuthorizationCodeResult | LoginNeeded = _answer(query)
        except LoginNeeded as exc:
            answer = exc
        except ValueError as exc:
            await _page(send, 400, f"Not an authorisation answer: {exc}.")
            return
        page = (
            f"Refused: {answer}. The terminal says what to do."
            if isinstance(answer, LoginNeeded)
            else "tether is authorised. You may close this tab."
        )
        await _page(send, 200, page)
        answers.send_nowait(answer)

    return app


async def _page(send: Any, status: int, text: str) -> None:
    body = (
        "<!doctype html><meta charset=utf-8><title>tether</title>"
        f"<p>{html.escape(text)}</p>\n"
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/html; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                (b"cache-control", b"no-store"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def login(
    file: TokenFile,
    *,
    sock: socket.socket,
    show: Callable[[str], object],
    pasted: Callable[[], Awaitable[str]] | None = None,
    timeout: float = 300.0,
    skip: anyio.Event | None = None,
) -> LoginResult:
    """Authorise tether at `file`'s server (streamable HTTP) and save its tokens there.

    `show` is given the authorisation URL once the server asked for one; `pasted`
    (None: no pasting) returns the next line the person pasted ("" at its end);
    `timeout` bounds the wait for the person, in seconds; `skip`, once set, gives up
    (the person chose to go on without the server).

    Raises:
        TetherError: the server could not be reached, refused, no answer came in
            time, or the login was skipped; the line says what to do.
    """
    host, port = sock.getsockname()[:2]
    host = f"[{host}]" if ":" in host else host
    redirect_uri = f"http://{host}:{port}{_CALLBACK}"
    server, url = file.server, file.url
    file.forget(client=file.redirect_uri() != redirect_uri)
    send, receive = anyio.create_memory_object_stream[
        AuthorizationCodeResult | LoginNeeded
    ](math.inf)
    state: list[str | None] = [None]
    asked = anyio.Event()

    async def redirect_handler(authorization_url: str) -> None:
        state[0] = parse_qs(urlsplit(authorization_url).query).get("state", [None])[0]
        asked.set()
        show(authorization_url)

    async def callback_handler() -> AuthorizationCodeResult:
        with anyio.move_on_after(timeout):
            answer = await receive.receive()
            if isinstance(answer, LoginNeeded):
                raise answer
            return answer
        raise LoginNeeded(
            f"no authorisation came within {timeout:g} s; "
            f"run `tether mcp login {server}` again"
        )

    async def read_pasted() -> None:
        assert pasted is not None
        await asked.wait()
        while line := await pasted():
            try:
                send.send_nowait(parse_answer(line, state[0]))
            except LoginNeeded as exc:
                send.send_nowait(exc)
            except ValueError as exc:
                show(f"not an authorisation answer ({exc}); paste the URL again")

    def make() -> Any:
        return provider_for(
            file,
            redirect_uri=redirect_uri,
            redirect_handler=redirect_handler,
            callback_handler=callback_handler,
        )

    auth = McpAuth(server, make, shared=False)
    receiver = quiet_uvicorn(_callback_app(send), signals=False)
    with send, receive:
        tools = await _serve_login(
            server, url, auth, receiver, sock, pasted, read_pasted, skip
        )
    return LoginResult(
        server=server,
        asked=asked.is_set(),
        tools=tools,
        expires_at=file.expires_at,
        path=file.path,
    )


async def login_named(
    config: Config,
    name: str,
    *,
    port: int | None = None,
    show: Callable[[str], object],
    pasted: Callable[[], Awaitable[str]] | None = None,
    timeout: float = 300.0,
    skip: anyio.Event | None = None,
) -> LoginResult:
    """`login` at the configured server `name`, on its loopback port (`callback_socket`).

    Raises:
        UsageError: no such streamable-HTTP server, or the `port` is taken.
        TetherError: as `login` raises it.
    """
    server, url, client = http_server(config, name)
    file = TokenFile.open(server, url, start_over=True, client=client)
    sock = callback_socket(file, port)
    try:
        return await login(
            file, sock=sock, show=show, pasted=pasted, timeout=timeout, skip=skip
        )
    finally:
        sock.close()


async def _serve_login(
    server: str,
    url: str,
    auth: McpAuth,
    receiver: Any,
    sock: socket.socket,
    pasted: Callable[[], Awaitable[str]] | None,
    read_pasted: Callable[[], Coroutine[Any, Any, None]],
    skip: anyio.Event | None,
) -> int:
    """Connect with `auth` while the redirect's receiver and the paste reader run.

    The receiver is ended by its own shutdown, not cancelled: it answers the browser's
    request in flight, and a cancelled uvicorn was seen to leave the next loopback
    socket of the same event loop (on the same file descriptor) unserved. A `skip`
    cancels the connection only.
    """
    async with anyio.create_task_group() as tg:
        tg.start_soon(receiver.serve, [sock])
        async with anyio.create_task_group() as reader:
            if pasted is not None:
                reader.start_soon(read_pasted)
            outcome: int | TetherError = TetherError(
                f"MCP server {server!r}: the login was skipped; "
                f"`tether mcp login {server}` authorises it later"
            )
            try:
                with anyio.CancelScope() as connecting:
                    if skip is not None:
                        reader.start_soon(_cancel_at, skip, connecting)
                    outcome = await _connect(server, url, auth)
            except TetherError as exc:  # raised below, not wrapped in a group
                outcome = exc
            finally:
                receiver.should_exit = True
                reader.cancel_scope.cancel()
    if isinstance(outcome, TetherError):
        raise outcome
    return outcome


async def _cancel_at(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


async def _connect(server: str, url: str, auth: McpAuth) -> int:
    """Connect with `auth` (which runs the flow on a 401) and count the tools."""
    info = mcp_types.Implementation(name="tether", version="0.1.0")
    try:
        async with (
            httpx2.AsyncClient(auth=auth, timeout=httpx2.Timeout(30.0)) as http,
            Client(
                streamable_http_client(url, http_client=http),
                client_info=info,
                cache=None,
            ) as client,
        ):
            page = await client.list_tools()
            return len(page.tools)
    except Exception as exc:  # the SDK's errors come in task groups
        raise TetherError(f"MCP server {server!r}: {_why(exc, auth, url)}") from None


def _why(exc: BaseException, auth: McpAuth, url: str) -> str:
    if auth.refused:
        return auth.refused
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, httpx2.TransportError):
        return (
            f"cannot reach {url} ({type(exc).__name__}: {exc}); check the entry's "
            "`url` and that the server runs"
        )
    if isinstance(exc, MCPError):
        return f"MCP error {exc.error.code}: {exc.error.message}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def http_server(config: Config, name: str) -> tuple[str, str, OAuthClient | None]:
    """The configured streamable-HTTP server `name`: name, URL and `oauth` table.

    The name is the one tether uses (tool names, token files).

    Raises:
        UsageError: no such server, or it is not one tether authorises; the line says
            what to do.
    """
    from ._mcp import parse_spec, server_name

    names = {server_name(key): key for key in config.mcp_servers}
    clean = server_name(name)
    if clean not in names:
        known = ", ".join(sorted(names)) or "none are"
        raise UsageError(
            f"no MCP server {name!r} in the config ({known} configured); "
            "`tether mcp list` lists them"
        )
    entry = config.mcp_servers[names[clean]]
    url = entry.get("url") if isinstance(entry, dict) else None
    if not isinstance(url, str) or "command" in entry:
        raise UsageError(
            f"MCP server {name!r} is a stdio server: it is started by tether and "
            "needs no login; only streamable-HTTP servers (`url`) are authorised"
        )
    try:
        spec = parse_spec(clean, entry)
    except ValueError as exc:
        raise UsageError(f"MCP server {name!r}: {exc}") from None
    return clean, url, None if spec is None else spec.oauth


def callback_socket(file: TokenFile, port: int | None) -> socket.socket:
    """The loopback socket for the redirect.

    On `port`, else the port the stored client was registered with (so the
    registration is used again), else any free one.

    Raises:
        UsageError: the `port` asked for is taken.
    """
    if port is not None:
        return listen_loopback(port)
    stored = file.redirect_uri()
    if stored is not None:
        parts = urlsplit(stored)
        if parts.hostname == "127.0.0.1" and parts.port:
            with suppress(UsageError):
                return listen_loopback(parts.port)
    return listen_loopback(0)


def server_status(key: str, entry: object) -> dict[str, Any]:
    """One configured server as `tether mcp list` shows it (nothing is contacted)."""
    from ._mcp import parse_spec, server_name

    name = server_name(key)
    row: dict[str, Any] = {
        "name": name,
        "transport": None,
        "target": None,
        "auth": None,
        "expires_at": None,
        "refreshable": False,
        "file": None,
        "problem": None,
    }
    try:
        spec = parse_spec(name, entry)
    except ValueError as exc:
        row["problem"] = str(exc)
        return row
    if spec is None:
        row["problem"] = "disabled"
        return row
    row["transport"] = spec.transport
    if spec.transport == "stdio":
        row["target"] = " ".join([spec.command, *spec.args])
        return row
    row["target"] = spec.url
    if any(key.lower() == "authorization" for key in spec.headers):
        row["auth"] = "headers"
        return row
    try:
        file = TokenFile.open(name, spec.url)
    except ValueError as exc:
        row["problem"] = str(exc)
        return row
    row["file"] = str(file.path)
    if not file.authorised:
        row["auth"] = "not authorised"
        return row
    row["auth"] = "authorised"
    row["expires_at"] = utc_text(file.expires_at)
    row["refreshable"] = file.can_refresh
    return row


def utc_text(epoch: float | None) -> str | None:
    """An expiry as `tether mcp list` and `login --json` show it (UTC, ISO 8601)."""
    if epoch is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
