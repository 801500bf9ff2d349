"""The runtime: sessions, turns, the executor that races calls against a stop, the ledger."""

from __future__ import annotations

from ..host import ElicitationAnswer as ElicitationAnswer
from ..host import ElicitationRequest as ElicitationRequest
from ..host import Elicitor as Elicitor
from ..host import PermissionRequest as PermissionRequest
from ._agent import Agent as Agent
from ._agent import AgentSession as AgentSession
from ._agent import default_system as default_system
from ._agent import tool_result_text as tool_result_text
from ._agent_events import AgentEvent as AgentEvent
from ._agent_events import EventCallback as EventCallback
from ._agent_events import MessageChunk as MessageChunk
from ._agent_events import ModelWaiting as ModelWaiting
from ._agent_events import StopReason as StopReason
from ._agent_events import ToolCallEnded as ToolCallEnded
from ._agent_events import ToolCallProgress as ToolCallProgress
from ._agent_events import ToolCallRequested as ToolCallRequested
from ._agent_events import ToolCallStarted as ToolCallStarted
from ._agent_events import TurnEnded as TurnEnded
from ._ledger import CallRecord as CallRecord
from ._ledger import CallState as CallState
from ._ledger import SessionRecord as SessionRecord
from ._ledger import delete_session as delete_session
from ._ledger import read_sessions as read_sessions
from ._runtime import Runtime as Runtime
from ._session import Session as Session
from ._session import Turn as Turn
from ._values import AbortReport as AbortReport
from ._values import CallChanged as CallChanged
from ._values import PendingCall as PendingCall
from ._values import PendingPhase as PendingPhase
from ._values import RuntimeEvent as RuntimeEvent
from ._values import ToolProgress as ToolProgress
from ._values import ToolResult as ToolResult
from ._values import TurnSettled as TurnSettled

__all__ = (
    "AbortReport",
    "Agent",
    "AgentEvent",
    "AgentSession",
    "CallChanged",
    "CallRecord",
    "CallState",
    "ElicitationAnswer",
    "ElicitationRequest",
    "Elicitor",
    "EventCallback",
    "MessageChunk",
    "ModelWaiting",
    "PendingCall",
    "PendingPhase",
    "PermissionRequest",
    "Runtime",
    "RuntimeEvent",
    "Session",
    "SessionRecord",
    "StopReason",
    "ToolCallEnded",
    "ToolCallProgress",
    "ToolCallRequested",
    "ToolCallStarted",
    "ToolProgress",
    "ToolResult",
    "Turn",
    "TurnEnded",
    "TurnSettled",
    "default_system",
    "delete_session",
    "read_sessions",
    "tool_result_text",
)
