"""Whether a person at a terminal may authorise an MCP server as it is started.

Authorising tether at a server is the person's act, in a terminal: `tether mcp login
NAME`, or the first `tether chat`. The chat says so by entering its runtime inside
`person_authorises(offer)`; `McpTools.open` reads it (`authoriser()`) and, when a
server's first connection is refused for want of authorisation, awaits
`offer(server, url)` once for that server before it gives up on it: True, the person
authorised it and the server is connected again at once; False, it is skipped as
everywhere else, with the line naming `tether mcp login NAME`.

Everything else that starts servers (`tether acp`, `tether run`, `tether mcp serve`,
`tether tools`, the Agent API) never enters it, so no one is asked there. A context
variable and not a `Runtime` parameter: the runtime knows nothing of terminals, and the
chat is the one caller that has a person in front of it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeAlias

__all__ = ("Authoriser", "authoriser", "person_authorises")

Authoriser: TypeAlias = Callable[[str, str], Awaitable[bool]]
"""`offer(server, url)`: ask the person, log in if they agree; True once authorised.

It says to the person what happened (declined, skipped, failed) itself.
"""

_PERSON: ContextVar[Authoriser | None] = ContextVar("tether_mcp_person", default=None)


@contextmanager
def person_authorises(offer: Authoriser) -> Iterator[None]:
    """MCP servers started inside the block may be authorised by `offer`."""
    token = _PERSON.set(offer)
    try:
        yield
    finally:
        _PERSON.reset(token)


def authoriser() -> Authoriser | None:
    """Who may authorise a server started here (None: no one; it is skipped)."""
    return _PERSON.get()
