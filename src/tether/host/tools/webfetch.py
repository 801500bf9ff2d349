"""The WebFetch tool: one HTTP(S) GET, bounded in size, time and redirects.

The body is streamed and reading stops at the size bound; HTML is turned into Markdown
with `markdownify`. A stop cancels the request: leaving the httpx client's scope closes
the connection, so nothing keeps downloading after the call ends. WebFetch does not
decide which hosts may be fetched: permission rules do.

The URL's host is resolved once, before the rules judge the call (`look_up`, awaited
by the host): the rules see the addresses (a loopback, link-local or private one asks,
S15), and WebFetch connects to them (the next one only if a connection is refused), with the name kept in the `Host`
header and as the TLS server name (httpx's `sni_hostname` request extension), so the
certificate is checked against the name. No second lookup happens, so a name cannot
resolve to one address for the check and another for the connection (DNS rebinding).
"""

from __future__ import annotations

import re
import socket
from typing import TYPE_CHECKING, Any, Final, final

import anyio
import anyio.to_thread
import attrs
import httpx
import markdownify
import pydantic

from ..._threads import builtin_threads
from ...errors import ErrorCode, ToolFailed
from .._addresses import PINNED_FIELD
from .._tool import StopClass, Tool, ToolContext, TypedTool
from ._paths import run_stoppable

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..._config import Config

__all__ = ("WebFetch", "tools")

USER_AGENT: Final = "tether-webfetch/0.1 (+https://pypi.org/project/tether/)"
_HTML_TYPES: Final = ("text/html", "application/xhtml+xml")
_TEXT_TYPES: Final = (
    "application/json",
    "application/xml",
    "application/javascript",
    "application/x-yaml",
    "application/yaml",
    "application/toml",
)
_BLANK_RUNS: Final = re.compile(r"\n{3,}")


class WebFetchInput(pydantic.BaseModel):
    """Input of WebFetch."""

    model_config = pydantic.ConfigDict(extra="forbid")

    url: str = pydantic.Field(description="The http:// or https:// URL to fetch.")
    prompt: str | None = pydantic.Field(
        default=None,
        description="What to look for in the page; echoed back, the page is not filtered.",
    )


@attrs.frozen
class _Page:
    url: str
    status: int
    reason: str
    content_type: str
    encoding: str
    body: bytes
    truncated: bool
    elsewhere: str | None = None
    """A redirect to another host or scheme, not followed."""


HTML_CONVERT_LIMIT = 1_000_000
"""Characters of HTML converted to Markdown at most: the conversion is CPU work that a
stop abandons but cannot interrupt, so its input is bounded."""


def _to_markdown(html: str) -> str:
    text: str = markdownify.markdownify(html, heading_style="ATX")
    return _BLANK_RUNS.sub("\n\n", text).strip()


@final
class WebFetch(TypedTool):
    """Fetch a URL and return its text (HTML as Markdown)."""

    input_model: type[pydantic.BaseModel] = WebFetchInput

    name = "WebFetch"
    stop_class = StopClass.READ_ONLY
    subject_field: str | None = "url"
    looks_up = True
    description = (
        "Fetch an http(s) URL and return its content as text; HTML pages are converted "
        "to Markdown. Redirects are followed a few times; large bodies are cut."
    )

    def __init__(
        self,
        *,
        max_bytes: int = 5 * 1024 * 1024,
        timeout: float = 30.0,
        max_redirects: int = 5,
        max_output_chars: int = 100_000,
        trust_env: bool = True,
    ) -> None:
        """Make the tool.

        Args:
            max_bytes: body bytes read at most; reading stops there.
            timeout: seconds the whole fetch may take (`TOOL_TIMEOUT` past it).
            max_redirects: redirects followed at most.
            max_output_chars: bound on the text returned.
            trust_env: use proxy settings and certificates from the environment.
        """
        self.max_bytes = max_bytes
        self.timeout = timeout
        self.max_redirects = max_redirects
        self.max_output_chars = max_output_chars
        self.trust_env = trust_env

    async def look_up(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Resolve the URL's host once; its addresses go in the input for the rules.

        An input that is no http(s) URL is returned as it is (`run` refuses it).
        """
        out = dict(args)
        url = _http_url(args.get("url"))
        if url is not None:
            out[PINNED_FIELD] = await self._resolve(url)
        return out

    async def _resolve(self, url: httpx.URL) -> list[str]:
        """The addresses `url`'s host resolves to, in the resolver's order; [] if none."""
        port = url.port or (443 if url.scheme == "https" else 80)
        with anyio.move_on_after(self.timeout):
            try:
                infos = await anyio.getaddrinfo(url.host, port, type=socket.SOCK_STREAM)
            except OSError:
                return []
            return list(dict.fromkeys(str(info[4][0]) for info in infos))
        return []

    async def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> str:
        """Fetch the URL; a stop or cancellation closes the connection.

        Raises:
            ToolFailed: bad URL, a host that does not resolve, network error, too many
                redirects, an HTTP error status, or the time bound (`TOOL_TIMEOUT`).
        """
        pinned = args.get(PINNED_FIELD)
        inp = WebFetchInput.model_validate(
            {k: v for k, v in args.items() if k != PINNED_FIELD}
        )
        try:
            url = httpx.URL(inp.url)
        except httpx.InvalidURL as exc:
            raise ToolFailed(f"not a valid URL: {exc}") from None
        if url.scheme not in ("http", "https") or not url.host:
            raise ToolFailed(
                f"WebFetch fetches http:// and https:// URLs only, not {inp.url!r}"
            )
        try:
            with anyio.fail_after(self.timeout):
                # Called without a host (no look-up before): resolve once, here.
                addresses = (
                    [a for a in pinned if isinstance(a, str)]
                    if isinstance(pinned, list)
                    else await self._resolve(url)
                )
                if not addresses:
                    raise ToolFailed(
                        f"fetching {url} failed: {url.host} does not resolve"
                    )
                page = await run_stoppable(ctx, lambda: self._fetch_any(url, addresses))
        except TimeoutError:
            raise ToolFailed(
                f"fetching {url} took longer than {self.timeout:g} s",
                code=ErrorCode.TOOL_TIMEOUT,
            ) from None
        except httpx.TooManyRedirects:
            raise ToolFailed(
                f"{url} redirected more than {self.max_redirects} times; not followed"
            ) from None
        except httpx.HTTPError as exc:
            raise ToolFailed(
                f"fetching {url} failed: {str(exc) or type(exc).__name__}"
            ) from None
        return await self._render(inp, page)

    async def _fetch_any(self, url: httpx.URL, addresses: list[str]) -> _Page:
        """Fetch from the first of `addresses` that accepts a connection."""
        for address in addresses[:-1]:
            try:
                return await self._fetch(url, address)
            except httpx.ConnectError:
                continue  # every address was judged: the next one may serve
        return await self._fetch(url, addresses[-1])

    async def _fetch(self, url: httpx.URL, address: str) -> _Page:
        # Redirects are followed by hand, and only on the same scheme and host: a hop to
        # another host is reported, not fetched, so that fetching it is a call of its
        # own that permission rules (`WebFetch(domain:...)`, local addresses) judge.
        # Every hop goes to `address`, the one the rules judged.
        async with httpx.AsyncClient(
            follow_redirects=False,
            timeout=httpx.Timeout(self.timeout),
            trust_env=self.trust_env,
            headers={"User-Agent": USER_AGENT},
        ) as client:
            current = url
            for _ in range(self.max_redirects + 1):
                request = _pinned_request(client, current, address)
                response = await client.send(request, stream=True)
                try:
                    location = response.headers.get("location")
                    if response.is_redirect and location:
                        target = current.join(location)
                        if (target.scheme, target.host, target.port) != (
                            url.scheme,
                            url.host,
                            url.port,
                        ):
                            return _Page(
                                url=str(current),
                                status=response.status_code,
                                reason=response.reason_phrase,
                                content_type="",
                                encoding="utf-8",
                                body=b"",
                                truncated=False,
                                elsewhere=str(target),
                            )
                        current = target
                        continue
                    return await self._read(response, current)
                finally:
                    await response.aclose()
        raise httpx.TooManyRedirects(f"more than {self.max_redirects} redirects")

    async def _read(self, response: httpx.Response, url: httpx.URL) -> _Page:
        body = bytearray()
        truncated = False
        async for chunk in response.aiter_bytes():
            room = self.max_bytes - len(body)
            body += chunk[:room]
            if len(chunk) > room:
                truncated = True  # size bound: stop reading, close the connection
                break
        return _Page(
            url=str(url),
            status=response.status_code,
            reason=response.reason_phrase,
            content_type=response.headers.get("content-type", ""),
            encoding=response.encoding or "utf-8",
            body=bytes(body),
            truncated=truncated,
        )

    async def _render(self, inp: WebFetchInput, page: _Page) -> str:
        if page.elsewhere is not None:
            return (
                f"URL: {page.url}\n\n{page.url} redirects to {page.elsewhere}, on another "
                f"host or scheme; WebFetch does not follow that on its own. Fetch "
                f"{page.elsewhere} to read it."
            )
        if page.status >= 400:
            raise ToolFailed(f"{page.url} answered HTTP {page.status} {page.reason}")
        mime = page.content_type.split(";")[0].strip().lower()
        html_cut = False
        try:
            text = page.body.decode(page.encoding, errors="replace")
        except LookupError:
            text = page.body.decode("utf-8", errors="replace")
        if mime in _HTML_TYPES or (not mime and "<html" in text[:1024].lower()):
            # Pure CPU work on a bounded input with no side effect: abandoning the
            # thread on a stop hides nothing, and the call must not wait for it.
            converted = text[:HTML_CONVERT_LIMIT]
            html_cut = len(text) > HTML_CONVERT_LIMIT
            text = await anyio.to_thread.run_sync(
                _to_markdown,
                converted,
                abandon_on_cancel=True,
                limiter=builtin_threads(),
            )
        elif not (
            mime.startswith("text/") or mime in _TEXT_TYPES or mime.endswith("+json")
        ):
            return (
                f"{page.url} returned {mime or 'an unknown type'} "
                f"({len(page.body)} bytes), not text; WebFetch shows text only."
            )
        notes: list[str] = []
        if html_cut:
            notes.append(
                f"[HTML cut at {HTML_CONVERT_LIMIT} characters before conversion]"
            )
        if page.truncated:
            notes.append(f"[body cut at the size bound of {self.max_bytes} bytes]")
        if len(text) > self.max_output_chars:
            text = text[: self.max_output_chars]
            notes.append(f"[text cut at {self.max_output_chars} characters]")
        head = [f"URL: {page.url}", f"Content-Type: {mime or 'unknown'}"]
        if inp.prompt:
            head.append(f"Prompt: {inp.prompt}")
        return "\n".join([*head, "", text, *notes]).rstrip("\n")


def _http_url(text: object) -> httpx.URL | None:
    """`text` as an http(s) URL with a host, or None."""
    if not isinstance(text, str):
        return None
    try:
        url = httpx.URL(text)
    except httpx.InvalidURL:
        return None
    return url if url.scheme in ("http", "https") and url.host else None


def _pinned_request(
    client: httpx.AsyncClient, url: httpx.URL, address: str
) -> httpx.Request:
    """A GET of `url` sent to `address`: the name stays in `Host` and in TLS.

    The URL's host is swapped for the address, so httpx connects there without a
    lookup of its own; `Host` keeps the name, and `sni_hostname` makes httpx send the
    name as the TLS server name and check the certificate against it.
    """
    extensions = {"sni_hostname": url.host} if url.scheme == "https" else {}
    return client.build_request(
        "GET",
        url.copy_with(host=address.split("%", 1)[0]),
        headers={"Host": url.netloc.decode("ascii")},
        extensions=extensions,
    )


def tools(config: Config) -> list[Tool]:
    """Return the WebFetch tool."""
    del config
    return [WebFetch()]
