"""The ACP agent: `session/*` mapped onto tether's runtime and agent loop.

`AcpServer.serve()` owns everything it starts in one task group: each ACP session is a
`Runtime` (its workspace is the session's `cwd`, its MCP servers those of `session/new`
plus the account's) with an agent session on it, owned by one task until the connection
ends. The SDK runs each incoming request as its own task, so `session/cancel` is handled
while `session/prompt` waits; cancel calls `Session.abort()`, and the prompt answers
`cancelled` only after its turn has settled and every call's final status went out.

The SDK does not route `session/delete`: the transport hands it here (`_take_request`),
and it is answered here, as the SDK answers the others.

It does not parse frames (`_transport.py`) nor build update payloads (`_updates.py`).
"""

from __future__ import annotations

import contextlib
import datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, cast, final

import anyio
import anyio.abc
import attrs
from pydantic import ValidationError

from .. import _extras

try:  # the SDK is an extra: without it, the line that says how to install it
    from acp import Agent, Client, RequestError
    from acp.agent.connection import AgentSideConnection
    from acp.schema import (
        AudioContentBlock,
        ClientCapabilities,
        CloseSessionResponse,
        DeleteSessionRequest,
        DeleteSessionResponse,
        EmbeddedResourceContentBlock,
        ImageContentBlock,
        Implementation,
        InitializeResponse,
        ListSessionsResponse,
        LoadSessionResponse,
        NewSessionResponse,
        PromptResponse,
        ResourceContentBlock,
        ResumeSessionResponse,
        SessionInfo,
        TextContentBlock,
        TextResourceContents,
    )
except ImportError as error:
    raise ImportError(_extras.missing("acp", "tether's ACP server")) from error

from .._config import Config, load_config
from .._threads import in_thread
from ..errors import TetherError, UsageError
from ..models import ModelError, model_from_spec
from ..runtime import SessionRecord, read_sessions
from ..runtime import delete_session as delete_from_ledger
from ._early import initialize_result
from ._elicit import takes_forms
from ._mcp_servers import AcpMcpServers, config_servers
from ._registry import OpenSessions
from ._session import AcpSession, TurnFailed
from ._transport import CANCEL_REQUEST, LineTransport

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from ..host import Tool

__all__ = ("AcpServer", "AcpStatistics")

DELETE_METHOD: Final = "session/delete"
"""The method the SDK does not route, served here."""

PromptBlock = (
    TextContentBlock
    | ImageContentBlock
    | AudioContentBlock
    | ResourceContentBlock
    | EmbeddedResourceContentBlock
)


@attrs.frozen
class AcpStatistics:
    """Counters of one ACP connection."""

    sessions: int
    """Sessions open now."""
    rejected_frames: int
    """Lines answered with a parse or invalid-request error."""
    permission_requests: int
    """`session/request_permission` requests sent to the editor."""
    elicitation_requests: int = 0
    """`elicitation/create` requests (MCP servers' questions) sent to the editor."""


def _iso(seconds: float) -> str:
    """A time as ACP carries it: ISO 8601, UTC."""
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).isoformat()


def _invalid(message: str) -> RequestError:
    return RequestError.invalid_params({"details": message})


NO_MODEL: Final = (
    "no model configured for tether: set name in the [model] table of the config file"
    ' (`tether config path` prints where), for example name = "openai:gpt-4.1-mini",'
    " or start tether acp with --model openai:<model> or --model scripted:<file>"
)
"""What `session/new` and `session/prompt` answer when tether has no model."""


def model_problem(model: str | None, config: Config | None) -> str | None:
    """Why sessions cannot use `model` (how to configure one), or None if they can."""
    if not model:
        return NO_MODEL
    try:
        model_from_spec(model, config=config)
    except ModelError as exc:
        return f"the model cannot be used: {exc}"
    return None


def prompt_text(blocks: list[PromptBlock]) -> str:
    """The prompt as the model reads it: text, and the text of embedded resources."""
    parts: list[str] = []
    for block in blocks:
        match block:
            case TextContentBlock(text=text):
                parts.append(text)
            case EmbeddedResourceContentBlock(resource=TextResourceContents() as res):
                parts.append(f"<resource uri={res.uri!r}>\n{res.text}\n</resource>")
            case ResourceContentBlock(uri=uri):
                parts.append(f"<resource uri={uri!r}/>")
            case _:
                raise _invalid(
                    f"tether reads text prompts; a {block.type} block cannot be used"
                )
    return "\n".join(parts)


@final
class AcpServer:
    """An ACP agent serving tether sessions on one connection."""

    def __init__(
        self,
        *,
        model: str | None,
        task_group: anyio.abc.TaskGroup,
        config: Config | None = None,
        ledger: Path | None = None,
        tools: Sequence[Tool] | None = None,
    ) -> None:
        self.model = model
        """The model spec sessions build their model from (None: none configured)."""
        self._model_problem: str | None = None
        self._model_checked = False
        self.tools = tools
        """The tools sessions offer (None: built-in, plugin and MCP tools)."""
        self.ledger = ledger
        """The SQLite ledger sessions and transcripts are kept in (None: memory)."""
        self.config = config if config is not None else load_config()
        self._tg = task_group
        self._client: Client | None = None
        self._transport: LineTransport | None = None
        self.client_capabilities: ClientCapabilities | None = None
        """What the editor said at `initialize` it can do (None: not said yet)."""
        self.sessions: dict[str, AcpSession] = {}
        self._tell_after_answer: dict[str, AcpSession] = {}
        """Sessions whose problems go to the editor once `session/new`'s answer is out
        (an update for a session the editor does not know yet may be dropped)."""

    def statistics(self) -> AcpStatistics:
        """Return the connection's counters."""
        return AcpStatistics(
            sessions=len(self.sessions),
            rejected_frames=self._transport.rejected if self._transport else 0,
            permission_requests=sum(s.bridge.asked for s in self.sessions.values()),
            elicitation_requests=sum(
                s.questions.asked for s in self.sessions.values() if s.questions
            ),
        )

    # -- the connection ---------------------------------------------------------------

    def on_connect(self, conn: Client) -> None:
        """Keep the client side to send updates and permission requests to."""
        self._client = conn

    @classmethod
    async def serve(
        cls,
        receive: anyio.abc.ByteReceiveStream,
        send: anyio.abc.ByteSendStream,
        *,
        model: str | None,
        config: Config | None = None,
        ledger: Path | None = None,
        tools: Sequence[Tool] | None = None,
        client_capabilities: Mapping[str, Any] | None = None,
        task_status: anyio.abc.TaskStatus[AcpServer] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve ACP on a byte stream pair until the client closes its side.

        `model` is `openai:<model>` or `scripted:<file>` (None: none configured);
        `ledger` is the SQLite file sessions are kept in (None: memory); `tools` the
        tools to offer (None: the standard tools); the MCP servers of the account's
        config and of each `session/new` are added to either. `client_capabilities`
        are those of an `initialize` answered before the server started (wire names,
        as `tether acp` answers the first one itself).

        A model that cannot be used (none, no endpoint or key, a missing script) is
        no reason to stop serving: `initialize` is answered, and `session/new`,
        `session/load` and `session/prompt` get an error saying how to configure one.
        """
        transport = LineTransport(receive, send)
        async with anyio.create_task_group() as tg:
            server = cls(
                model=model, task_group=tg, config=config, ledger=ledger, tools=tools
            )
            server._transport = transport
            if client_capabilities is not None:
                server.client_capabilities = ClientCapabilities.model_validate(
                    client_capabilities
                )
            transport.on_result = server._result_sent
            transport.on_cancel_request = server._cancel_request
            transport.on_request = server._take_request
            # The SDK's Agent protocol lists every optional method; the router answers
            # -32601 for those this class does not define. `session/resume` and
            # `session/close` are routed only with the SDK's "unstable" flag (they are
            # stable in ACP v1 since).
            agent = cast("Agent", server)
            conn = AgentSideConnection(
                agent, transport, listening=False, use_unstable_protocol=True
            )
            task_status.started(server)
            try:
                await conn.listen()
            finally:
                # The editor is gone: stop every turn (each runtime's exit does, within
                # the grace window and the abort bound), then the connection's tasks.
                bound = server.config.grace + 4 * server.config.abort_bound + 5
                with anyio.move_on_after(bound, shield=True):
                    await server._close_all()
                for session_id in list(server.sessions):
                    _OPEN.closed(session_id, server)
                with anyio.move_on_after(server.config.abort_bound, shield=True):
                    await conn.close()

    async def _close_all(self) -> None:
        for session in list(self.sessions.values()):
            session.closing.set()
        for session in list(self.sessions.values()):
            await session.closed.wait()

    # -- ACP methods ------------------------------------------------------------------

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: ClientCapabilities | None = None,
        client_info: Implementation | None = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        """Agree on the protocol version and say what tether can do.

        It is the answer `tether acp` gives its first `initialize` before the SDK is
        loaded. What the editor can do is kept: MCP servers' questions go to an editor
        that takes forms (`elicitation.form`) and are declined for any other.
        """
        self.client_capabilities = client_capabilities
        return InitializeResponse.model_validate(initialize_result(protocol_version))

    async def new_session(
        self,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: AcpMcpServers | None = None,
        **kwargs: Any,
    ) -> NewSessionResponse:
        """Open a session working in `cwd`, with the session's MCP servers."""
        await self._require_model()
        session = await self._open(cwd, mcp_servers, resume=None)
        if session.problems:
            self._tell_after_answer[session.id] = session
        return NewSessionResponse(session_id=session.id)

    async def load_session(
        self,
        cwd: str,
        session_id: str,
        mcp_servers: AcpMcpServers | None = None,
        additional_directories: list[str] | None = None,
        **kwargs: Any,
    ) -> LoadSessionResponse:
        """Replay a session's transcript as updates, then answer.

        A session of the account is reopened from the ledger (one never prompted
        replays nothing); one already open on this connection is replayed as it is
        (it keeps its `cwd` and MCP servers).
        """
        await self._require_model()
        session = await self._open_now(session_id)
        if session is None:
            # A delete begun meanwhile waits for this, then closes the session.
            async with _OPEN.opening(session_id):
                session = await self._open(cwd, mcp_servers, resume=session_id)
                await session.replay()
                # The editor named this session: told before the answer, after the
                # replay.
                await session.tell_problems()
        else:
            await session.replay()
        return LoadSessionResponse()

    async def resume_session(
        self,
        session_id: str,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: AcpMcpServers | None = None,
        **kwargs: Any,
    ) -> ResumeSessionResponse:
        """Reopen a session of the account without replaying it (open: nothing to do)."""
        await self._require_model()
        if await self._open_now(session_id) is None:
            async with _OPEN.opening(session_id):  # as in load_session
                session = await self._open(cwd, mcp_servers, resume=session_id)
                await session.tell_problems()
        return ResumeSessionResponse()

    async def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, **kwargs: Any
    ) -> ListSessionsResponse:
        """The account's sessions (those `cwd` names only, if given), latest first."""
        if cursor is not None:
            raise _invalid(
                "tether lists every session in one answer and gives no cursor:"
                " leave cursor out"
            )
        records: dict[str, SessionRecord] = {}
        if self.ledger is not None and await in_thread(self.ledger.is_file):
            for record in await in_thread(read_sessions, self.ledger):
                records[record.session_id] = record
        for session in self.sessions.values():
            open_record = session.record()
            if open_record is not None:
                records[open_record.session_id] = open_record
        shown = sorted(records.values(), key=lambda r: r.updated_at, reverse=True)
        return ListSessionsResponse(
            sessions=[
                SessionInfo(
                    session_id=r.session_id,
                    cwd=r.cwd,
                    title=r.title,
                    updated_at=_iso(r.updated_at),
                )
                for r in shown
                if cwd is None or r.cwd == cwd
            ]
        )

    async def close_session(
        self, session_id: str, **kwargs: Any
    ) -> CloseSessionResponse:
        """Close a session on this connection, its running turn stopped first.

        The turn is stopped as `session/cancel` stops it: its prompt answers
        `cancelled` once settled, before this answer.
        """
        session = self._session(session_id)
        await self._close(session, reason="the editor closed the session")
        return CloseSessionResponse()

    async def delete_session(
        self, session_id: str, **kwargs: Any
    ) -> DeleteSessionResponse:
        """Delete a session of the account: gone from `session/list`, not to be loaded.

        Open on a connection of this process, it is closed there first, its running
        turn stopped as `session/close` stops it (its prompt answers `cancelled` once
        settled, before this answer); being loaded or resumed there, it is closed once
        open. Its record and transcript leave the ledger; its
        calls stay. A session no one knows is no error (there is nothing to delete);
        one open in another process is refused, with where it is open.
        """
        async with _OPEN.deleting(session_id):
            for owner in _OPEN.owners(session_id):
                if owner is not self and (
                    self.ledger is None or owner.ledger != self.ledger
                ):
                    continue  # kept in another store (or in memory there)
                session = owner.sessions.get(session_id)
                if session is not None:
                    await owner._close(session, reason="the editor deleted the session")
            if self.ledger is not None:
                try:
                    await in_thread(delete_from_ledger, self.ledger, session_id)
                except UsageError as exc:
                    raise _invalid(str(exc)) from None
                except TetherError as exc:
                    raise RequestError.internal_error({"details": str(exc)}) from None
        return DeleteSessionResponse()

    async def prompt(
        self, session_id: str, prompt: list[PromptBlock], **kwargs: Any
    ) -> PromptResponse:
        """Run one turn; updates stream as `session/update` until it settles."""
        await self._require_model()
        session = self._session(session_id)
        text = prompt_text(prompt)
        if session.prompting:
            raise RequestError.invalid_request(
                {"details": f"a turn is already running in session {session_id}"}
            )
        try:
            stop_reason = await session.prompt(text)
        except TurnFailed as exc:
            raise RequestError.internal_error({"details": str(exc)}) from None
        return PromptResponse(stop_reason=stop_reason)

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        """Stop the session's turn (`Session.abort()`); the prompt answers once settled."""
        session = self.sessions.get(session_id)
        if session is None:
            return  # a notification has no answer; a stale cancel changes nothing
        await session.abort(source="user", reason="cancelled by the editor")

    def _cancel_request(self, method: str, params: dict[str, Any]) -> None:
        """Take a `$/cancel_request` that names a pending request.

        A prompt's turn is stopped as `session/cancel` stops it (the prompt answers
        `cancelled`); any other request is short and answers as it would have (the
        protocol allows either).
        """
        if method != "session/prompt":
            return
        session = self.sessions.get(str(params.get("sessionId")))
        if session is not None and session.prompting:
            self._tg.start_soon(
                partial(
                    session.abort,
                    source="user",
                    reason="the editor cancelled the prompt request",
                )
            )

    def _take_request(
        self, request_id: str | int, method: str, params: dict[str, Any]
    ) -> bool:
        """Serve a request the SDK does not route (`session/delete`); else False."""
        if method != DELETE_METHOD:
            return False
        self._tg.start_soon(self._answer_delete, request_id, params)
        return True

    async def _answer_delete(
        self, request_id: str | int, params: dict[str, Any]
    ) -> None:
        """Run `delete_session` and answer it, as the SDK answers what it routes."""
        try:
            request = DeleteSessionRequest.model_validate(params)
            await self.delete_session(request.session_id)
            answer: dict[str, Any] = {"result": {}}
        except ValidationError as exc:
            wrong = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'params'}: {e['msg']}"
                for e in exc.errors()
            )
            error = _invalid(f"{DELETE_METHOD} takes {{sessionId: string}}: {wrong}")
            answer = {"error": error.to_error_obj()}
        except RequestError as exc:
            answer = {"error": exc.to_error_obj()}
        except Exception as exc:  # as the SDK answers a handler's failure: -32603
            error = RequestError.internal_error({"details": f"{exc!r}"})
            answer = {"error": error.to_error_obj()}
        assert self._transport is not None, "serve() sets the transport"
        with contextlib.suppress(ConnectionError):  # an editor gone cannot be told
            await self._transport.send({"jsonrpc": "2.0", "id": request_id, **answer})

    # -- sessions ---------------------------------------------------------------------

    def _result_sent(self, result: object) -> None:
        """A response went out: if it opened a session with problems, tell them now."""
        if not isinstance(result, dict):
            return
        session = self._tell_after_answer.pop(str(result.get("sessionId")), None)
        if session is not None:
            self._tg.start_soon(session.tell_problems)

    async def _require_model(self) -> None:
        """Refuse a request that needs the model when the model cannot be used.

        Checked once, at the first such request, so `initialize` never waits for a
        model SDK.
        """
        if not self._model_checked:
            self._model_problem = await in_thread(
                model_problem, self.model, self.config
            )
            self._model_checked = True
        if self._model_problem is not None:
            raise RequestError(
                -32603, self._model_problem, {"details": self._model_problem}
            )

    async def _open_now(self, session_id: str) -> AcpSession | None:
        """The session if it is open on this connection, else None.

        One being closed is waited for, and is not open; so is a delete of it.
        """
        await _OPEN.wait_deleted(session_id)
        session = self.sessions.get(session_id)
        if session is not None and session.ending:
            await session.closed.wait()
            return None
        return session

    def _session(self, session_id: str) -> AcpSession:
        session = self.sessions.get(session_id)
        if session is None or session.ending:
            raise _invalid(
                f"no session {session_id} on this connection; "
                "open one with session/new or session/load"
            )
        return session

    async def _open(
        self, cwd: str, mcp_servers: AcpMcpServers | None, *, resume: str | None
    ) -> AcpSession:
        workspace = Path(cwd)
        if not workspace.is_absolute():
            raise _invalid(f"cwd must be an absolute path, not {cwd!r}")
        if not await in_thread(workspace.is_dir):
            raise _invalid(f"cwd {cwd!r} is not a directory")
        try:
            servers = config_servers(mcp_servers, cwd=workspace)
        except UsageError as exc:
            raise _invalid(str(exc)) from None
        config = attrs.evolve(
            self.config, mcp_servers={**self.config.mcp_servers, **servers}
        )
        assert self.model is not None, "_require_model() refuses a session without one"
        try:
            session = AcpSession(
                self._connected_client(),
                workspace=workspace,
                config=config,
                model=self.model,
                ledger=self.ledger,
                tools=self.tools,
                task_group=self._tg,
                takes_forms=takes_forms(self.client_capabilities),
                withdraw=self._withdraw,
            )
            await self._tg.start(
                partial(session.run, resume=resume, requested=sorted(servers))
            )
        except TetherError as exc:
            raise _invalid(str(exc)) from None
        self.sessions[session.id] = session
        _OPEN.opened(session.id, self)
        return session

    async def _close(self, session: AcpSession, *, reason: str) -> None:
        """Close a session of this connection, its running turn stopped first."""
        await session.close(reason=reason)
        if self.sessions.get(session.id) is session:
            del self.sessions[session.id]
            _OPEN.closed(session.id, self)

    async def _withdraw(self, request_id: str | int) -> None:
        """Tell the editor a request of tether's is given up (`$/cancel_request`)."""
        if self._transport is None:
            return
        frame = {
            "jsonrpc": "2.0",
            "method": CANCEL_REQUEST,
            "params": {"requestId": request_id},
        }
        with contextlib.suppress(ConnectionError):  # an editor gone cannot be told
            await self._transport.send(frame)

    def _connected_client(self) -> Client:
        assert self._client is not None, "on_connect() gives the client first"
        return self._client


_OPEN: Final[OpenSessions[AcpServer]] = OpenSessions()
"""The sessions open on every connection of this process (`session/delete` stops them
wherever they are)."""
