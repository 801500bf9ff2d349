"""tether's elicitor as the editor's `elicitation/create`.

An MCP server's question to the person during a call (`ElicitationRequest`) goes to the
editor as a form scoped to the session and the tool call it belongs to, once the editor
has the call's `tool_call` update; its answer (accept with the form's content, decline,
cancel) goes back to the server. ACP's `elicitation/create` is part of the SDK's unstable
protocol: tether asks only an editor that said at `initialize` it takes forms
(`clientCapabilities.elicitation.form`); with any other editor the session has no
elicitor, so its MCP servers are not told they may ask, and a question is declined with
the reason in the call's result.

A stop cancels the wait, as it cancels a permission prompt's (the server is told
`cancel`); the editor is told too, with `$/cancel_request` naming the request, since a
stop that did not come from `session/cancel` (a closed session, a stopped prompt
request) leaves the editor no other sign the form is void.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from acp.schema import (
    AcceptElicitationResponse,
    CancelElicitationResponse,
    DeclineElicitationResponse,
    ElicitationFormSessionMode,
    ElicitationSchema,
)

from ..runtime import ElicitationAnswer
from ._transport import withdrawn_on_stop

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from acp import Client
    from acp.schema import ClientCapabilities

    from ..runtime import ElicitationRequest
    from ._permissions import PermissionBridge

__all__ = ("ElicitationBridge", "takes_forms")


def takes_forms(capabilities: ClientCapabilities | None) -> bool:
    """Whether the editor said it answers form questions (`elicitation.form`)."""
    elicitation = capabilities.elicitation if capabilities is not None else None
    return elicitation is not None and elicitation.form is not None


class ElicitationBridge:
    """The elicitor of one ACP session: puts a server's question to the editor."""

    def __init__(
        self,
        client: Client,
        permissions: PermissionBridge,
        *,
        withdraw: Callable[[str | int], Awaitable[None]],
    ) -> None:
        self._client = client
        self._permissions = permissions
        self._withdraw = withdraw
        self.asked = 0
        """Questions sent to the editor."""

    async def __call__(self, request: ElicitationRequest) -> ElicitationAnswer:
        """Ask the editor; return the person's answer.

        Raises:
            pydantic.ValidationError: the server's form is not one ACP can carry (the
                question is then declined, the reason in the call's result).
        """
        schema = ElicitationSchema.model_validate(request.schema)
        await self._permissions.wait_announced(request.call_id)
        mode = ElicitationFormSessionMode(
            session_id=request.session_id,
            tool_call_id=request.call_id,
            requested_schema=schema,
        )
        self.asked += 1
        # A stop: the editor's form is void; it is told, briefly.
        async with withdrawn_on_stop(self._withdraw):
            response = await self._client.create_elicitation(
                message=f"{request.server} asks: {request.message}", mode=mode
            )
        match response:
            case AcceptElicitationResponse(content=content):
                return ElicitationAnswer("accept", dict(content or {}))
            case DeclineElicitationResponse():
                return ElicitationAnswer("decline")
            case CancelElicitationResponse():
                return ElicitationAnswer("cancel")
            case _:  # an action this protocol version does not name: not a yes
                return ElicitationAnswer("decline")
