"""A real ACP client (the SDK's client side) driving a real `tether acp` process."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Any, cast

import anyio
import attrs
import psutil
from acp import (
    PROTOCOL_VERSION,
    Client,
    RequestError,
    spawn_agent_process,
    text_block,
)
from acp.client.connection import ClientSideConnection
from acp.connection import StreamDirection, StreamEvent
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    CreateElicitationResponse,
    DeniedOutcome,
    ElicitationCapabilities,
    ElicitationFormCapabilities,
    ElicitationMode,
    PermissionOption,
    RequestPermissionResponse,
    SessionNotification,
    ToolCallUpdate,
)

from tether._jsonrpc import FdReceiveStream, FdSendStream
from tether.acp import AcpServer
from tether.acp._transport import LineTransport
from tether.config import load_config, paths
from tether.host._stdio import load_tool_refs

if TYPE_CHECKING:
    from pathlib import Path

Answer = Callable[[ToolCallUpdate], Awaitable[str | None]]
"""Picks a permission option id for a request, or None to answer `cancelled`."""


Elicit = Callable[[str, ElicitationMode], Awaitable[CreateElicitationResponse]]
"""Answers an `elicitation/create` (its message and form) as the person would."""

FORMS = ClientCapabilities(
    elicitation=ElicitationCapabilities(form=ElicitationFormCapabilities())
)
"""An editor that takes forms (MCP servers' questions)."""


async def allow_once(_: ToolCallUpdate) -> str | None:
    return "allow_once"


async def no_questions(
    message: str, mode: ElicitationMode
) -> CreateElicitationResponse:
    raise AssertionError(f"no question was expected: {message}")


@attrs.define(eq=False)
class Recorder:
    """The editor's side: records every update and answers permission requests."""

    answer: Answer = allow_once
    elicit: Elicit = no_questions
    updates: list[tuple[str, Any]] = attrs.field(factory=list)
    permission_requests: list[ToolCallUpdate] = attrs.field(factory=list)
    questions: list[tuple[str, ElicitationMode]] = attrs.field(factory=list)
    withdrawn: list[tuple[str, dict[str, Any]]] = attrs.field(factory=list)
    """The method and params of each pending request the agent withdrew
    (`$/cancel_request`, taken by the client's transport)."""
    frames: list[dict[str, Any]] = attrs.field(factory=list)
    """Every frame the agent sent, in order."""
    arrived: anyio.Event = attrs.field(factory=anyio.Event)
    from_frames: bool = False
    """Record updates as their frames arrive (`observe`), not in the SDK's handler: the
    SDK runs notification handlers in tasks of their own, so a request's answer can be
    read before the updates sent ahead of it have been handled."""

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        if not self.from_frames:
            self.updates.append((session_id, update))
        self._poke()

    async def request_permission(
        self,
        session_id: str,
        tool_call: ToolCallUpdate,
        options: list[PermissionOption],
        **_: Any,
    ) -> RequestPermissionResponse:
        self.permission_requests.append(tool_call)
        self._poke()
        option = await self.answer(tool_call)
        if option is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=option)
        )

    async def create_elicitation(
        self, message: str, mode: ElicitationMode, **_: Any
    ) -> CreateElicitationResponse:
        self.questions.append((message, mode))
        self._poke()
        return await self.elicit(message, mode)

    def request_withdrawn(self, method: str, params: dict[str, Any]) -> None:
        self.withdrawn.append((method, params))
        self._poke()

    def as_client(self) -> Client:
        """This recorder as the SDK's `Client`.

        The SDK's `Client` protocol lists every method an editor may offer, but the SDK
        looks each handler up by name and answers "method not found" for one that is
        missing; the recorder offers only what these tests use.
        """
        return cast("Client", self)

    def observe(self, event: StreamEvent) -> None:
        if event.direction is StreamDirection.INCOMING:
            message = event.message
            self.frames.append(message)
            if self.from_frames and message.get("method") == "session/update":
                note = SessionNotification.model_validate(message["params"])
                self.updates.append((note.session_id, note.update))
            self._poke()

    def _poke(self) -> None:
        self.arrived.set()
        self.arrived = anyio.Event()

    async def wait_for(self, check: Callable[[], bool], timeout: float = 10) -> None:
        """Wait until `check()` holds after some frame arrived."""
        with anyio.fail_after(timeout):
            while not check():
                await self.arrived.wait()

    def tool_updates(self, call_id: str) -> list[Any]:
        """Every update of one tool call, in order."""
        return [
            u for _, u in self.updates if getattr(u, "tool_call_id", None) == call_id
        ]

    def statuses(self, call_id: str) -> list[str]:
        """The statuses one tool call went through, in order."""
        return [u.status for u in self.tool_updates(call_id) if u.status is not None]

    def text(self) -> str:
        """The agent's message text, joined."""
        return "".join(
            u.content.text
            for _, u in self.updates
            if getattr(u, "session_update", "") == "agent_message_chunk"
        )


@attrs.define(eq=False)
class Editor:
    """A connected client: the SDK connection, the recorder and the agent process."""

    conn: ClientSideConnection
    recorder: Recorder
    process: asyncio.subprocess.Process

    async def write_raw(self, data: bytes) -> None:
        """Write bytes to the agent's stdin as they are (malformed frames)."""
        assert self.process.stdin is not None
        self.process.stdin.write(data)
        await self.process.stdin.drain()

    async def open_session(
        self, cwd: Path, mcp_servers: Sequence[Any] | None = None
    ) -> str:
        return await _open_session(self.conn, cwd, mcp_servers)


@attrs.define(eq=False)
class Embedded:
    """A client of a server running in this process on two OS pipes (faster to start
    than a process; the server, transport and SDK client are the same)."""

    conn: ClientSideConnection
    recorder: Recorder
    server: AcpServer
    capabilities: ClientCapabilities | None = None

    async def open_session(
        self, cwd: Path, mcp_servers: Sequence[Any] | None = None
    ) -> str:
        return await _open_session(self.conn, cwd, mcp_servers, self.capabilities)


async def _open_session(
    conn: ClientSideConnection,
    cwd: Path,
    mcp_servers: Sequence[Any] | None,
    capabilities: ClientCapabilities | None = None,
) -> str:
    await conn.initialize(
        protocol_version=PROTOCOL_VERSION, client_capabilities=capabilities
    )
    response = await conn.new_session(cwd=str(cwd), mcp_servers=list(mcp_servers or []))
    return response.session_id


@asynccontextmanager
async def embedded(
    model: str,
    *,
    answer: Answer = allow_once,
    elicit: Elicit | None = None,
    tools: Sequence[str] = (),
    grace: float | None = None,
    answered_early: Mapping[str, Any] | None = None,
) -> AsyncIterator[Embedded]:
    """Serve `AcpServer` on OS pipes in this process, with `tether acp`'s ledger and
    the tools `--tool` would give, and connect the SDK's client to it.

    With `elicit`, the client says it takes forms and answers them with it (ACP's
    `elicitation/create` is in the SDK's unstable protocol). `answered_early` are the
    client capabilities of an `initialize` answered before the server started, as
    `tether acp` answers the first one."""
    config = load_config()
    if grace is not None:
        config = attrs.evolve(config, grace=grace)
    recorder = Recorder(answer=answer, elicit=elicit or no_questions, from_frames=True)
    to_server_r, to_server_w = os.pipe()
    to_client_r, to_client_w = os.pipe()
    try:
        async with anyio.create_task_group() as tg:
            server: AcpServer = await tg.start(
                partial(
                    AcpServer.serve,
                    FdReceiveStream(to_server_r),
                    FdSendStream(to_client_w),
                    model=model,
                    config=config,
                    ledger=paths().state_dir / "sessions.sqlite",
                    tools=load_tool_refs(tools) if tools else None,
                    client_capabilities=answered_early,
                )
            )
            transport = LineTransport(
                FdReceiveStream(to_client_r), FdSendStream(to_server_w)
            )
            transport.on_cancel_request = recorder.request_withdrawn
            conn = ClientSideConnection(
                recorder.as_client(),
                transport,
                observers=[recorder.observe],
                use_unstable_protocol=elicit is not None,
            )
            try:
                yield Embedded(
                    conn, recorder, server, FORMS if elicit is not None else None
                )
            finally:
                os.close(to_server_w)  # the editor quits: serve() returns
                to_server_w = -1
            await conn.close()
    finally:
        for fd in (to_server_r, to_server_w, to_client_r, to_client_w):
            if fd >= 0:
                os.close(fd)


def details(error: RequestError) -> str:
    """The `details` a JSON-RPC error from tether carries in its data."""
    assert isinstance(error.data, dict)
    said = error.data["details"]
    assert isinstance(said, str)
    return said


def write_script(path: Path, moves: Sequence[dict[str, Any]]) -> str:
    """Write a scripted model's file of moves and return its `--model` value."""
    lines = [json.dumps({"tether_script": 1}), *(json.dumps(m) for m in moves)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return f"scripted:{path}"


def agent_env(**extra: str) -> dict[str, str]:
    """The environment `tether acp` runs with: the account's home and the test's path."""
    env = {
        "TETHER_HOME": os.environ["TETHER_HOME"],
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    env.update(extra)
    return env


@asynccontextmanager
async def editor(
    model: str | None,
    *,
    answer: Answer = allow_once,
    tools: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> AsyncIterator[Editor]:
    """Start `tether acp --model MODEL [--tool T ...]` (no `--model` for None), with
    `env` added to its environment, and connect the SDK's client."""
    recorder = Recorder(answer=answer, from_frames=True)
    async with spawn_agent_process(
        recorder.as_client(),
        sys.executable,
        "-m",
        "tether",
        "acp",
        *(("--model", model) if model is not None else ()),
        *(arg for ref in tools for arg in ("--tool", ref)),
        env=agent_env(**(env or {})),
        transport_kwargs={"stderr": None, "shutdown_timeout": 15.0},
        observers=[recorder.observe],
    ) as (conn, process):
        yield Editor(conn, recorder, process)


def hang_moves() -> list[dict[str, Any]]:
    """A model's moves: a `Hang` call (it writes `m.txt` as it ends), then text a stop
    never lets the model reach."""
    call = {"id": "m1", "name": "Hang", "input": {"marker": "m.txt"}}
    return [
        {"text": "On it.", "tool_calls": [call]},
        {"text": "unreachable after a stop"},
    ]


def stubborn_bash(path: Path) -> tuple[str, str]:
    """Write a model whose move is a Bash call that prints `started` and whose shell
    ignores SIGTERM while a grandchild left its session (only the grace window's kill
    ends them); return its `--model` value and the marker its processes' command lines
    hold."""
    marker = f"32{time.monotonic_ns() % 10**6}.5"
    command = (
        f"trap '' TERM; setsid sleep {marker} & echo started; sleep {marker}; wait"
    )
    call = {"id": "m1", "name": "Bash", "input": {"command": command}}
    moves: list[dict[str, Any]] = [
        {"text": "", "tool_calls": [call]},
        {"text": "unreachable after a stop"},
    ]
    return write_script(path, moves), marker


async def stop_mid_call(
    ed: Editor | Embedded, session_id: str, stop: Callable[[], Awaitable[object]]
) -> list[str]:
    """Prompt the session and run `stop` once its call printed `started`; return the
    order the answers came in: `prompt <stopReason>` and `stop`."""
    order: list[str] = []

    async def prompt() -> None:
        response = await ed.conn.prompt(
            session_id=session_id, prompt=[text_block("go")]
        )
        order.append(f"prompt {response.stop_reason}")

    with anyio.fail_after(20):  # a stop that is not taken fails, never hangs
        async with anyio.create_task_group() as tg:
            tg.start_soon(prompt)
            await ed.recorder.wait_for(lambda: progress_says(ed, "started"))
            with anyio.fail_after(10):
                await stop()
            order.append("stop")
    return order


def tool_statuses(ed: Editor | Embedded) -> list[str]:
    """The statuses the editor was told of the tool calls, in order."""
    return [
        u.status
        for _, u in ed.recorder.updates
        if u.session_update == "tool_call_update" and u.status is not None
    ]


def progress_says(ed: Editor | Embedded, word: str) -> bool:
    """Whether a tool call's output so far, as the editor saw it, holds `word`."""
    return any(
        u.session_update == "tool_call_update"
        and u.content
        and word in u.content[0].content.text
        for _, u in ed.recorder.updates
    )


def alive(marker: str) -> list[psutil.Process]:
    """The processes (zombies aside) whose command line holds `marker`."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            mine = any(marker in part for part in proc.info["cmdline"] or ())
            if mine and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found
