"""`tether guard --claude-hook` as a process: one event on stdin, an exit code.

It runs before every tool call of an agent, so `tether.cli.main` comes here before the
click application is imported; `tether guard --claude-hook` through click (any other
spelling of the same options) comes here too, so both answer alike.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # `typing` is not imported at run time (the per-call hook)
if TYPE_CHECKING:
    from typing import NoReturn

__all__ = ("BLOCK", "run_claude_hook")

BLOCK = 2
"""Claude Code blocks a PreToolUse call only on exit code 2; any other failure lets the
call through, so every refusal and every failure here exits 2 (fail closed)."""


def run_claude_hook() -> NoReturn:
    """Judge the PreToolUse event on stdin; exit 0 silently or 2 with the reason.

    A PostToolUse (or PostToolUseFailure) event is only recorded (exit 0): see
    `answer_hook_event`. Exit 2 with the reason on stderr is the one refusal both
    Claude Code and Codex read the same way; no JSON is printed, since Codex takes a
    field it does not know for a failed hook and runs the call.
    """
    try:
        from ..stop._hook import MAX_EVENT_BYTES, answer_hook_event

        answer = answer_hook_event(sys.stdin.buffer.read(MAX_EVENT_BYTES + 1))
        allowed, message = answer.allowed, answer.message
    except Exception as exc:  # fail closed: exit 1 would let the call through
        allowed = False
        message = f"tether guard failed, so the call is blocked: {exc!r}"
    if allowed:
        sys.exit(0)
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
    sys.exit(BLOCK)
