"""WebFetch against a real HTTP server on loopback: text, bounds, and a stop that closes."""

from __future__ import annotations

import http.server
import threading
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import pytest

from tether import Runtime
from tether._config import Config
from tether.errors import ErrorCode, ToolFailed
from tether.host import PermissionRequest, StopClass, ToolContext
from tether.host.tools import webfetch as webfetch_module
from tether.host.tools.webfetch import WebFetch

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

PAGE = b"""<!doctype html><html><head><title>T</title>
<style>body { color: red }</style><script>var secret = 1;</script></head>
<body><h1>Stop honestly</h1><p>A <b>prompt</b> stop, see <a href="/docs">the docs</a>.</p>
<ul><li>one</li><li>two</li></ul></body></html>"""
BIG = 6 * 1024 * 1024


class Server(http.server.ThreadingHTTPServer):
    """A loopback server whose `/drip` handler reports when its client went away."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.dripping = threading.Event()
        self.client_gone = threading.Event()
        self.release = threading.Event()
        self.seen: list[tuple[str, str]] = []
        """The path and `Host` header of every request received."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients that hang up early are part of these tests, not errors."""

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    @property
    def site(self) -> Server:
        """The server as this module's class: only `Server` makes these handlers."""
        assert isinstance(self.server, Server)
        return self.server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def send(self, status: int, ctype: str, body: bytes, **headers: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        path = self.path
        self.site.seen.append((path, self.headers.get("Host", "")))
        if path == "/page":
            self.send(200, "text/html; charset=utf-8", PAGE)
        elif path == "/text":
            self.send(200, "text/plain; charset=utf-8", "héllo\n".encode())
        elif path == "/latin1":
            self.send(200, "text/plain; charset=iso-8859-1", "café".encode("latin-1"))
        elif path == "/json":
            self.send(200, "application/json", b'{"ok": true}')
        elif path == "/png":
            self.send(200, "image/png", b"\x89PNG\r\n\x1a\n" + bytes(100))
        elif path == "/missing":
            self.send(404, "text/plain", b"no")
        elif path.startswith("/hop/"):
            left = int(path.rsplit("/", 1)[1])
            target = "/text" if left == 0 else f"/hop/{left - 1}"
            self.send(302, "text/plain", b"", Location=target)
        elif path == "/ftp":
            self.send(302, "text/plain", b"", Location="ftp://127.0.0.1/x")
        elif path.startswith("/to?"):
            self.send(302, "text/plain", b"", Location=path[len("/to?") :])
        elif path == "/big":
            self.send(200, "text/plain", b"x" * BIG)
        elif path == "/drip":
            self.drip()
        else:
            self.send(404, "text/plain", b"")

    def drip(self) -> None:
        """Send a chunked body slowly until the client closes the connection."""
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for n in range(1000):
                self.wfile.write(b"6\r\nchunk\n\r\n")
                self.wfile.flush()
                if n == 0:
                    self.site.dripping.set()
                if self.site.release.wait(0.02):
                    break
        except OSError:
            self.site.client_gone.set()
            return
        # Only a finished loop lands here: the client stayed, which the test rejects.


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server()
    thread = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.release.set()
        srv.shutdown()
        srv.server_close()
        thread.join(5)


def make_ctx(workspace: Path) -> ToolContext:
    return ToolContext(call_id="call-1", session_id="session-1", workspace=workspace)


def fetcher(**kwargs: Any) -> WebFetch:
    # Loopback must not go through a proxy that the environment may name.
    return WebFetch(trust_env=False, **kwargs)


async def fetch(workspace: Path, url: str, tool: WebFetch | None = None) -> str:
    return await (tool or fetcher()).run(make_ctx(workspace), {"url": url})


def test_tools_returns_webfetch_as_a_read_only_tool() -> None:
    """`tools(config)` gives WebFetch, class READ_ONLY, matched by `url`."""
    (tool,) = webfetch_module.tools(Config())
    assert (tool.name, tool.stop_class, tool.subject_field) == (
        "WebFetch",
        StopClass.READ_ONLY,
        "url",
    )


@pytest.mark.anyio
async def test_webfetch_turns_html_into_markdown(
    workspace: Path, server: Server
) -> None:
    """HTML comes back as Markdown: headings, emphasis, links, lists; no script or style."""
    out = await fetch(workspace, f"{server.base}/page")
    assert out.startswith(f"URL: {server.base}/page\nContent-Type: text/html\n")
    assert "# Stop honestly" in out
    assert "A **prompt** stop, see [the docs](/docs)." in out
    assert "* one" in out or "- one" in out
    assert "secret" not in out
    assert "color: red" not in out


@pytest.mark.anyio
async def test_webfetch_returns_text_and_json_as_they_are(
    workspace: Path, server: Server
) -> None:
    """Plain text and JSON bodies are returned decoded, with their charset."""
    assert (await fetch(workspace, f"{server.base}/text")).endswith("\n\nhéllo")
    assert (await fetch(workspace, f"{server.base}/latin1")).endswith("\n\ncafé")
    assert (await fetch(workspace, f"{server.base}/json")).endswith('{"ok": true}')


@pytest.mark.anyio
async def test_webfetch_echoes_the_prompt(workspace: Path, server: Server) -> None:
    """The prompt is echoed in the header; the page itself is not filtered."""
    out = await fetcher().run(
        make_ctx(workspace),
        {"url": f"{server.base}/text", "prompt": "find the greeting"},
    )
    assert "Prompt: find the greeting" in out
    assert out.endswith("héllo")


@pytest.mark.anyio
async def test_webfetch_refuses_binary_content(workspace: Path, server: Server) -> None:
    """A body that is not text is described, not dumped."""
    out = await fetch(workspace, f"{server.base}/png")
    assert out.endswith(
        "returned image/png (108 bytes), not text; WebFetch shows text only."
    )


@pytest.mark.anyio
async def test_webfetch_http_error_status_fails(
    workspace: Path, server: Server
) -> None:
    """An HTTP error status fails the call with the status."""
    with pytest.raises(ToolFailed, match="HTTP 404"):
        await fetch(workspace, f"{server.base}/missing")


@pytest.mark.anyio
async def test_webfetch_follows_redirects_up_to_the_limit(
    workspace: Path, server: Server
) -> None:
    """Five redirects are followed; the sixth is refused with a clear message."""
    out = await fetch(workspace, f"{server.base}/hop/4")  # /hop/n redirects n + 1 times
    assert out.startswith(f"URL: {server.base}/text")
    with pytest.raises(ToolFailed, match="redirected more than 5 times"):
        await fetch(workspace, f"{server.base}/hop/5")


@pytest.mark.anyio
@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "ftp://example.com/x", "nothing"]
)
async def test_webfetch_fetches_http_and_https_only(workspace: Path, url: str) -> None:
    """Other schemes are refused before any connection is made."""
    with pytest.raises(ToolFailed, match="http:// and https:// URLs only"):
        await fetch(workspace, url)


@pytest.mark.anyio
async def test_webfetch_redirect_to_another_scheme_fails(
    workspace: Path, server: Server
) -> None:
    """A redirect to a non-HTTP scheme is not followed."""
    out = await fetch(workspace, f"{server.base}/ftp")
    assert "redirects to ftp://127.0.0.1/x" in out
    assert "does not follow" in out


@pytest.mark.anyio
async def test_webfetch_stops_reading_at_the_size_bound(
    workspace: Path, server: Server
) -> None:
    """A body past the size bound is cut there and the output says so."""
    tool = fetcher(max_bytes=100_000, max_output_chars=1_000_000)
    out = await fetch(workspace, f"{server.base}/big", tool)
    assert out.split("\n\n", 1)[1].count("x") == 100_000
    assert out.endswith("[body cut at the size bound of 100000 bytes]")


@pytest.mark.anyio
async def test_webfetch_time_bound_ends_the_fetch(
    workspace: Path, server: Server
) -> None:
    """A body that never ends is cut by the time bound: TOOL_TIMEOUT."""
    with anyio.fail_after(10), pytest.raises(ToolFailed) as info:
        await fetch(workspace, f"{server.base}/drip", fetcher(timeout=0.3))
    assert info.value.code is ErrorCode.TOOL_TIMEOUT
    with anyio.fail_after(5):
        assert await anyio.to_thread.run_sync(server.client_gone.wait, 5)


@pytest.mark.rule("S14")
@pytest.mark.anyio
async def test_s14_webfetch_stop_closes_the_connection(
    workspace: Path, server: Server
) -> None:
    """Cancelling a fetch mid-body closes the connection: the server sees its client go."""
    scope = anyio.CancelScope()
    ended = anyio.Event()

    async def call() -> None:
        with scope:
            await fetch(workspace, f"{server.base}/drip")
        ended.set()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await anyio.to_thread.run_sync(server.dripping.wait, 5)
            scope.cancel()  # what the host does to a READ_ONLY call on a stop
            await ended.wait()
        assert await anyio.to_thread.run_sync(server.client_gone.wait, 5)
    assert scope.cancelled_caught


@pytest.mark.anyio
async def test_webfetch_reports_a_redirect_to_another_host_instead_of_following_it(
    workspace: Path, server: Server
) -> None:
    """A redirect to another host is reported, not fetched, so fetching it is a call of
    its own that permission rules judge (regression: deny rules were bypassed)."""
    other = server.base.replace("127.0.0.1", "localhost")
    out = await fetch(workspace, f"{server.base}/to?{other}/text")
    assert f"redirects to {other}/text" in out
    assert "does not follow" in out


async def _fetch_through_runtime(
    workspace: Path, url: str, *, allow: list[str], approve: bool
) -> tuple[Any, list[PermissionRequest]]:
    asked: list[PermissionRequest] = []

    async def approver(request: PermissionRequest) -> bool:
        asked.append(request)
        return approve

    async with Runtime(
        workspace=workspace,
        tools=[WebFetch()],
        permissions={"allow": allow},
        approver=approver,
        guard=False,
    ) as rt:
        session = rt.session()
        async with session.turn() as turn:
            result = await turn.call("WebFetch", {"url": url})
    return result, asked


@pytest.mark.anyio
@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "127.1"])
async def test_webfetch_of_loopback_asks_and_a_no_sends_nothing(
    workspace: Path, server: Server, host: str
) -> None:
    """S15: with no rules, a fetch of a loopback address (literal, short form or
    `localhost`) asks; the approver says no, and the server receives nothing."""
    url = f"http://{host}:{server.server_address[1]}/text"
    result, asked = await _fetch_through_runtime(
        workspace, url, allow=[], approve=False
    )
    assert result.code is ErrorCode.PERMISSION_DENIED
    assert [r.tool for r in asked] == ["WebFetch"]
    assert "127.0.0.1" in asked[0].input["_addresses"]
    assert server.seen == []


@pytest.mark.anyio
async def test_webfetch_of_loopback_runs_with_an_allow_rule_naming_it(
    workspace: Path, server: Server
) -> None:
    """S15: an allow rule naming the host lets the loopback fetch run unasked; a bare
    `WebFetch` rule does not (it still asks)."""
    url = f"{server.base}/text"
    result, asked = await _fetch_through_runtime(
        workspace, url, allow=["WebFetch(domain:127.0.0.1)"], approve=False
    )
    assert not result.is_error, result.output
    assert result.output.endswith("héllo")
    assert asked == []
    result, asked = await _fetch_through_runtime(
        workspace, url, allow=["WebFetch"], approve=False
    )
    assert result.code is ErrorCode.PERMISSION_DENIED
    assert len(asked) == 1


@pytest.mark.anyio
async def test_webfetch_redirect_to_a_local_host_is_a_call_of_its_own(
    workspace: Path, server: Server
) -> None:
    """S15: a redirect to another host (here `localhost`) is not followed: fetching it
    is a new call, which the rules judge (and which asks)."""
    other = f"http://localhost:{server.server_address[1]}/text"
    result, _ = await _fetch_through_runtime(
        workspace,
        f"{server.base}/to?{other}",
        allow=["WebFetch(domain:127.0.0.1)"],
        approve=False,
    )
    assert f"redirects to {other}" in result.output
    assert [path for path, _ in server.seen] == [f"/to?{other}"]


@pytest.mark.anyio
async def test_webfetch_connects_to_the_address_judged_and_keeps_the_name(
    workspace: Path, server: Server
) -> None:
    """S15: the tool connects to the addresses the host looked up for the rules and
    never resolves the name again; the name stays in the `Host` header and output."""
    port = server.server_address[1]
    url = f"http://pinned.invalid:{port}/hop/1"
    out = await fetcher().run(
        make_ctx(workspace), {"url": url, "_addresses": ["127.0.0.1"]}
    )
    assert out.startswith(f"URL: http://pinned.invalid:{port}/text")
    assert out.endswith("héllo")
    assert [host for _, host in server.seen] == [f"pinned.invalid:{port}"] * 3


@pytest.mark.anyio
async def test_webfetch_look_up_resolves_once_for_the_rules(server: Server) -> None:
    """The host's look-up puts the resolved addresses in the input the rules judge;
    an input that is no http(s) URL is left as it is."""
    args = await WebFetch().look_up({"url": f"{server.base}/text"})
    assert args["_addresses"] == ["127.0.0.1"]
    assert await WebFetch().look_up({"url": "ftp://x/"}) == {"url": "ftp://x/"}


@pytest.mark.anyio
async def test_webfetch_of_a_name_that_does_not_resolve_fails(workspace: Path) -> None:
    """A host with no address fails the call without connecting anywhere."""
    with pytest.raises(ToolFailed, match="does not resolve"):
        await fetcher().run(
            make_ctx(workspace), {"url": "http://nothing.invalid/", "_addresses": []}
        )
