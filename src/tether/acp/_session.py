"""One ACP session: a runtime and an agent session on it, and its updates to the editor.

`AcpSession.run()` owns the session's `Runtime` from `session/new` (or `session/load`)
until the connection ends. The agent loop delivers its events in order to `render()`,
which sends each as a `session/update` and waits until it is written, so when
`prompt()` returns every update of the turn — each tool call's final status included —
is already on the wire, before the answer to `session/prompt`.
"""

from __future__ import annotations

import contextlib
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Final, final

import anyio
import anyio.abc
from acp import Client, update_agent_message_text, update_user_message_text

from ..errors import ErrorCode, TetherError, UsageError
from ..host.tools import open_mcp_tools
from ..models import ToolCall, model_from_spec
from ..runtime import (
    AbortReport,
    Agent,
    AgentEvent,
    AgentSession,
    CallRecord,
    CallState,
    MessageChunk,
    Runtime,
    SessionRecord,
    ToolCallEnded,
    ToolCallRequested,
    ToolCallStarted,
    TurnEnded,
    default_system,
)
from ..runtime import ToolCallProgress as AgentToolProgress
from ._elicit import ElicitationBridge
from ._permissions import PermissionBridge
from ._updates import (
    SessionUpdate,
    call_finished,
    call_progress,
    call_requested,
    call_started,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence
    from pathlib import Path

    from acp.schema import StopReason as AcpStopReason
    from acp.schema import ToolCallProgress, ToolCallStart

    from .._config import Config
    from ..host import AbortSource, Tool

__all__ = ("AcpSession", "TurnFailed")

_STOP_REASONS: Final[dict[str, AcpStopReason]] = {
    "end_turn": "end_turn",
    "cancelled": "cancelled",
    "halted": "cancelled",  # ACP has no run stop; a halt is a stop to its client
    "max_turn_requests": "max_turn_requests",
    "refusal": "refusal",
}


class TurnFailed(Exception):
    """The turn could not be run (the model could not be used); the text says why."""


@final
class AcpSession:
    """An ACP session's runtime, agent session and the updates it sends."""

    def __init__(
        self,
        client: Client,
        *,
        workspace: Path,
        config: Config,
        model: str,
        ledger: Path | None,
        tools: Sequence[Tool] | None,
        task_group: anyio.abc.TaskGroup,
        takes_forms: bool,
        withdraw: Callable[[str | int], Awaitable[None]],
    ) -> None:
        self.client = client
        self.workspace = workspace
        self.config = config
        self.model = model
        self.ledger = ledger
        self.tools = tools
        """The tools to offer (None: the standard tools)."""
        self._tg = task_group
        self.bridge = PermissionBridge(
            client, on_cancelled=self._on_permission_cancelled, withdraw=withdraw
        )
        self.questions = (
            ElicitationBridge(client, self.bridge, withdraw=withdraw)
            if takes_forms
            else None
        )
        """Puts MCP servers' questions to the editor (None: the editor said at
        `initialize` it takes no forms; they are declined)."""
        self.agent_session: AgentSession | None = None
        self.closing = anyio.Event()
        self.closed = anyio.Event()
        self.ending = False
        """`close()` began: the session takes no further request."""
        self.prompting = False
        """Invariant: at most one `session/prompt` runs per session."""
        self._idle = anyio.Event()
        """Set while no turn runs (`close()` waits for it after its stop)."""
        self._idle.set()
        self._output: dict[str, list[str]] = {}
        """Output printed so far by each running call of the turn."""
        self.problems: list[str] = []
        """What did not load when the session opened (an MCP server of the account's
        config that did not start), told to the editor by `tell_problems()`."""

    @property
    def id(self) -> str:
        """The session id: the runtime's, and the ledger's key."""
        assert self.agent_session is not None
        return self.agent_session.id

    async def run(
        self,
        *,
        resume: str | None,
        requested: list[str],
        task_status: anyio.abc.TaskStatus[AcpSession],
    ) -> None:
        """Open the runtime and the agent session, then keep them until closing.

        Raises:
            UsageError: the model cannot be used, a requested MCP server did not start,
                or the session to resume is not in the ledger.
        """
        refusal: str | None = None
        try:
            async with AsyncExitStack() as stack:
                problems: list[str] = []
                tools: list[Tool] | None = None
                if self.tools is not None:
                    # Chosen tools, plus the MCP servers' (the runtime opens those
                    # itself only when it picks the standard tools).
                    mcp = await stack.enter_async_context(
                        open_mcp_tools(
                            self.config,
                            problems,
                            workspace=self.workspace,
                            elicitor=self.questions,
                        )
                    )
                    tools = [*self.tools, *mcp]
                runtime = await stack.enter_async_context(
                    Runtime(
                        workspace=self.workspace,
                        tools=tools,
                        approver=self.bridge,
                        elicitor=self.questions,
                        ledger=self.ledger,
                        config=self.config,
                    )
                )
                # Decided inside, raised outside: the runtime's task group would wrap it.
                refusal = _failed_server([*problems, *runtime.problems], requested)
                self.problems = [*problems, *runtime.problems]
                if refusal is None:
                    refusal = self._start(runtime, resume)
                if refusal is None:
                    task_status.started(self)
                    await self.closing.wait()
        finally:
            self.closed.set()
        if refusal is not None:
            raise UsageError(refusal)

    def _start(self, runtime: Runtime, resume: str | None) -> str | None:
        """Open the agent session; return why it cannot be, or None."""
        try:
            system = self.config.model_system
            agent = Agent(
                runtime,
                model_from_spec(self.model, config=self.config),
                system=default_system(self.workspace) if system is None else system,
            )
            if resume is None:
                self.agent_session = agent.session(on_event=self.render)
            else:
                self.agent_session = agent.resume(resume, on_event=self.render)
        except TetherError as exc:
            return str(exc)
        self.bridge.session_id = self.agent_session.id
        # Kept from its start: a session never prompted can be loaded and listed.
        runtime.ledger.note_session(self.id, cwd=str(self.workspace))
        return None

    def record(self) -> SessionRecord | None:
        """What the session's ledger keeps of it (where it works, its title)."""
        assert self.agent_session is not None
        return self.agent_session.agent.runtime.ledger.session(self.id)

    async def tell_problems(self) -> None:
        """Show the editor what did not load for this session, as the agent's message.

        An editor shows message chunks; it hides the agent's stderr.
        """
        if not self.problems:
            return
        text = "".join(f"note: {problem}\n" for problem in self.problems)
        await self._send(update_agent_message_text(text + "\n"))

    # -- turns ------------------------------------------------------------------------

    async def prompt(self, text: str) -> AcpStopReason:
        """Run one turn; return its stop reason once every update went out.

        Raises:
            TurnFailed: the model could not be used.
        """
        assert self.agent_session is not None
        self.agent_session.agent.runtime.ledger.note_session(
            self.id, cwd=str(self.workspace), title=_title(text)
        )
        self.prompting = True
        self._idle = anyio.Event()
        try:
            ended = await self.agent_session.prompt(text)
        finally:
            self.prompting = False
            self._output.clear()
            self._idle.set()
        return _stop_reason(ended)

    async def close(self, *, reason: str) -> None:
        """End the session's runtime, its running turn stopped and settled first.

        The turn is stopped as `session/cancel` stops it (its prompt answers
        `cancelled`).
        """
        self.ending = True
        if self.prompting:
            await self.abort(source="user", reason=reason)
            await self._idle.wait()
        self.closing.set()
        await self.closed.wait()

    async def abort(self, *, source: AbortSource, reason: str) -> AbortReport:
        """Stop the running turn (`Session.abort()`, within its bound)."""
        assert self.agent_session is not None
        return await self.agent_session.abort(source=source, reason=reason)

    def _on_permission_cancelled(self) -> None:
        self._tg.start_soon(
            lambda: self.abort(
                source="user", reason="the editor cancelled a permission request"
            )
        )

    # -- updates ----------------------------------------------------------------------

    async def render(self, event: AgentEvent) -> None:
        """Send one agent event as a `session/update` (the loop waits for it)."""
        match event:
            case MessageChunk(text=text):
                await self._send(update_agent_message_text(text))
            case ToolCallRequested(call_id=cid, tool=tool, input=args):
                self._output[cid] = []
                await self._send(
                    call_requested(
                        cid,
                        event.title,
                        tool,
                        args,
                        workspace=self.workspace,
                        stop_class=event.stop_class,
                    )
                )
                self.bridge.announced(cid)
            case ToolCallStarted(call_id=cid):
                await self._send(call_started(cid))
            case AgentToolProgress(call_id=cid, text=text):
                shown = self._output.setdefault(cid, [])
                shown.append(text)
                await self._send(call_progress(cid, "".join(shown)))
            case ToolCallEnded(call_id=cid):
                self._output.pop(cid, None)
                self.bridge.forget(cid)
                await self._send(_finished(event))
            case TurnEnded():
                pass  # the answer to session/prompt carries it

    async def _send(self, update: SessionUpdate) -> None:
        # An editor that is gone cannot be told; the turn still runs to its settled
        # end (the runtime's exit stops it).
        with contextlib.suppress(ConnectionError):
            await self.client.session_update(self.id, update)

    async def replay(self) -> None:
        """Send the transcript of a loaded session as updates, in order.

        Each tool call goes out as requested, then with its final status as the ledger
        holds it and the result the model was given (a call the transcript lacks a
        result for gets the one the next request would carry).
        """
        assert self.agent_session is not None
        sid = self.id
        ledger = self.agent_session.agent.runtime.ledger
        calls: dict[str, ToolCall] = {}
        for message in self.agent_session.request_messages():
            match message.role:
                case "user":
                    await self._send(update_user_message_text(message.content))
                case "assistant":
                    if message.content:
                        await self._send(update_agent_message_text(message.content))
                    for call in message.tool_calls:
                        calls[call.id] = call
                        await self._send(self._replayed_call(call))
                case "tool":
                    answered = calls.pop(message.tool_call_id or "", None)
                    if answered is None:
                        continue
                    cid = answered.call_id
                    record = ledger.find(sid, cid) if cid else None
                    succeeded = (
                        record is not None and record.state is CallState.SUCCEEDED
                    )
                    error = None if succeeded else _code(record)
                    await self._send(
                        call_finished(
                            cid or answered.id, output=message.content, error=error
                        )
                    )
                case "system":
                    pass

    def _replayed_call(self, call: ToolCall) -> ToolCallStart:
        try:
            args = call.input()
        except ValueError:
            args = {}
        assert self.agent_session is not None
        return call_requested(
            call.call_id or call.id,
            self.agent_session.agent.runtime.call_title(call.name, args),
            call.name,
            args,
            workspace=self.workspace,
        )


def _finished(event: ToolCallEnded) -> ToolCallProgress:
    error = None if event.state is CallState.SUCCEEDED else _code(event)
    return call_finished(event.call_id, output=event.content, error=error)


def _code(record: CallRecord | ToolCallEnded | None) -> str:
    code = record.code if record is not None else None
    return str(code if code is not None else ErrorCode.TOOL_ABORTED)


def _stop_reason(ended: TurnEnded) -> AcpStopReason:
    if ended.stop_reason == "error":
        raise TurnFailed(ended.error or "the model could not be used")
    return _STOP_REASONS[ended.stop_reason]


_TITLE_BOUND: Final = 80


def _title(text: str) -> str | None:
    """A session's title: its first prompt's first line, bounded."""
    line = text.strip().partition("\n")[0].strip()
    if len(line) > _TITLE_BOUND:
        line = line[: _TITLE_BOUND - 1] + "…"
    return line or None


def _failed_server(problems: list[str], requested: list[str]) -> str | None:
    """Why a server the editor asked for did not start, or None if all did."""
    for name in requested:
        for problem in problems:
            if problem.startswith(f"MCP server {name!r}"):
                return f"{problem}; fix the server or leave it out"
    return None
