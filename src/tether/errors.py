"""One error tree for tether, with the spec's single error-code enum.

```
TetherError(Exception)                 .code: ErrorCode, .exit_code: int
├── ToolError                          a tool call ended without a usable result
│   ├── ToolAborted                    TOOL_ABORTED: cancelled by a stop
│   ├── ToolFailed                     TOOL_FAILED / TOOL_TIMEOUT: the tool itself failed
│   ├── PermissionDenied               PERMISSION_DENIED (also a PermissionError)
│   ├── GuardRefused                   GUARD_REFUSED: the stop guard refused the call
│   ├── UnknownTool                    UNKNOWN_TOOL (also a LookupError)
│   ├── InvalidInput                   INVALID_INPUT (also a ValueError), with the field path
│   └── DuplicateCallId                DUPLICATE_CALL_ID (also a RuntimeError)
├── UsageError                         API or CLI misuse (also a RuntimeError); exit code 2
│   └── PlanError                      a plan file is bad (`tether.runs`): file, line, field
├── Refused                            a verb refused its caller; exit code 2
├── StoreError                         a durable file failed a rule or could not be written
├── BindingUnchecked                   the system binding exists but cannot be checked
│                                      (`tether.stop`): every reading holds
├── ModelError                         a model cannot be used (`tether.models`): no key, ...
├── StaleClaim                         a claim was taken over by a newer epoch (`tether.runs`)
├── GitFailed                          a git command of tether's failed (`tether.runs`)
│   └── LaneUnreadable                 a lane's git state cannot be read as data (S16)
├── SaveFailed                         a lane could not be saved aside (`tether.runs`)
└── PublishUnreadable                  what a bound account published for the person
                                       cannot be read as published (`tether.runs`)
```

The classes of the other packages are defined beside the code that raises them and
drawn here; `tests/test_exports.py` checks that every subclass of `TetherError` is.

Tool-side signals (`ToolFailed`, `PermissionDenied`, `GuardRefused`) are raised by tools
and hosts; framework errors (`UsageError`, `StoreError`) by tether itself. The host
protocol carries a tool error as its code, message and field path (`host/_wire.py`).
"""

from __future__ import annotations

import enum

TYPE_CHECKING = False
if TYPE_CHECKING:  # `typing` is not imported at run time (the per-call hook)
    from typing import ClassVar

__all__ = (
    "DuplicateCallId",
    "ErrorCode",
    "GuardRefused",
    "InvalidInput",
    "PermissionDenied",
    "Refused",
    "StoreError",
    "TetherError",
    "ToolAborted",
    "ToolError",
    "ToolFailed",
    "UnknownTool",
    "UsageError",
)


class ErrorCode(enum.StrEnum):
    """Why a tool call ended without a result; the value travels on the wire."""

    TOOL_ABORTED = "TOOL_ABORTED"
    """The call was cancelled by a stop (user stop or turn abort) before it finished."""
    PERMISSION_DENIED = "PERMISSION_DENIED"
    """A permission rule or the approver refused the call; it never ran."""
    TOOL_FAILED = "TOOL_FAILED"
    """The tool ran (or tried to start) and failed; the message says why."""
    TOOL_TIMEOUT = "TOOL_TIMEOUT"
    """The tool ran past its own time limit and was ended."""
    UNKNOWN_TOOL = "UNKNOWN_TOOL"
    """No tool of that name is registered with the host."""
    INVALID_INPUT = "INVALID_INPUT"
    """The input does not match the tool's schema; the message names the bad field."""
    DUPLICATE_CALL_ID = "DUPLICATE_CALL_ID"
    """The call id was already used in this session; nothing was run."""
    GUARD_REFUSED = "GUARD_REFUSED"
    """The stop guard refused a call that would touch a stop or the setup."""


class TetherError(Exception):
    """Base of every error tether raises on purpose."""

    code: ErrorCode = ErrorCode.TOOL_FAILED
    exit_code: ClassVar[int] = 1


class ToolError(TetherError):
    """A tool call ended without a usable result; `.code` says why.

    Args:
        message: what went wrong; kept as `.message`.
        code: why, as `.code`; the class's own `code` when not given.
    """

    def __init__(self, message: str, *, code: ErrorCode | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code if code is not None else type(self).code


class ToolAborted(ToolError):
    """The call was cancelled by a stop; `.partial_output` holds what it printed first.

    Args:
        message: what the caller is told; kept as `.message`.
        partial_output: what the call printed before the stop.
        call_id: the id of the call, when it is known.
    """

    code = ErrorCode.TOOL_ABORTED

    def __init__(
        self,
        message: str = "tool call aborted by a stop",
        *,
        partial_output: str = "",
        call_id: str | None = None,
    ) -> None:
        super().__init__(message, code=ErrorCode.TOOL_ABORTED)
        self.partial_output = partial_output
        self.call_id = call_id


class ToolFailed(ToolError):
    """The tool failed; raised by tools to report an error result.

    Args:
        message: what went wrong; kept as `.message`.
        code: why, as `.code` (`TOOL_FAILED` when not given).
        end_unknown: whether the operation may have taken effect all the same (its
            answer was lost on the way, such as a server's broken stream): the
            ledger then records the call `end_unknown`, not `failed`.
    """

    code = ErrorCode.TOOL_FAILED

    def __init__(
        self, message: str, *, code: ErrorCode | None = None, end_unknown: bool = False
    ) -> None:
        super().__init__(message, code=code)
        self.end_unknown = end_unknown


class PermissionDenied(ToolError, PermissionError):
    """A rule or the approver refused the call."""

    code = ErrorCode.PERMISSION_DENIED


class GuardRefused(ToolError, PermissionError):
    """The guard refused a call that would set, lift or tamper with a stop."""

    code = ErrorCode.GUARD_REFUSED


class UnknownTool(ToolError, LookupError):
    """No tool of that name is registered."""

    code = ErrorCode.UNKNOWN_TOOL


class InvalidInput(ToolError, ValueError):
    """The input failed the tool's schema; `.path` names the bad field.

    Args:
        message: what is wrong with the input; kept as `.message`.
        path: the bad field's place in the input (`<input>`: the input itself).
    """

    code = ErrorCode.INVALID_INPUT

    def __init__(self, message: str, *, path: str = "") -> None:
        super().__init__(message, code=ErrorCode.INVALID_INPUT)
        self.path = path


class DuplicateCallId(ToolError, RuntimeError):
    """The call id was already used in the session."""

    code = ErrorCode.DUPLICATE_CALL_ID


class UsageError(TetherError, RuntimeError):
    """The API or a command was used wrongly; the message says how to use it."""

    exit_code = 2


class Refused(TetherError):
    """A verb refused its caller (no terminal, an agent session, a standing stop)."""

    exit_code = 2


class StoreError(TetherError, PermissionError):
    """A durable file of tether failed the owner-only rule or could not be written."""
