"""Tool calls as ACP sees them: kind, title, status, content.

Pure conversions from tether's values to the SDK's `session/update` payloads, used for
live turns and for replaying a transcript on `session/load`. Nothing here sends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, TypeAlias

from acp import start_tool_call, text_block, tool_content, update_tool_call
from acp.schema import (
    AgentMessageChunk,
    ToolCallLocation,
    ToolCallProgress,
    ToolCallStart,
    UserMessageChunk,
)
from acp.schema import ToolCallStatus as AcpStatus
from acp.schema import ToolKind as AcpKind

from ..host import StopClass
from ..runtime import CallState

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

__all__ = (
    "MAX_SHOWN",
    "SessionUpdate",
    "call_finished",
    "call_progress",
    "call_requested",
    "call_started",
    "status_of",
    "tool_kind",
)

SessionUpdate: TypeAlias = (
    UserMessageChunk | AgentMessageChunk | ToolCallStart | ToolCallProgress
)
"""The `session/update` payloads tether sends."""

MAX_SHOWN: Final = 64 * 1024
"""Characters of a call's output shown in an update (the tail is kept)."""

_KINDS: Final[dict[str, AcpKind]] = {
    "Read": "read",
    "Glob": "search",
    "Grep": "search",
    "WebFetch": "fetch",
    "Write": "edit",
    "Edit": "edit",
    "Bash": "execute",
    "GenerateImages": "execute",
}

_STATUS: Final[dict[CallState, AcpStatus]] = {
    CallState.REQUESTED: "pending",
    CallState.PENDING_PERMISSION: "pending",
    CallState.QUEUED: "pending",
    CallState.RUNNING: "in_progress",
    CallState.ABORTING: "in_progress",
    CallState.SUCCEEDED: "completed",
    CallState.FAILED: "failed",
    CallState.ABORTED: "failed",
}


def tool_kind(name: str, stop_class: StopClass | None = None) -> AcpKind:
    """The ACP kind of a tool: the built-ins by name, others by their stop class."""
    kind = _KINDS.get(name)
    if kind is not None:
        return kind
    if stop_class is StopClass.PROCESS:
        return "execute"
    if stop_class is StopClass.READ_ONLY:
        return "read"
    return "other"


def status_of(state: CallState) -> AcpStatus:
    """The ACP status of a call in a ledger state."""
    return _STATUS[state]


def _locations(
    input: Mapping[str, Any], workspace: Path
) -> list[ToolCallLocation] | None:
    path = input.get("file_path") or input.get("path")
    if isinstance(path, str) and path:
        return [ToolCallLocation(path=str(workspace / path))]
    return None


def _shown(text: str) -> str:
    if len(text) <= MAX_SHOWN:
        return text
    return "…" + text[-(MAX_SHOWN - 1) :]


def call_requested(
    call_id: str,
    title: str,
    name: str,
    input: Mapping[str, Any],
    *,
    workspace: Path,
    stop_class: StopClass | None = None,
) -> ToolCallStart:
    """The first update of a call: `pending`, with its kind, title, input and file.

    The file is the one the call names: absolute, under `workspace` when relative.
    """
    return start_tool_call(
        call_id,
        title,
        kind=tool_kind(name, stop_class),
        status="pending",
        locations=_locations(input, workspace),
        raw_input=dict(input),
    )


def call_started(call_id: str) -> ToolCallProgress:
    """The call's operation has started."""
    return update_tool_call(call_id, status="in_progress")


def call_progress(call_id: str, output_so_far: str) -> ToolCallProgress:
    """The output a running call has printed so far (the content is replaced)."""
    return update_tool_call(
        call_id, content=[tool_content(text_block(_shown(output_so_far)))]
    )


def call_finished(
    call_id: str, *, output: str, error: str | None = None
) -> ToolCallProgress:
    """The call's final status and its real output; `error` is the code if it failed.

    A stopped call is `failed` with code `TOOL_ABORTED` and carries the output it printed
    before the stop.
    """
    raw: dict[str, Any] = {"output": output}
    if error is not None:
        raw["code"] = error
    return update_tool_call(
        call_id,
        status="failed" if error is not None else "completed",
        content=[tool_content(text_block(_shown(output)))] if output else None,
        raw_output=raw,
    )
