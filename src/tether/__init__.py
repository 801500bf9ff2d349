"""tether: run AI agents' work with a Stop that is honest and prompt.

The headline names are imported on first use, so that commands which need none of them
(`tether guard --claude-hook` runs before every agent tool call) start fast.
"""

from __future__ import annotations

from ._lazy import lazy_exports as _lazy_exports

TYPE_CHECKING = False  # `typing` is not imported: the per-call hook starts here
if TYPE_CHECKING:
    from .errors import ErrorCode as ErrorCode
    from .errors import ToolAborted as ToolAborted
    from .errors import ToolError as ToolError
    from .host import Approver as Approver
    from .host import PermissionRequest as PermissionRequest
    from .host import StopClass as StopClass
    from .host import ToolContext as ToolContext
    from .host import tool as tool
    from .runtime import AbortReport as AbortReport
    from .runtime import Agent as Agent
    from .runtime import AgentSession as AgentSession
    from .runtime import Runtime as Runtime
    from .runtime import Session as Session
    from .runtime import ToolResult as ToolResult
    from .runtime import Turn as Turn

__all__, __getattr__, __dir__ = _lazy_exports(
    __name__,
    {
        ".errors": ("ErrorCode", "ToolAborted", "ToolError"),
        ".host": ("Approver", "PermissionRequest", "StopClass", "ToolContext", "tool"),
        ".runtime": (
            "AbortReport",
            "Agent",
            "AgentSession",
            "Runtime",
            "Session",
            "ToolResult",
            "Turn",
        ),
    },
)
