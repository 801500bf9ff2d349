"""OAuth at a streamable-HTTP MCP server: login, calls, refresh, refusal, logout.

Real parts: the SDK's authorisation server routes and an `MCPServer` that takes only
their bearer tokens (`oauth_server.py`), the SDK's client flow in tether, tether's
loopback receiver of the redirect. The test is the person's browser: it follows the
authorisation URL with an HTTP client, which lands on tether's loopback port.
"""

from __future__ import annotations

import json
import stat
import time
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio
import httpx2
import pytest
from mcp.shared.auth import OAuthToken
from tests.cli._run import TETHER, invoke, person_env
from tests.host.oauth_server import OAuthServers, browse, oauth_servers
from tests.mcpserve._procs import STARTING

from tether._config import Config, paths
from tether._loopback import listen_loopback
from tether.cli._mcpauth import list_servers, logout
from tether.errors import TetherError, ToolFailed
from tether.host import ToolContext
from tether.host._mcpauth import LoginNeeded, OAuthClient, TokenFile, provider_for
from tether.host._mcplogin import LoginResult, login, parse_answer
from tether.host.tools.bash import Bash
from tether.tools import McpTool, McpTools

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable
    from pathlib import Path

    from mcp.client.auth import AuthorizationCodeResult

    from tether.tools import McpProblem

LOGIN = "run `tether mcp login docs`"


def _ctx(workspace: Path) -> ToolContext:
    return ToolContext(call_id="c1", session_id="s1", workspace=workspace)


async def _login_with(
    servers: OAuthServers,
    show: Callable[[str], object],
    *,
    pasted: Callable[[], Awaitable[str]] | None = None,
    timeout: float = 10.0,
) -> LoginResult:
    """`tether mcp login docs` on a loopback port of its own."""
    sock = listen_loopback(0)
    try:
        return await login(
            TokenFile.open("docs", servers.mcp_url),
            sock=sock,
            show=show,
            pasted=pasted,
            timeout=timeout,
        )
    finally:
        sock.close()


async def _login(servers: OAuthServers) -> LoginResult:
    """`tether mcp login docs`, the test's browser following the URL it shows."""
    pages: list[httpx2.Response] = []
    async with anyio.create_task_group() as tg:

        async def visit(url: str) -> None:
            pages.append(await browse(url))

        result = await _login_with(servers, lambda url: tg.start_soon(visit, url))
    assert [p.status_code for p in pages] == [200]
    assert "tether is authorised" in pages[0].text
    return result


@asynccontextmanager
async def _tools(
    servers: OAuthServers,
) -> AsyncIterator[tuple[list[McpProblem], dict[str, McpTool]]]:
    config = Config(mcp_servers={"docs": {"url": servers.mcp_url}})
    with anyio.fail_after(20):
        async with McpTools.open(config, startup_timeout=10) as mcp:
            yield mcp.problems, {t.name: t for t in mcp.tools}


def _record(result: LoginResult) -> dict[str, object]:
    record = json.loads(result.path.read_text())
    assert isinstance(record, dict)
    return record


@pytest.mark.anyio
async def test_login_on_loopback_then_calls_carry_the_token(workspace: Path) -> None:
    async with oauth_servers() as servers:
        result = await _login(servers)
        assert (result.asked, result.tools) == (True, 1)
        assert result.path.parent == paths().mcp_auth_dir
        assert stat.S_IMODE(result.path.stat().st_mode) == 0o600
        assert stat.S_IMODE(result.path.parent.stat().st_mode) == 0o700
        assert not list(result.path.parent.glob(".*.tmp"))  # written by rename
        record = _record(result)
        assert record["url"] == servers.mcp_url
        tokens = record["tokens"]
        assert isinstance(tokens, dict)
        assert tokens["access_token"] in servers.issuer.access
        # Again, at once: the new tokens replace the old (and the new loopback port,
        # most likely the old one's file descriptor, is served).
        again = _record(await _login(servers))["tokens"]
        assert isinstance(again, dict)
        assert again["access_token"] != tokens["access_token"]
        async with _tools(servers) as (problems, tools):
            assert problems == []
            echo = tools["mcp__docs__echo"]
            assert await echo.run(_ctx(workspace), {"text": "hi"}) == "hi"
        assert servers.issuer.refreshed == 0


@pytest.mark.anyio
async def test_an_expired_access_token_is_refreshed_and_saved(workspace: Path) -> None:
    """In a later process (a new provider): the SDK refreshes at the token endpoint
    of an authorisation server on another origin, learnt at the login."""
    async with oauth_servers() as servers:
        result = await _login(servers)
        old = _record(result)["tokens"]
        servers.issuer.expire_access()
        _age(result)
        async with _tools(servers) as (problems, tools):
            assert problems == []
            echo = tools["mcp__docs__echo"]
            assert await echo.run(_ctx(workspace), {"text": "again"}) == "again"
        assert servers.issuer.refreshed == 1
        new = _record(result)
        assert isinstance(new["tokens"], dict)
        assert isinstance(old, dict)
        assert new["tokens"]["access_token"] != old["access_token"]
        assert new["tokens"]["access_token"] in servers.issuer.access
        assert isinstance(new["expires_at"], float)
        assert new["expires_at"] > time.time()
        assert stat.S_IMODE(result.path.stat().st_mode) == 0o600


def _age(result: LoginResult) -> None:
    """Time passes: the access token's life ends, in the file (the server is told apart)."""
    record = _record(result)
    record["expires_at"] = time.time() - 1
    result.path.write_text(json.dumps(record))


@pytest.mark.anyio
async def test_tokens_another_process_refreshed_are_used_at_once(
    workspace: Path,
) -> None:
    """Two sessions on one server: one refreshes (the server retires the old refresh
    token), the other's next call meets the refusal and uses the new tokens."""
    async with oauth_servers() as servers:
        result = await _login(servers)
        async with _tools(servers) as (_problems, first):
            echo = first["mcp__docs__echo"]
            assert await echo.run(_ctx(workspace), {"text": "one"}) == "one"
            servers.issuer.expire_access()
            _age(result)
            async with _tools(servers) as (_problems, second):
                await second["mcp__docs__echo"].run(_ctx(workspace), {"text": "two"})
            assert servers.issuer.refreshed == 1
            assert await echo.run(_ctx(workspace), {"text": "three"}) == "three"
        assert servers.issuer.refreshed == 1


@pytest.mark.anyio
async def test_revoked_tokens_fail_the_call_at_once_naming_login(
    workspace: Path,
) -> None:
    """Then the login it names, run meanwhile, is used by the same session's next
    call."""
    async with oauth_servers() as servers:
        await _login(servers)
        async with _tools(servers) as (_problems, tools):
            echo = tools["mcp__docs__echo"]
            assert await echo.run(_ctx(workspace), {"text": "ok"}) == "ok"
            servers.issuer.revoke_all()
            with anyio.fail_after(5), pytest.raises(ToolFailed) as caught:
                await echo.run(_ctx(workspace), {"text": "refused"})
            message = str(caught.value)
            assert message == (
                f"mcp__docs__echo: MCP server 'docs' needs authorisation: {LOGIN}"
            )
            assert not caught.value.end_unknown  # refused before it ran: not unknown
            await _login(servers)
            assert await echo.run(_ctx(workspace), {"text": "back"}) == "back"


@pytest.mark.anyio
async def test_a_server_never_authorised_is_a_problem_naming_login() -> None:
    async with oauth_servers() as servers:
        with anyio.fail_after(5):
            async with _tools(servers) as (problems, tools):
                assert tools == {}
        assert [str(p) for p in problems] == [
            f"MCP server 'docs': needs authorisation: {LOGIN}; "
            "its tools come with the next start"
        ]
        assert servers.issuer.clients == {}  # nothing registered unattended


@pytest.mark.anyio
async def test_a_pasted_redirect_url_completes_the_login() -> None:
    """A browser on another machine: its redirect never reaches this one's loopback;
    the person pastes the URL it was sent to."""
    async with oauth_servers() as servers:
        urls: list[str] = []
        pasted = anyio.Event()

        async def paste() -> str:
            await pasted.wait()
            # The browser does not follow the redirect: it cannot reach this machine.
            async with httpx2.AsyncClient(timeout=10) as browser:
                answer = await browser.get(urls[0])
            assert answer.status_code == 302
            return answer.headers["location"]

        def show(text: str) -> None:
            urls.append(text)
            pasted.set()

        result = await _login_with(servers, show, pasted=paste)
        assert (result.asked, result.tools) == (True, 1)


@pytest.mark.anyio
async def test_a_login_with_no_answer_ends_in_time_naming_login_again() -> None:
    async with oauth_servers() as servers:
        with anyio.fail_after(5), pytest.raises(TetherError) as caught:
            await _login_with(servers, lambda _url: None, timeout=0.2)
        assert str(caught.value) == (
            "MCP server 'docs': no authorisation came within 0.2 s; "
            "run `tether mcp login docs` again"
        )
        assert not TokenFile.open("docs", servers.mcp_url).authorised


def test_pasted_answers() -> None:
    url = "http://127.0.0.1:9/callback?code=abc&state=s1"
    assert parse_answer(url, "s0").model_dump() == {
        "code": "abc",
        "state": "s1",
        "iss": None,
    }
    assert parse_answer("  abc\n", "s0").model_dump() == {
        "code": "abc",
        "state": "s0",
        "iss": None,
    }
    with pytest.raises(LoginNeeded, match="answered access_denied: no thanks"):
        parse_answer(
            "http://127.0.0.1:9/callback?error=access_denied"
            "&error_description=no+thanks",
            "s0",
        )
    with pytest.raises(ValueError, match="no `code`"):
        parse_answer("http://127.0.0.1:9/callback?state=s1", "s0")


def test_a_file_for_another_url_is_not_used(tether_home: Path) -> None:
    file = TokenFile.open("docs", "http://127.0.0.1:1/mcp")
    file._record["tokens"] = {"access_token": "t", "token_type": "Bearer"}
    file.save()
    assert TokenFile.open("docs", "http://127.0.0.1:1/mcp").authorised
    assert not TokenFile.open("docs", "http://127.0.0.1:2/mcp").authorised
    file.path.write_text("not json")
    with pytest.raises(ValueError, match="run `tether mcp login docs`"):
        TokenFile.open("docs", "http://127.0.0.1:1/mcp")
    assert not TokenFile.open("docs", "x", start_over=True).authorised


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_walled_tree_cannot_read_the_tokens(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The token folder is masked in every tree, as `tether board`'s token folder is."""
    monkeypatch.setenv("TETHER_CONTAINMENT", "namespace")
    file = TokenFile.open("docs", "http://127.0.0.1:1/mcp")
    file._record["tokens"] = {"access_token": "secret-token", "token_type": "Bearer"}
    file.save()
    command = (
        f"cat {file.path} 2>/dev/null || echo unread; ls -A {file.path.parent} | wc -l"
    )
    with anyio.fail_after(30):
        output = await Bash().run(_ctx(workspace), {"command": command})
    assert output.split() == ["unread", "0"]  # an empty folder in its place
    assert file.path.read_text().count("secret-token") == 1  # the host still reads it


@pytest.mark.anyio
async def test_the_commands_login_by_paste_list_and_logout(tether_home: Path) -> None:
    """`tether mcp login` as the person runs it (the URL on stderr, the answer pasted on
    stdin), then `tether mcp list --json` and `tether mcp logout` on its file."""
    async with oauth_servers() as servers:
        config = paths().config_file
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(f'[mcpServers.docs]\nurl = "{servers.mcp_url}"\n')
        async with await anyio.open_process(
            [*TETHER, "mcp", "login", "docs", "--json"], env=person_env()
        ) as proc:
            assert proc.stdin is not None
            assert proc.stdout is not None
            assert proc.stderr is not None
            shown = b""
            with anyio.fail_after(STARTING):  # it imports the MCP SDK first
                async for chunk in proc.stderr:
                    shown += chunk
                    if b"press Enter" in shown:
                        break
            url = shown.split(b"open this URL\n", 1)[1].split()[0].decode()
            with anyio.fail_after(30):
                async with httpx2.AsyncClient(timeout=10) as browser:
                    answer = await browser.get(url)
                await proc.stdin.send(answer.headers["location"].encode() + b"\n")
                out = b"".join([chunk async for chunk in proc.stdout])
                assert await proc.wait() == 0
        view = json.loads(out)
        assert view["server"] == "docs"
        assert (view["authorised"], view["tools"]) == (True, 1)
        listed = json.loads(invoke(list_servers, "--json").output)["servers"]
        assert [(s["name"], s["auth"], s["refreshable"]) for s in listed] == [
            ("docs", "authorised", True)
        ]
        assert invoke(logout, "docs").output == (
            f"removed the tokens for MCP server 'docs' ({view['file']})\n"
        )
        assert not await anyio.Path(view["file"]).exists()
        listed = json.loads(invoke(list_servers, "--json").output)["servers"]
        assert listed[0]["auth"] == "not authorised"


def test_an_entry_names_its_oauth_client() -> None:
    """A pre-registered client (its secret sent by Basic auth unless the entry says
    otherwise) and a client metadata document's URL; a bad table is one line."""
    client = OAuthClient.parse({"client_id": "me", "client_secret": "s"})
    info = client.registration("http://127.0.0.1:9/callback")
    assert info is not None
    assert (info.client_id, info.client_secret) == ("me", "s")
    assert info.token_endpoint_auth_method == "client_secret_basic"
    public = OAuthClient.parse({"client_id": "me"}).registration("http://x/callback")
    assert public is not None
    assert public.token_endpoint_auth_method == "none"
    assert OAuthClient.parse({}).registration("http://x/callback") is None
    for raw, why in [
        ({"client_secret": "s"}, "needs `oauth.client_id`"),
        ({"id": "me"}, "not id"),
        ({"client_id": ""}, "table of non-empty strings"),
        ({"client_metadata_url": "http://x/c.json"}, "must be an https:// URL"),
        ({"client_id": "me", "token_endpoint_auth_method": "jwt"}, "one of"),
    ]:
        with pytest.raises(ValueError, match=why):
            OAuthClient.parse(raw)


@pytest.mark.anyio
async def test_a_login_asks_for_the_scope_a_step_up_wanted(tether_home: Path) -> None:
    """A step-up no one answered mid-session is kept; the next login's request keeps
    it beside the scope its own challenge names, and the tokens that grant it end it."""
    url = "http://127.0.0.1:1/mcp"
    TokenFile.open("docs", url).want("read write")
    file = TokenFile.open("docs", url, start_over=True)
    file.forget(client=True)  # as a login does

    async def no_browser(url: str) -> None:
        raise AssertionError(url)

    async def no_code() -> AuthorizationCodeResult:
        raise AssertionError("not asked")

    provider = provider_for(
        file,
        redirect_uri="http://127.0.0.1:9/callback",
        redirect_handler=no_browser,
        callback_handler=no_code,
    )
    metadata = provider.context.client_metadata
    metadata.scope = "read"  # what the SDK's flow sets from the login's own 401
    assert set((metadata.scope or "").split()) == {"read", "write"}
    assert "at_least" not in metadata.model_dump()  # never sent at registration
    await file.set_tokens(OAuthToken(access_token="t", scope="read write"))
    assert TokenFile.open("docs", url).wanted_scope is None
