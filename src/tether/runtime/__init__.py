"""The runtime: sessions, turns, the executor that races calls against a stop, the ledger."""

from __future__ import annotations

from ..host._protocol import PermissionRequest as PermissionRequest
from ._ledger import CallRecord as CallRecord
from ._ledger import CallState as CallState
from ._runtime import Runtime as Runtime
from ._session import Session as Session
from ._session import Turn as Turn
from ._values import AbortReport as AbortReport
from ._values import CallChanged as CallChanged
from ._values import PendingCall as PendingCall
from ._values import RuntimeEvent as RuntimeEvent
from ._values import ToolProgress as ToolProgress
from ._values import ToolResult as ToolResult
from ._values import TurnSettled as TurnSettled

__all__ = (
    "AbortReport",
    "CallChanged",
    "CallRecord",
    "CallState",
    "PendingCall",
    "PermissionRequest",
    "Runtime",
    "RuntimeEvent",
    "Session",
    "ToolProgress",
    "ToolResult",
    "Turn",
    "TurnSettled",
)
