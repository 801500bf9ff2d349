"""The board's web app (Starlette): GET only, behind a token, live lines by server-sent events.

Every request must carry the board's token: `?token=` on the first one (the URL `tether
board` prints), which answers with a cookie for this board (HttpOnly, SameSite=Strict)
and a redirect to the same page without the token; then the cookie. A request without
either gets 403 and a line that says what to do, nothing of the runs. Only the loopback
names are accepted as `Host` (a page elsewhere cannot rebind a name to this server), and
every answer forbids framing, referrers, caching and any script but the board's own.

The app changes nothing: every route is GET (HEAD); others get 405.
"""

from __future__ import annotations

import hmac
import json
import secrets
from typing import TYPE_CHECKING, Any

import anyio
from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.responses import (
    HTMLResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from starlette.routing import Route

from ..errors import TetherError
from ._page import SCRIPT, STYLE, dom_id, run_section, runs_page, text_page

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

    from starlette.requests import Request
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from ._source import BoardSource, RunCard

__all__ = ("FULL_RUNS", "POLL", "REFUSED", "board_app")

POLL = 0.1
"""Seconds between looks at the runs for the live page."""
_Shown = dict[str, tuple[str, "RunCard", int]]
"""Per run section: the state and card shown, and how many looks found it unchanged."""
_PAGES = 16
"""Front pages whose shown sections are kept for their event streams."""
_SETTLED = 10
"""Looks at a finished run, unchanged, after which the live page stops looking."""
FULL_RUNS = 50
"""Runs shown in full on the front page (per account); older ones in a line each."""
REFUSED = (
    "tether board: this page needs the board's token; open the URL `tether board` "
    "printed (its token is in the board folder of your tether state dir)\n"
)
_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; "
        "connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    ),
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


class _Guard:
    """The token check and the headers every answer carries (pure ASGI middleware)."""

    def __init__(self, app: ASGIApp, *, token: str, cookie: str) -> None:
        self.app = app
        self.token = token.encode()
        self.cookie = cookie

    def _given(self, scope: Scope) -> tuple[bytes | None, bool]:
        """The token the request gives, and whether it came in the query."""
        from urllib.parse import parse_qs

        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        if "token" in query:
            return query["token"][-1].encode(), True
        for name, value in scope.get("headers", ()):
            if name == b"cookie":
                for part in value.decode("latin-1").split(";"):
                    key, _, given = part.strip().partition("=")
                    if key == self.cookie:
                        return given.encode(), False
        return None, False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given, in_query = self._given(scope)
        ok = given is not None and hmac.compare_digest(given, self.token)

        async def headed(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [
                    (k.lower().encode(), v.encode()) for k, v in _HEADERS.items()
                ]
                message = {**message, "headers": headers}
            await send(message)

        if not ok:
            await PlainTextResponse(REFUSED, status_code=403)(scope, receive, headed)
            return
        if in_query:
            # The token leaves the address bar (and the history) for a cookie.
            answer = RedirectResponse(scope.get("path", "/") or "/", status_code=303)
            answer.set_cookie(
                self.cookie, self.token.decode(), httponly=True, samesite="strict"
            )
            await answer(scope, receive, headed)
            return
        await self.app(scope, receive, headed)


def _unreadable(source: BoardSource, run: str, exc: Exception) -> RunCard:
    from ._source import RunCard

    why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return RunCard(
        account=source.account, id=run, state="unreadable", started_at=0.0, note=why
    )


def _runs_of(source: BoardSource) -> list[RunCard]:
    """The source's runs; one card that says why when they cannot be read."""
    try:
        return source.runs()
    except (TetherError, OSError) as exc:
        return [_unreadable(source, "-", exc)]


def _run_of(source: BoardSource, run: str) -> RunCard | None:
    try:
        return source.run(run)
    except (TetherError, OSError) as exc:
        return _unreadable(source, run, exc)


class _Board:
    """The routes over the sources, each read in a worker thread, one call at a time."""

    def __init__(self, sources: Sequence[BoardSource], poll: float) -> None:
        self.sources = {source.account: source for source in sources}
        self.poll = poll
        self.limiter = anyio.CapacityLimiter(1)
        self.pages: dict[str, _Shown] = {}
        """What each recent front page showed, for its event stream to go on from."""

    async def _call(self, fn: Any, *args: Any) -> Any:
        return await anyio.to_thread.run_sync(fn, *args, limiter=self.limiter)

    def _cards(self) -> tuple[list[RunCard], list[RunCard]]:
        full: list[RunCard] = []
        older: list[RunCard] = []
        for source in self.sources.values():
            runs = _runs_of(source)
            for row in runs[:FULL_RUNS]:
                card = row if row.note else _run_of(source, row.id)
                if card is not None:
                    full.append(card)
            older.extend(runs[FULL_RUNS:])
        full.sort(key=lambda r: r.started_at, reverse=True)
        return full, older

    async def front(self, request: Request) -> Response:
        full, older = await self._call(self._cards)
        page = secrets.token_hex(8)
        self.pages[page] = {
            dom_id("run", c.account, c.id): (c.state, c, 0) for c in full
        }
        while len(self.pages) > _PAGES:
            del self.pages[next(iter(self.pages))]
        return HTMLResponse(runs_page(full, older, shown=page))

    async def diff(self, request: Request) -> Response:
        account = request.path_params["account"]
        run, lane = request.path_params["run"], request.path_params["lane"]
        source = self.sources.get(account)
        if source is None:
            return PlainTextResponse(f"no account {account} on this board\n", 404)
        text = await self._call(source.diff, run, lane)
        return HTMLResponse(text_page(f"{account} {run} {lane}: diff", text, diff=True))

    async def digest(self, request: Request) -> Response:
        parts = []
        for source in self.sources.values():
            text = await self._call(source.digest)
            if text is not None:
                parts.append(f"[{source.account}]\n{text}")
        return HTMLResponse(
            text_page("today's digest", "\n\n".join(parts) if parts else None)
        )

    def _changed(self, shown: _Shown) -> list[tuple[str, str]]:
        """Sections that changed since `shown` (which is updated), newest run first.

        A finished run is looked at a few times more (its last ledger rows follow its
        state), then no more: nothing of it changes.
        """
        out = []
        for source in self.sources.values():
            for row in _runs_of(source)[:FULL_RUNS]:
                key = dom_id("run", row.account, row.id)
                before = shown.get(key)
                if (
                    before is not None
                    and before[2] >= _SETTLED
                    and not row.active
                    and before[0] == row.state
                ):
                    continue
                card = row if row.note else _run_of(source, row.id)
                if card is None:
                    continue
                if before is not None and before[1] == card:
                    shown[key] = (card.state, card, before[2] + 1)
                    continue
                shown[key] = (card.state, card, 0)
                out.append((key, run_section(card)))
        return out

    async def events(self, request: Request) -> Response:
        async def stream() -> AsyncIterator[dict[str, str]]:
            # Go on from what the page showed (its sections are not sent again).
            shown = self.pages.pop(request.query_params.get("page", ""), {})
            while True:
                for key, html in reversed(await self._call(self._changed, shown)):
                    data = json.dumps({"id": key, "html": html})
                    yield {"event": "run", "data": data}
                await anyio.sleep(self.poll)

        return EventSourceResponse(stream(), ping=15, send_timeout=10)

    async def script(self, request: Request) -> Response:
        return Response(SCRIPT, media_type="text/javascript")

    async def style(self, request: Request) -> Response:
        return Response(STYLE, media_type="text/css")


def board_app(
    sources: Sequence[BoardSource],
    *,
    token: str,
    port: int,
    poll: float = POLL,
) -> ASGIApp:
    """The board over `sources`, reachable with `token`, served on loopback `port`."""
    board = _Board(sources, poll)
    app = Starlette(
        routes=[
            Route("/", board.front, methods=["GET"]),
            Route("/events", board.events, methods=["GET"]),
            Route("/digest", board.digest, methods=["GET"]),
            Route("/diff/{account}/{run}/{lane}", board.diff, methods=["GET"]),
            Route("/board.js", board.script, methods=["GET"]),
            Route("/board.css", board.style, methods=["GET"]),
        ],
    )
    guarded = _Guard(app, token=token, cookie=f"tether_board_{port}")
    # The name the request was sent to is judged first: a page elsewhere cannot rebind
    # its own name to this server, token or not.
    return TrustedHostMiddleware(guarded, allowed_hosts=["127.0.0.1", "localhost"])
