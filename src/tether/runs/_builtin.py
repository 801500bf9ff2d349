"""The `builtin` stage agent: tether's own agent loop in the lane's worktree, walled.

Walled means: the file and shell tools only (Read, Glob, Grep, Write, Edit, Bash), no
MCP servers, no plugins, the stop guard always on, and those tools allowed without a
prompt (nobody is at the screen). The Bash tool's processes carry `TETHER_AGENT=1`, so the
stop verbs refuse them. The stage's receipt is 0 when the turn ended by the model's
own answer, 1 otherwise (a model error, the turn limit).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio

from ..errors import TetherError
from ..host.tools import default_tools
from ..models import model_from_spec
from ..runtime import Agent, AgentEvent, MessageChunk, Runtime, ToolCallEnded
from ._agents import AgentOutcome

__all__ = ("WALLED_TOOLS", "run_builtin_agent")

WALLED_TOOLS = ("Read", "Glob", "Grep", "Write", "Edit", "Bash")
"""The only tools a stage agent gets."""

_TAIL = 4000


async def run_builtin_agent(
    model: str,
    brief: str,
    *,
    cwd: Path,
    log: Path,
    on_call: Callable[[anyio.CancelScope | None], None],
) -> AgentOutcome:
    """Run one turn of the agent loop on `brief` in `cwd`; its transcript goes to `log`."""
    log.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tail: list[str] = []

    with log.open("a", encoding="utf-8") as sink:

        def write(text: str) -> None:
            sink.write(text)
            sink.flush()
            tail.append(text)

        async def on_event(event: AgentEvent) -> None:
            if isinstance(event, MessageChunk):
                write(event.text)
            elif isinstance(event, ToolCallEnded):
                write(f"\n[{event.tool}: {event.state}]\n")

        try:
            chosen = model_from_spec(model)
        except TetherError as exc:  # checked at the run's start; the file may change
            write(f"tether: the model cannot be used: {exc}\n")
            return AgentOutcome(exit_status=1, log_tail="".join(tail)[-_TAIL:])
        tools = [t for t in default_tools() if t.name in WALLED_TOOLS]
        with anyio.CancelScope() as scope:
            on_call(scope)
            try:
                async with Runtime(
                    workspace=cwd,
                    tools=tools,
                    permissions={"allow": list(WALLED_TOOLS)},
                    guard=True,
                ) as runtime:
                    session = Agent(runtime, chosen).session(on_event=on_event)
                    ended = await session.prompt(brief)
            finally:
                on_call(None)
        if scope.cancelled_caught:
            write("\ntether: the agent was killed\n")
            return AgentOutcome(exit_status=-9, log_tail="killed", killed=True)
        write(f"\n[turn ended: {ended.stop_reason}]\n")
        if ended.error:
            write(f"tether: {ended.error}\n")
    status = 0 if ended.stop_reason == "end_turn" else 1
    return AgentOutcome(
        exit_status=status,
        log_tail="".join(tail)[-_TAIL:],
        rate_limits=tuple(session.rate_limits.items()),
    )
