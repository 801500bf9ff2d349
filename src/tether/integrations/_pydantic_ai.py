"""`TetherToolset`: a pydantic-ai toolset whose every tool call is a tether call.

Built on pydantic-ai's public toolset interface alone (`AbstractToolset`, `ToolsetTool`,
`ToolDefinition`, `ToolFailed`), as its durable-execution toolsets are. The toolset
serves an entered tether `Runtime` (its tools, permission rules, guard, wall and
ledger); each call runs in a session of its own, in a task of the runtime's own group
(`_calls.py`), so a cancelled run never cancels the work tether must finish.

Cancellation. pydantic-ai runs each tool call as a task of its own and, when the run is
cancelled (the task running `agent.run()` cancelled, `AgentRun.cancel()`,
`RunContext.cancel()`, a `CancellationToken`), cancels those tasks and keeps, in the
cancelled run's messages, the return of each call that finished. The cancel of a call's
task is its session's `Session.abort()`: a read-only call ends at once, a process gets
its grace window and its tree is reclaimed, a started write runs to its end. Once the
call has settled, the task returns the call's true end as its result, which pydantic-ai
keeps: a resumed run's model reads what really happened, not a generic "interrupted".
Only a call's own task ends that way; in the task that drives the run (the one that
entered the toolset) the cancellation always goes on.

`TetherToolset.stop()` is the same stop without cancelling the run: the calls in flight
are aborted and return their true ends, and the runs they belong to start no other call.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any, Generic, final

import anyio

from .. import _extras
from ..errors import ToolAborted, ToolError, UsageError
from ._calls import CallRunner

try:
    from pydantic_ai import RunContext, ToolDefinition, ToolFailed
    from pydantic_ai.tools import AgentDepsT
    from pydantic_ai.toolsets import AbstractToolset, ToolsetTool
    from pydantic_core import SchemaValidator, core_schema
except ImportError as error:
    raise ImportError(
        _extras.missing("pydantic-ai", "tether's pydantic-ai toolset")
    ) from error

if TYPE_CHECKING:
    from ..runtime import AbortReport, Runtime, Session

CANCEL_REASON = "the agent run was cancelled"
"""What the ledger and the reports say a pydantic-ai cancel was."""

__all__ = ("TetherToolset",)

_ARGUMENTS = SchemaValidator(
    core_schema.dict_schema(core_schema.str_schema(), core_schema.any_schema())
)
"""pydantic-ai checks only that the arguments are an object: tether validates them
against the tool's schema and answers `INVALID_INPUT` itself."""


@final
class TetherToolset(AbstractToolset[AgentDepsT], Generic[AgentDepsT]):
    """A pydantic-ai toolset serving `runtime`'s tools, each call a tether call.

    `runtime` is entered by its owner around the agent's runs (`async with runtime:`):
    a cancelled run cancels whatever was entered inside it, and the runtime must
    outlive the run to finish what a stop leaves running. `id` names the toolset among
    an agent's toolsets; `max_retries` is pydantic-ai's retry budget for a call.
    """

    def __init__(
        self, runtime: Runtime, *, id: str | None = None, max_retries: int = 1
    ) -> None:
        self.runtime = runtime
        self._id = id
        self.max_retries = max_retries
        self._runner: CallRunner | None = None
        self._tags = itertools.count()
        self._entering_tasks: list[int] = []
        """Ids of the tasks inside the toolset's `async with`: those driving runs."""
        self._stopped_runs: set[str] = set()
        """Runs a stop reached a call of: they start no other call (S10)."""

    @property
    def id(self) -> str | None:
        """The toolset's id among an agent's toolsets (None: none given)."""
        return self._id

    async def __aenter__(self) -> TetherToolset[AgentDepsT]:
        if self.runtime.host is None:
            raise UsageError(
                "TetherToolset needs its Runtime entered first: `async with runtime:` "
                "around the agent's runs (a cancelled run cancels what was entered "
                "inside it, and tether must finish what a stop leaves running)"
            )
        group = self.runtime.executor.task_group
        assert group is not None, "an entered runtime has its task group"
        if self._runner is None or self._runner.task_group is not group:
            self._runner = CallRunner(self.runtime, group, reason=CANCEL_REASON)
        self._entering_tasks.append(anyio.get_current_task().id)
        return self

    async def __aexit__(self, *exc_info: object) -> bool | None:
        self._entering_tasks.remove(anyio.get_current_task().id)
        return None

    async def get_tools(
        self, ctx: RunContext[AgentDepsT]
    ) -> dict[str, ToolsetTool[AgentDepsT]]:
        """The runtime's tools; `metadata["tether_stop_class"]` names each's class."""
        self._running()
        return {
            spec.name: ToolsetTool(
                toolset=self,
                tool_def=ToolDefinition(
                    name=spec.name,
                    description=spec.description or None,
                    parameters_json_schema=spec.input_schema(),
                    metadata={"tether_stop_class": spec.stop_class.value},
                ),
                max_retries=self.max_retries,
                args_validator=_ARGUMENTS,
            )
            for spec in self.runtime.tools
        }

    async def call_tool(
        self,
        name: str,
        tool_args: dict[str, Any],
        ctx: RunContext[AgentDepsT],
        tool: ToolsetTool[AgentDepsT],
    ) -> str:
        """Run the call in tether and return its output, or its true end after a stop.

        Raises:
            ToolFailed: the call failed (permission denied, invalid input, the tool's
                own failure); the message, with its error code, goes to the model.
        """
        runner = self._running()
        run = ctx.run_id
        refuse = None
        if run is not None and run in self._stopped_runs:
            refuse = "the toolset was stopped"
        tag = (str(next(self._tags)), ctx.tool_call_id or "")
        try:
            running = await runner.call(name, tool_args, tag=tag, refuse=refuse)
        except anyio.get_cancelled_exc_class():
            stopped = [r for r in runner.stopped if r.tag == tag]
            if stopped and anyio.get_current_task().id not in self._entering_tasks:
                # A call's own task: pydantic-ai keeps a finished call's return in the
                # cancelled run's messages, so the model of a resumed run reads what
                # really happened. The run's own task goes on cancelled.
                with anyio.CancelScope(shield=True):
                    await runner.settle(stopped[0])
                return stopped[0].after_cancel_text()
            raise
        outcome = running.outcome
        if isinstance(outcome, ToolAborted) or outcome is None:
            if run is not None:
                self._stopped_runs.add(run)
            return running.result_text()
        if isinstance(outcome, ToolError) or outcome.is_error:
            raise ToolFailed(running.result_text())
        return outcome.output

    async def stop(self, *, reason: str | None = None) -> list[AbortReport]:
        """Stop every call in flight, as a cancel would, within the abort bound.

        Each stopped call returns its true end to its run (a started write once it
        has ended), and those runs start no other call; end a run itself with
        pydantic-ai's own cancel (`AgentRun.cancel()`). Returns one report per call.
        """
        runner = self._running()
        reports: list[AbortReport] = []

        async def abort(session: Session) -> None:
            reports.append(await session.abort(source="user", reason=reason))

        async with anyio.create_task_group() as tg:
            for running in runner.in_flight:
                tg.start_soon(abort, running.session)
        return reports

    async def wait_settled(self) -> None:
        """Wait until every call of the toolset's runtime has settled."""
        if self._runner is not None:
            await self._runner.wait_settled()

    def _running(self) -> CallRunner:
        if self.runtime.host is None or self._runner is None:
            raise UsageError(
                "TetherToolset's Runtime is closed; its calls run inside "
                "`async with runtime:`"
            )
        return self._runner
