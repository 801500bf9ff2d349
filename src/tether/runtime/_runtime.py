"""The Runtime: an `async with` lifetime owning the host, the executor and the ledger."""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, final

import anyio
import anyio.abc
import attrs

from .._config import Config, load_config
from .._ids import new_id
from ..errors import UsageError
from ..host._broker import Broker, Guard, RuleSet, stop_guard
from ..host._contain import (
    Containment,
    containment,
    containment_choice,
    containment_now,
)
from ..host._core import HostCore
from ..host._inprocess import InProcessHost
from ..host._loadable import check_stdio_loadable
from ..host._tool import StopClass, Tool, call_title, check_unique_names
from ..host.tools import open_mcp_tools, standard_tools
from ._executor import Executor
from ._ledger import Ledger
from ._session import Session
from ._values import RuntimeEvent, ToolProgress

if TYPE_CHECKING:
    from types import TracebackType

    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

    from ..host._protocol import Approver, Elicitor, HostConnection

__all__ = ("MIN_ABORT_BOUND", "Runtime", "RuntimeStatistics")

HostKind = Literal["inprocess", "stdio"]

_log = logging.getLogger("tether.runtime")

EVENT_BACKLOG = 256
"""Unread events a subscriber may hold before progress events for it are skipped (state
changes and `turn.settled` are always queued): a tool's flood of output never grows the
runtime's memory through a subscriber that reads slowly."""

MIN_ABORT_BOUND = 0.05
"""The smallest `abort_bound` accepted, in seconds. Below it the bound is not met on a
loaded 2-core machine: an abort waits for one event-loop turn, and over stdio for a
round trip to the host, each of which took up to tens of milliseconds there
(`benchmarks/random_stops.py` measures the abort time's p99 under load)."""


@attrs.frozen
class RuntimeStatistics:
    """Counters of a runtime's calls."""

    active_calls: int
    """Calls not yet settled."""
    late_results: int
    """Results that came after their call had ended, and were discarded (S3)."""
    dropped_progress: int
    """Progress of abandoned calls that was dropped (S4)."""
    unread_progress: int = 0
    """Progress events not queued for a subscriber that had `EVENT_BACKLOG` unread."""


@final
class Runtime:
    """Runs sessions whose Stop is honest and prompt.

    `tools=None` gives the standard tools (built-in, plugins, configured MCP servers);
    `permissions` is a mapping of `allow` / `ask` / `deny` rule lists, or rules already
    built (None: the rules of the account's config); `approver` decides `ask` (None: ask
    means deny); `elicitor` answers an MCP server's question to the person during a call
    (None: declined; the in-process host's servers only); `grace` is the PROCESS grace window and `abort_bound` the bound on
    `Session.abort()`, in seconds (None: the account's settings, 10 and 1 by default);
    `ledger` is None (memory) or a SQLite file path; `host` picks the in-process host or
    `tether host --stdio` in a child process.
    """

    def __init__(
        self,
        *,
        workspace: Path | str,
        tools: Sequence[Tool] | None = None,
        permissions: Mapping[str, Sequence[str]] | RuleSet | None = None,
        approver: Approver | None = None,
        elicitor: Elicitor | None = None,
        grace: float | None = None,
        abort_bound: float | None = None,
        ledger: Path | str | None = None,
        host: HostKind = "inprocess",
        max_concurrent: int = 16,
        tombstone_ttl: float = 60.0,
        guard: Guard | bool = True,
        config: Config | None = None,
    ) -> None:
        self.workspace = Path(workspace).resolve()
        self.config = config if config is not None else load_config()
        # None: the account's setting (config file or TETHER_GRACE / TETHER_ABORT_BOUND),
        # whose defaults are 10 s and 1 s.
        grace = self.config.grace if grace is None else grace
        abort_bound = self.config.abort_bound if abort_bound is None else abort_bound
        if grace <= 0 or abort_bound <= 0:
            raise UsageError("grace and abort_bound must be more than 0 seconds")
        if abort_bound < MIN_ABORT_BOUND:
            raise UsageError(
                f"abort_bound {abort_bound:g} s is below what this runtime can honour "
                f"({MIN_ABORT_BOUND:g} s: a stdio round trip on a loaded machine); "
                f"pass abort_bound={MIN_ABORT_BOUND:g} or more"
            )
        # A bad or unsatisfiable TETHER_CONTAINMENT is refused now, not by every
        # process tree later. Only an explicit `namespace` needs the kernel probed here.
        if containment_choice() == "namespace":
            containment()
        self.containment: Containment | None = None
        """The containment process trees get, known once the runtime is entered."""
        self._problems: list[str] = []
        self._use_defaults = tools is None
        if tools is None:
            tools = standard_tools(self.config, self._problems)
        self.tools = list(tools)
        check_unique_names(self.tools)
        if host == "stdio" and not self._use_defaults:
            check_stdio_loadable(self.tools)
        self._classes = {t.name: t.stop_class for t in self.tools}
        self._named = {t.name: t for t in self.tools}
        self.rules = _rules(permissions, self.config)
        if host == "stdio":
            _refuse_what_cannot_cross(guard, self.rules)
        self.approver = approver
        self.elicitor = elicitor
        self.grace = grace
        self.abort_bound = abort_bound
        self.host_kind: HostKind = host
        self.max_concurrent = max_concurrent
        self.tombstone_ttl = tombstone_ttl
        self.guard: Guard | None = stop_guard() if guard is True else (guard or None)
        self.ledger = Ledger(Path(ledger) if ledger is not None else None)
        self.sessions: list[Session] = []
        self._subscribers: list[MemoryObjectSendStream[RuntimeEvent]] = []
        self._unread_progress = 0
        self.executor = Executor(
            ledger=self.ledger,
            grace=grace,
            abort_bound=abort_bound,
            emit=self.emit,
            # The table itself, not a method over it: one call less per tool call.
            stop_class_of=self._classes.get,
            # `bool(self._subscribers)`, asked with no Python frame of its own (twice a
            # call); the list is only ever changed in place.
            listened=functools.partial(bool, self._subscribers),
        )
        self._stack: AsyncExitStack | None = None
        self._task_group: anyio.abc.TaskGroup | None = None
        """The runtime's own tasks (grace windows, integrations' calls), while entered."""
        self.host: HostConnection | None = None

    @property
    def problems(self) -> list[str]:
        """What the runtime could not do as asked.

        Plugins and MCP servers skipped (and why), the fallback containment when it is
        in force (and why), stopped calls whose workers still run (by tool), and what
        closing waited for or could not wait for.
        """
        return [*self._problems, *self.executor.outliving()]

    def statistics(self) -> RuntimeStatistics:
        """Return counters of the runtime's calls."""
        return RuntimeStatistics(
            active_calls=len(self.executor.active),
            late_results=self.executor.late_results,
            dropped_progress=self.executor.dropped_progress,
            unread_progress=self._unread_progress,
        )

    def _add_tools(self, tools: Sequence[Tool]) -> None:
        for tool in tools:
            if tool.name in self._classes:
                self._problems.append(
                    f"tool {tool.name} is defined twice; the first is kept"
                )
                continue
            self.tools.append(tool)
            self._classes[tool.name] = tool.stop_class
            self._named[tool.name] = tool

    def stop_class_of(self, name: str) -> StopClass | None:
        """The stop class of a tool the runtime knows, or None."""
        return self._classes.get(name)

    def call_title(self, name: str, args: Mapping[str, Any]) -> str:
        """A call's one-line title (`Bash: make test`), by its tool's subject field."""
        tool = self._named.get(name)
        return tool.title(args) if tool is not None else call_title(name, args)

    def session(self) -> Session:
        """Start a session with a fresh id."""
        if self.host is None:
            raise UsageError("use the Runtime inside `async with`")
        session = Session(self.executor, new_id("session"))
        self.sessions.append(session)
        return session

    def end_session(self, session: Session) -> None:
        """The session takes no more turns: it leaves `runtime.sessions`.

        At once when each of its turns has settled; otherwise once they have (a
        process in its grace window, a started write): until then closing the runtime
        still stops it and waits for it. A server that runs each call in a session of
        its own ends each, or `runtime.sessions` grows with every call. A ledger with
        a file then forgets its rows (`Ledger.forget`).
        """
        if not session.unsettled_turns():
            self._drop(session)
        elif self._task_group is not None:
            self._task_group.start_soon(self._drop_when_settled, session)

    async def _drop_when_settled(self, session: Session) -> None:
        # Each turn's own event: a turn left open never settles, and its session
        # stays (waiting on `session.settled()` would return at once for it).
        for turn in session.unsettled_turns():
            await turn.settled.wait()
        self._drop(session)

    def _drop(self, session: Session) -> None:
        with suppress(ValueError):  # ended twice
            self.sessions.remove(session)
        # A ledger with a file lets go of the session's rows: the file has them.
        self.ledger.forget(session.id)

    def subscribe(self) -> MemoryObjectReceiveStream[RuntimeEvent]:
        """Receive every event (progress, call changes, `turn.settled`) from now on."""
        send, receive = anyio.create_memory_object_stream[RuntimeEvent](math.inf)
        self._subscribers.append(send)
        return receive

    def emit(self, event: RuntimeEvent) -> None:
        """Deliver an event to every subscriber (never blocks)."""
        progress = isinstance(event, ToolProgress)
        for stream in list(self._subscribers):
            if progress and stream.statistics().current_buffer_used >= EVENT_BACKLOG:
                self._unread_progress += 1
                continue
            try:
                stream.send_nowait(event)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._subscribers.remove(stream)
                stream.close()

    async def __aenter__(self) -> Runtime:
        stack = AsyncExitStack()
        await stack.__aenter__()
        try:
            await self._note_containment()
            tg = self._task_group = await stack.enter_async_context(
                anyio.create_task_group()
            )
            if self._use_defaults and self.host_kind == "inprocess":
                self._add_tools(
                    await stack.enter_async_context(
                        open_mcp_tools(
                            self.config,
                            self._problems,
                            workspace=self.workspace,
                            elicitor=self.elicitor,
                        )
                    )
                )
            self.host = await stack.enter_async_context(self._open_host())
            # Closed first: no call is sent once the host starts closing.
            stack.enter_context(self.executor.serving(self.host, tg))
        except BaseException:
            await stack.__aexit__(None, None, None)
            raise
        self._stack = stack
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        stack, self._stack = self._stack, None
        assert stack is not None
        host = self.host
        assert host is not None
        try:
            # Stop what still runs and give it the time its class allows, bounded.
            with anyio.move_on_after(self.grace + 2 * self.abort_bound, shield=True):
                # Copies: an ended session leaves the list once it has settled.
                for session in list(self.sessions):
                    if session.unsettled_turns():
                        await session.abort(source="shutdown", reason="runtime closed")
                for session in list(self.sessions):
                    await session.settled()
            # What still runs after that is given up where it may be: an extension whose
            # server never answered ends END_UNKNOWN and its server is dropped (a hung
            # server never holds the close); a started write still runs to its end.
            with anyio.move_on_after(2 * self.abort_bound, shield=True):
                for session in list(self.sessions):
                    if session.unsettled_turns():
                        await session.abort(
                            source="shutdown", reason="runtime closed", kill=True
                        )
            await self._wait_for_started_writes()
        finally:
            self.host = None
            assert self._task_group is not None
            self._task_group.cancel_scope.cancel()
            try:
                await stack.__aexit__(exc_type, exc, tb)
            finally:
                if self.executor.active:
                    # The stdio host was ended after the bound: what it never reported
                    # ends with what is known (END_UNKNOWN for a started write, which
                    # closing waited for unless it was cut short).
                    self._say("closed before " + "; ".join(self.executor.waiting()))
                    with anyio.CancelScope(shield=True):
                        await self.executor.end_at_close(host, "the runtime closed")
                for stream in self._subscribers:
                    stream.close()
                self.ledger.close()

    async def _wait_for_started_writes(self) -> None:
        """After the shutdown bound: wait for every started write, and say so.

        A started write is never cut (spec 01, MUTATING and EXTENSION), on either host.
        In process every unsettled call is waited for (its task lives in this process
        and cannot be killed); over stdio the started writes and extensions are, with the
        host still connected so their results arrive, and the rest is left to the host's
        bounded close.
        """
        if self.host_kind == "inprocess":
            waiting = self.executor.waiting()
            if waiting:
                self._say("closing waits for " + "; ".join(waiting))
                with anyio.CancelScope(shield=True):
                    for session in list(self.sessions):
                        await session.settled()
            return
        writes = self.executor.started_writes()
        if writes:
            self._say("closing waits for " + "; ".join(self.executor.waiting(writes)))
            # Not bounded on purpose: each wait ends with the write's result, or when
            # the host goes away (`Executor.host_lost` settles every call then).
            with anyio.CancelScope(shield=True):
                for call in writes:
                    await call.wait_settled()

    async def _note_containment(self) -> None:
        """Learn the containment in force; the fallback is a problem, with its reason."""
        found = await containment_now()
        self.containment = found
        if found.kind == "subreaper":
            line = f"process trees get the fallback containment (subreaper): {found.reason}"
            if line not in self._problems:
                self._problems.append(line)

    def _say(self, text: str) -> None:
        """Tell the person what closing waits for, or what it could not wait for."""
        self._problems.append(text)
        _log.warning("tether: %s", text)

    def _open_host(self) -> AbstractAsyncContextManager[HostConnection]:
        broker = Broker(
            workspace=self.workspace,
            rules=self.rules,
            approver=self.approver,
            guard=self.guard,
        )
        if self.host_kind == "inprocess":
            core = HostCore(
                self.tools,
                broker=broker,
                max_concurrent=self.max_concurrent,
                tombstone_ttl=self.tombstone_ttl,
            )
            return InProcessHost.open(
                core,
                self.executor.on_host_event,
                notice_after=self.abort_bound,
                say=self._say,
            )
        from ..host._stdio import StdioHostClient

        return StdioHostClient.open(
            tools=None if self._use_defaults else self.tools,
            workspace=self.workspace,
            rules=self.rules,
            approver=self.approver,
            guard=self.guard is not None,
            max_concurrent=self.max_concurrent,
            tombstone_ttl=self.tombstone_ttl,
            sink=self.executor.on_host_event,
            on_lost=self.executor.host_lost,
            close_bound=self.grace + self.abort_bound,
        )


def _refuse_what_cannot_cross(guard: Guard | bool, rules: RuleSet) -> None:
    """Refuse settings the stdio host would have to replace: never downgrade in silence.

    The host process rebuilds the guard and the rules from what crosses its command
    line: `guard=True`/`False` and the allow / ask / deny lists of `PermissionRules`.
    """
    from ..host._rules import PermissionRules

    if not isinstance(guard, bool):
        raise UsageError(
            "a custom guard cannot cross to the stdio host (it would run the default "
            "guard instead); pass guard=True, or use host='inprocess'"
        )
    if type(rules) is not PermissionRules:
        raise UsageError(
            f"permission rules of type {type(rules).__name__} cannot cross to the stdio "
            "host (only allow / ask / deny lists can); pass the lists, or use "
            "host='inprocess'"
        )


def _rules(
    permissions: Mapping[str, Sequence[str]] | RuleSet | None, config: Config
) -> RuleSet:
    from ..host._rules import PermissionRules

    if permissions is None:
        # The account's rules; with none, the class defaults and the workspace rule.
        return PermissionRules.from_config(config)
    if not isinstance(permissions, Mapping):
        return permissions

    unknown = set(permissions) - {"allow", "ask", "deny"}
    if unknown:
        raise UsageError(
            f"permissions take allow / ask / deny lists, not {sorted(unknown)}"
        )
    return PermissionRules.from_lists(
        allow=list(permissions.get("allow", ())),
        ask=list(permissions.get("ask", ())),
        deny=list(permissions.get("deny", ())),
    )
