"""tether's approver as `session/request_permission`.

The runtime asks its approver whether a call that a rule sends to `ask` may run; here the
question goes to the editor as a permission request with three options: allow once,
allow always (this tool, for the rest of the session), reject. A stop cancels the
approver's wait (the host cancels it before the call could start), so a late answer is
dropped and the call ends `TOOL_ABORTED`; the editor is told with `$/cancel_request`
naming the request, since a stop that did not come from `session/cancel` (a closed or
deleted session, a stopped prompt request) leaves it no other sign the question is void.
An editor that answers `cancelled` (it does so for every pending request after
`session/cancel`) gets the same: the call never runs and ends `TOOL_ABORTED`, a stop and
not a refusal (S9).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import anyio
from acp.schema import (
    AllowedOutcome,
    DeniedOutcome,
    PermissionOption,
    ToolCallUpdate,
)

from ..errors import ToolAborted
from ._transport import withdrawn_on_stop
from ._updates import tool_kind

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from acp import Client

    from ..runtime import PermissionRequest

__all__ = ("ALLOW_ALWAYS", "ALLOW_ONCE", "REJECT_ONCE", "PermissionBridge")

ALLOW_ONCE: Final = "allow_once"
ALLOW_ALWAYS: Final = "allow_always"
REJECT_ONCE: Final = "reject_once"

_OPTIONS: Final = [
    PermissionOption(option_id=ALLOW_ONCE, name="Allow once", kind="allow_once"),
    PermissionOption(option_id=ALLOW_ALWAYS, name="Always allow", kind="allow_always"),
    PermissionOption(option_id=REJECT_ONCE, name="Reject", kind="reject_once"),
]


class PermissionBridge:
    """The approver of one ACP session: asks the editor, remembers "always"."""

    def __init__(
        self,
        client: Client,
        *,
        on_cancelled: Callable[[], None],
        withdraw: Callable[[str | int], Awaitable[None]],
    ) -> None:
        self._client = client
        self._withdraw = withdraw
        self.session_id = ""
        """The ACP session id (set once the session exists)."""
        self._on_cancelled = on_cancelled
        self._announced: dict[str, anyio.Event] = {}
        self.always: set[str] = set()
        """Tools the person allowed for the rest of the session."""
        self.asked = 0
        """Permission requests sent to the editor."""

    async def __call__(self, request: PermissionRequest) -> bool:
        """Return whether the call may run.

        Raises:
            ToolAborted: the editor answered `cancelled`; the call never runs.
        """
        if request.tool in self.always:
            return True
        await self.wait_announced(request.call_id)
        tool_call = ToolCallUpdate(
            tool_call_id=request.call_id,
            kind=tool_kind(request.tool, request.stop_class),
            status="pending",
            raw_input=request.input,
        )
        self.asked += 1
        async with withdrawn_on_stop(self._withdraw):
            response = await self._client.request_permission(
                session_id=self.session_id, tool_call=tool_call, options=_OPTIONS
            )
        match response.outcome:
            case DeniedOutcome():
                # The editor withdrew the prompt: that is a stop of the turn, never a
                # refusal of this call alone.
                self._on_cancelled()
                raise ToolAborted(
                    "not started: the permission request was cancelled",
                    call_id=request.call_id,
                )
            case AllowedOutcome(option_id=option):
                if option == ALLOW_ALWAYS:
                    self.always.add(request.tool)
                return option in (ALLOW_ONCE, ALLOW_ALWAYS)

    async def wait_announced(self, call_id: str) -> None:
        """Wait until the editor has the call's `tool_call` update.

        The editor learns of a call before it is asked about it; the update is sent by
        the turn's event delivery, in another task.
        """
        await self._announced.setdefault(call_id, anyio.Event()).wait()

    def announced(self, call_id: str) -> None:
        """The call's `tool_call` update went out: it may be asked about now."""
        self._announced.setdefault(call_id, anyio.Event()).set()

    def forget(self, call_id: str) -> None:
        """The call has ended: nothing will be asked about it any more."""
        self._announced.pop(call_id, None)
