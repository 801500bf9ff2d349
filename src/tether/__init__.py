"""tether: run AI agents' work with a Stop that is honest and prompt.

The headline names are imported on first use, so that commands which need none of them
(`tether guard --claude-hook` runs before every agent tool call) start fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_WHERE = {
    "ErrorCode": "errors",
    "ToolAborted": "errors",
    "ToolError": "errors",
    "StopClass": "host",
    "ToolContext": "host",
    "tool": "host",
    "AbortReport": "runtime",
    "Runtime": "runtime",
    "Session": "runtime",
    "ToolResult": "runtime",
    "Turn": "runtime",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'tether' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
