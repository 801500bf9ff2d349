"""The `builtin` stage agent: tether's own agent loop in the lane's worktree, walled.

Walled means: the file and shell tools only (Read, Glob, Grep, Write, Edit, Bash), no
MCP servers, no plugins, the stop guard always on, and those tools allowed without a
prompt (nobody is at the screen). The Bash tool's processes carry `TETHER_AGENT=1`, so the
stop verbs refuse them. The stage's receipt is 0 when the turn ended by the model's
own answer, 3 when the person's stop ended it, 1 otherwise (a model error, the turn
limit).

The run's stop reaches inside the stage (spec 03, "The stop inside an agent"): `halt` is
read before each model request and before each tool call starts; the calls in flight run
to their real end and the stage ends "stopped at the person's stop after N tool calls".
With a `transcript` file, a take-over continues the stopped session (`resume`) instead
of starting the stage over. When a stage runs, and what its outcome means for the lane,
is the run's business.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import attrs

from ..errors import TetherError, UsageError
from ..host.tools import default_tools
from ..models import Model, model_from_spec
from ..runtime import Agent, AgentEvent, MessageChunk, Runtime, ToolCallEnded
from ._agents import AgentOutcome
from ._lane_log import LaneLog

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

__all__ = ("STOPPED_EXIT", "TAKEOVER_PROMPT", "WALLED_TOOLS", "run_builtin_agent")

WALLED_TOOLS = ("Read", "Glob", "Grep", "Write", "Edit", "Bash")
"""The only tools a stage agent gets."""

STOPPED_EXIT = 3
"""The exit status of a stage the person's stop ended (`tether run`'s halted code)."""

TAKEOVER_PROMPT = (
    "The person stopped this run and it has now been taken over. Your earlier tool"
    " calls ran as the transcript shows; calls marked as not run did not run. Go on"
    " with the task from where it was left:\n\n{brief}"
)
"""The prompt that continues a stopped stage's session on a take-over."""

_TAIL = 4000


async def run_builtin_agent(
    model: str | Model,
    brief: str,
    *,
    cwd: Path,
    log: Path,
    on_call: Callable[[anyio.CancelScope | None], None],
    halt: anyio.Event | None = None,
    halt_wait: float = 10.0,
    transcript: Path | None = None,
    resume: str | None = None,
) -> AgentOutcome:
    """Run one turn of the agent loop on `brief` in `cwd`; its transcript goes to `log`.

    `model` is a model spec (as a plan gives it) or a model.

    `halt` is the run's stop: once set, no model request and no tool call starts, the
    calls in flight run to their end, and the outcome is `stopped` with the count of
    calls that ran; a model request in flight is closed after `halt_wait` seconds.
    `transcript` is a SQLite file keeping the session (None: memory only); `resume`
    names a session in it to continue with `TAKEOVER_PROMPT` instead of a new one.
    """
    log.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tail: list[str] = []

    with LaneLog(log) as sink:

        def write(text: str) -> None:
            sink.write(text)
            tail.append(text)

        def failed(text: str) -> AgentOutcome:
            write(f"tether: {text}\n")
            return AgentOutcome(exit_status=1, log_tail="".join(tail)[-_TAIL:])

        async def on_event(event: AgentEvent) -> None:
            if isinstance(event, MessageChunk):
                write(event.text)
            elif isinstance(event, ToolCallEnded):
                write(f"\n[{event.tool}: {event.state}]\n")

        try:
            chosen = model_from_spec(model) if isinstance(model, str) else model
        except TetherError as exc:  # checked at the run's start; the file may change
            return failed(f"the model cannot be used: {exc}")
        tools = [t for t in default_tools() if t.name in WALLED_TOOLS]
        try:
            walled = Runtime(
                workspace=cwd,
                tools=tools,
                permissions={"allow": list(WALLED_TOOLS)},
                guard=True,
                ledger=transcript,
            )
        except TetherError as exc:  # such as a transcript file that cannot be used
            return failed(f"the agent could not start: {exc}")
        with anyio.CancelScope() as scope:
            on_call(scope)
            try:
                async with walled as runtime:
                    agent = Agent(runtime, chosen)
                    prompt = brief
                    try:
                        if resume is None:
                            session = agent.session(on_event=on_event)
                        else:
                            session = agent.resume(resume, on_event=on_event)
                            prompt = TAKEOVER_PROMPT.format(brief=brief)
                    except UsageError as exc:
                        return failed(f"the stage cannot be continued: {exc}")
                    if resume is not None:
                        write(f"\n[session {resume} continued after a take-over]\n")
                    ended = await session.prompt(prompt, halt=halt, halt_wait=halt_wait)
            finally:
                on_call(None)
        if scope.cancelled_caught:
            write("\ntether: the agent was killed\n")
            return AgentOutcome(exit_status=-9, log_tail="killed", killed=True)
        write(f"\n[turn ended: {ended.stop_reason}]\n")
        if ended.error:
            write(f"tether: {ended.error}\n")
        outcome = AgentOutcome(
            exit_status=0 if ended.stop_reason == "end_turn" else 1,
            log_tail="",
            stopped=ended.stop_reason == "halted",
            calls=ended.calls,
            session_id=session.id,
            rate_limits=tuple(session.rate_limits.items()),
        )
        if outcome.stopped:
            write(f"tether: {outcome.note}\n")
            outcome = attrs.evolve(outcome, exit_status=STOPPED_EXIT)
    return attrs.evolve(outcome, log_tail="".join(tail)[-_TAIL:])
