"""Fixtures for agent-loop tests: a runtime with the test tools and a scripted model."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from tests.runtime.support import ALLOW_ALL, TEST_TOOLS

from tether import Agent, AgentSession, Runtime
from tether.models import Model, Move, ScriptedModel, ToolCall

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterable
    from pathlib import Path

    from tether.runtime import AbortReport, AgentEvent


def call(name: str, call_id: str, /, **input: Any) -> ToolCall:
    """A tool call a scripted move makes."""
    import json

    return ToolCall(id=call_id, name=name, arguments=json.dumps(input))


class Recorder:
    """Every agent event in order, and a hook that runs when an event matches."""

    def __init__(self) -> None:
        self.events: list[AgentEvent] = []
        self.hooks: list[tuple[Callable[[AgentEvent], bool], Callable[[], Any]]] = []

    def when(
        self, predicate: Callable[[AgentEvent], bool], action: Callable[[], Any]
    ) -> None:
        """Run `action` (in the test's task group) the first time `predicate` holds."""
        self.hooks.append((predicate, action))

    async def __call__(self, event: AgentEvent) -> None:
        self.events.append(event)
        for hook in list(self.hooks):
            if hook[0](event):
                self.hooks.remove(hook)
                hook[1]()

    def kinds(self) -> list[str]:
        return [type(e).__name__ for e in self.events]


class Harness:
    """A runtime, a scripted model, an agent session and its recorder."""

    def __init__(
        self,
        runtime: Runtime,
        model: Any,  # a ScriptedModel, unless the test gave a model of its own
        session: AgentSession,
        rec: Recorder,
    ) -> None:
        self.runtime = runtime
        self.model = model
        self.session = session
        self.rec = rec
        self.tg: anyio.abc.TaskGroup | None = None
        self.reports: list[AbortReport] = []
        self._aborted = anyio.Event()

    def abort_soon(self) -> None:
        """Start `session.abort()` in the background (as a person pressing Stop)."""
        assert self.tg is not None

        async def abort() -> None:
            self.reports.append(await self.session.abort())
            self._aborted.set()

        self.tg.start_soon(abort)

    async def report(self) -> AbortReport:
        """The report of the first Stop, once `abort()` has returned it."""
        await self._aborted.wait()
        return self.reports[0]

    def stop_when(self, predicate: Callable[[AgentEvent], bool]) -> None:
        """Press Stop the first time an event matches."""
        self.rec.when(predicate, self.abort_soon)

    def last_request(self) -> list[dict[str, Any]]:
        return [m.to_json() for m in self.model.requests[-1].messages]


@pytest.fixture
def anyio_backend() -> str:
    """The agent loop's tests run on asyncio only (the runtime's own tests, one folder
    up, cover trio as well)."""
    return "asyncio"


@pytest.fixture(params=["inprocess", "stdio"])
def host_kind(request: pytest.FixtureRequest) -> str:
    """A test using this runs against the in-process host and `tether host --stdio`."""
    return str(request.param)


@pytest.fixture
def harness(
    workspace: Path,
) -> Callable[..., Any]:
    @asynccontextmanager
    async def make(
        moves: Iterable[Move] = (),
        *,
        model: Model | None = None,
        max_turn_requests: int = 50,
        **runtime_kw: Any,
    ) -> AsyncIterator[Harness]:
        options: dict[str, Any] = {
            "workspace": workspace,
            "tools": TEST_TOOLS,
            "permissions": ALLOW_ALL,
            "grace": 0.3,
            "abort_bound": 0.5,
            "guard": False,
        }
        options.update(runtime_kw)
        if model is None:
            model = ScriptedModel(moves)
        rec = Recorder()
        async with Runtime(**options) as runtime:
            agent = Agent(runtime, model, max_turn_requests=max_turn_requests)
            h = Harness(runtime, model, agent.session(on_event=rec), rec)
            async with anyio.create_task_group() as tg:
                h.tg = tg
                with anyio.fail_after(10):
                    yield h

    return make
