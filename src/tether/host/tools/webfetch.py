"""The WebFetch tool: one HTTP(S) GET, bounded in size, time and redirects.

The body is streamed and reading stops at the size bound; HTML is turned into Markdown
with `markdownify`. A stop cancels the request: leaving the httpx client's scope closes
the connection, so nothing keeps downloading after the call ends. WebFetch does not
decide which hosts may be fetched: permission rules do.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final, final

import anyio
import anyio.to_thread
import attrs
import httpx
import markdownify
import pydantic

from ..._config import Config
from ..._threads import builtin_threads
from ...errors import ErrorCode, ToolFailed
from .._tool import StopClass, Tool, ToolContext, TypedTool
from ._paths import run_stoppable

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

    async def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> str:
        """Fetch the URL; a stop or cancellation closes the connection.

        Raises:
            ToolFailed: bad URL, network error, too many redirects, an HTTP error
                status, or the time bound (`TOOL_TIMEOUT`).
        """
        inp = WebFetchInput.model_validate(dict(args))
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
                page = await run_stoppable(ctx, lambda: self._fetch(url))
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

    async def _fetch(self, url: httpx.URL) -> _Page:
        # Redirects are followed by hand, and only on the same scheme and host: a hop to
        # another host is reported, not fetched, so that fetching it is a call of its
        # own that permission rules (`WebFetch(domain:...)`) judge.
        async with httpx.AsyncClient(
            follow_redirects=False,
            timeout=httpx.Timeout(self.timeout),
            trust_env=self.trust_env,
            headers={"User-Agent": USER_AGENT},
        ) as client:
            current = url
            for _ in range(self.max_redirects + 1):
                async with client.stream("GET", current) as response:
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
                    return await self._read(response)
        raise httpx.TooManyRedirects(f"more than {self.max_redirects} redirects")

    async def _read(self, response: httpx.Response) -> _Page:
        body = bytearray()
        truncated = False
        async for chunk in response.aiter_bytes():
            room = self.max_bytes - len(body)
            body += chunk[:room]
            if len(chunk) > room:
                truncated = True  # size bound: stop reading, close the connection
                break
        return _Page(
            url=str(response.url),
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


def tools(config: Config) -> list[Tool]:
    """Return the WebFetch tool."""
    del config
    return [WebFetch()]
