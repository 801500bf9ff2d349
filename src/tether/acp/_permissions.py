"""tether's approver as `session/request_permission`.

The runtime asks its approver whether a call that a rule sends to `ask` may run; here the
question goes to the editor as a permission request with three options: allow once,
allow always (this tool, for the rest of the session), reject. A stop cancels the
approver's wait (the host cancels it before the call could start), so a late answer is
dropped and the call ends `TOOL_ABORTED`. An editor that answers `cancelled` (it does so
for every pending request after `session/cancel`) gets the same: the call never runs and
ends `TOOL_ABORTED`, a stop and not a refusal (S9).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Final

from acp import Client
from acp.schema import (
    AllowedOutcome,
    DeniedOutcome,
    PermissionOption,
    ToolCallUpdate,
)

from ..errors import ToolAborted
from ..runtime import PermissionRequest
from ._updates import tool_kind, tool_title

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
        acp_session_id: str,
        *,
        workspace: Path,
        on_cancelled: Callable[[], None],
    ) -> None:
        self._client = client
        self._session_id = acp_session_id
        self._workspace = workspace
        self._on_cancelled = on_cancelled
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
        tool_call = ToolCallUpdate(
            tool_call_id=request.call_id,
            title=tool_title(request.tool, request.input),
            kind=tool_kind(request.tool, request.stop_class),
            status="pending",
            raw_input=request.input,
        )
        self.asked += 1
        response = await self._client.request_permission(
            session_id=self._session_id, tool_call=tool_call, options=_OPTIONS
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
