"""tether: run AI agents' work with a Stop that is honest and prompt."""

from __future__ import annotations

from .errors import ErrorCode as ErrorCode
from .errors import ToolAborted as ToolAborted
from .errors import ToolError as ToolError
from .host import StopClass as StopClass
from .host import ToolContext as ToolContext
from .host import tool as tool
from .runtime import AbortReport as AbortReport
from .runtime import Runtime as Runtime
from .runtime import Session as Session
from .runtime import ToolResult as ToolResult
from .runtime import Turn as Turn

__all__ = (
    "AbortReport",
    "ErrorCode",
    "Runtime",
    "Session",
    "StopClass",
    "ToolAborted",
    "ToolContext",
    "ToolError",
    "ToolResult",
    "Turn",
    "tool",
)
