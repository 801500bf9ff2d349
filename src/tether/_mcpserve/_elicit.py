"""A fronted MCP server's question, relayed to the MCP client of `tether mcp serve`.

`tether mcp serve` fronts the person's MCP servers through one `Runtime`; the
`ElicitRelay` is that runtime's elicitor. A fronted server's `elicitation/create`
during a call goes, as the client's own `elicitation/create`, to the MCP client whose
`tools/call` the call runs for (`register`), on that request's channel, with the
server named: `<server> asks: <message>`. The client's answer (accept with the form's
content, decline, cancel) goes back to the server.

No one is asked, and the question is declined with the reason in the call's output and
the ledger (`NoOneToAsk`), as an unattended stage's is, when the client did not declare
the elicitation capability, when the call is not a plain `tools/call` of a client still
there (a task of the tasks extension runs after its request has been answered), or when
the request has no channel back to the client (a stateless 2026-07-28 request). A stop
that reaches the call cancels the relayed request, which the SDK withdraws at the
client (`notifications/cancelled`), and the server is told `cancel` (`_mcp.py`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, final

from ..host._protocol import ElicitationAnswer, NoOneToAsk

if TYPE_CHECKING:
    from collections.abc import Callable

    from mcp.server.context import ServerRequestContext

    from ..host._protocol import ElicitationRequest

__all__ = ("ElicitRelay",)


@final
class ElicitRelay:
    """The elicitor of the runtime `tether mcp serve` serves: asks the calling client."""

    def __init__(self) -> None:
        self._askers: dict[str, ServerRequestContext[Any, Any]] = {}
        """Per session id: the client request its call runs for."""
        self.relayed = 0
        """Questions sent to a client."""

    def register(
        self, session_id: str, context: ServerRequestContext[Any, Any]
    ) -> Callable[[], None]:
        """Questions of `session_id`'s calls go to `context`'s client, until undone."""
        self._askers[session_id] = context

        def undo() -> None:
            if self._askers.get(session_id) is context:
                del self._askers[session_id]

        return undo

    async def __call__(self, request: ElicitationRequest) -> ElicitationAnswer:
        """Ask the client the call runs for; return its answer.

        Raises:
            NoOneToAsk: no client can be asked; the line says why.
        """
        from mcp.shared.exceptions import NoBackChannelError

        context = self._askers.get(request.session_id)
        if context is None:
            raise NoOneToAsk(
                "the call is not a request of an MCP client of tether mcp serve "
                "that waits for its answer"
            )
        session = context.session
        capabilities = session.client_capabilities
        if capabilities is None or capabilities.elicitation is None:
            raise NoOneToAsk(
                "the MCP client of tether mcp serve did not declare elicitation"
            )
        self.relayed += 1
        try:
            result = await session.elicit_form(
                f"{request.server} asks: {request.message}",
                request.schema,
                related_request_id=context.request_id,
            )
        except NoBackChannelError:
            raise NoOneToAsk(
                "the MCP client's request has no channel back to it"
            ) from None
        return ElicitationAnswer(result.action, dict(result.content or {}))
