"""The Bash tool: a shell command run as a reclaimable process tree (PROCESS, S13).

The command runs as `bash -c <command>` in the workspace, in the containment of
`tether.host._proctree` (its own PID namespace, the stop folders read-only, where the
kernel allows it), with stdin `/dev/null` and `TETHER_AGENT=1` in its environment. Its merged stdout and stderr stream out as progress; the result keeps
the first and last bytes of it with a marker counting what was dropped between.

Choices, written down:

- A nonzero exit is a normal result, not a failure: the output is returned with a
  last line `[exit code N]` (or `[killed by signal NAME]`), so the model sees both.
- When the command exits, whatever it left running (`cmd &`, daemons, `setsid`
  children) is killed: nothing a call started outlives the call.
- A stop sends SIGTERM to the tree and returns the output collected until every
  process of the tree has exited (the shell in front ending ends nothing); the runtime
  reports it as `TOOL_ABORTED` with that partial output, and the git locks a stopped
  command that did not exit 0 left are named. When the grace window closes
  first, the task is cancelled, every process of the tree is killed and reaped, what
  it printed up to the kill is streamed, and so are the git locks the kill left in the
  workspace's repository (`stale_git_locks`), before the cancellation propagates.
- Past its timeout the tree is killed and the call fails with `TOOL_TIMEOUT`.
- If the tree's supervisor is killed (from outside, or by the command itself under the
  fallback containment), the call fails: how the command ended is not known.

This module does not decide permissions or grace windows; the host and runtime do.
"""

from __future__ import annotations

import os
import signal
from typing import TYPE_CHECKING, Any, final

import pydantic

from ..._env import TetherEnv
from ...errors import ErrorCode, InvalidInput, ToolFailed
from .._proctree import CommandOutcome, run_command
from .._tool import StopClass, Tool, ToolContext, TypedTool

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..._config import Config

__all__ = ("Bash", "agent_env", "describe_exit", "lost_supervisor_message", "tools")

DEFAULT_TIMEOUT = 120.0
"""Seconds a command may run when the call names no timeout."""
MAX_TIMEOUT = 600.0
"""The longest timeout a call may ask for, seconds."""
OUTPUT_LIMIT = 30_000
"""Bytes of output kept in the result (head and tail)."""


class BashInput(pydantic.BaseModel):
    """Input of the Bash tool."""

    model_config = pydantic.ConfigDict(extra="forbid")

    command: str = pydantic.Field(min_length=1, description="The bash command to run.")
    timeout: float | None = pydantic.Field(
        default=None,
        gt=0,
        description="Seconds before the command is killed (default 120, at most 600).",
    )
    description: str | None = pydantic.Field(
        default=None, description="A few words saying what the command does."
    )


def agent_env() -> dict[str, str]:
    """Return the environment for processes an agent tool starts (`TETHER_AGENT=1`)."""
    env = dict(os.environ)
    env[TetherEnv.AGENT] = "1"
    return env


def describe_exit(code: int) -> str:
    """Return the line that says how a command ended, or "" for exit code 0."""
    if code == 0:
        return ""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        return f"[killed by signal {name}]"
    return f"[exit code {code}]"


def lost_supervisor_message(outcome: CommandOutcome) -> str:
    """Say that a tree's supervisor was killed, and what that means for its processes."""
    held = outcome.containment is not None and outcome.containment.kind == "namespace"
    fate = (
        "its namespace ended with it, so no process of the command is left"
        if held
        else "every process still carrying the tree's marker was killed; one that "
        "cleared its environment may have escaped (subreaper containment)"
    )
    return (
        f"the command's supervisor was killed before the command ended; {fate}\n"
        f"{outcome.output}"
    )


def _result_text(outcome: CommandOutcome) -> str:
    text = outcome.output
    line = describe_exit(outcome.returncode)
    if line:
        text = f"{text}\n{line}" if text and not text.endswith("\n") else text + line
    return text or "(no output)"


@final
class Bash(TypedTool):
    """Run a bash command in the workspace; stoppable, its whole process tree reclaimed."""

    input_model: type[pydantic.BaseModel] = BashInput

    name = "Bash"
    stop_class = StopClass.PROCESS
    subject_field: str | None = "command"
    description = (
        "Run a bash command in the workspace and return its output (stdout and stderr "
        "merged). Processes it leaves running are killed when it exits."
    )

    def __init__(
        self,
        *,
        default_timeout: float = DEFAULT_TIMEOUT,
        max_timeout: float = MAX_TIMEOUT,
        output_limit: int = OUTPUT_LIMIT,
    ) -> None:
        """Make the tool; `default_timeout` applies when a call names none."""
        self.default_timeout = default_timeout
        self.max_timeout = max_timeout
        self.output_limit = output_limit

    def validate(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """Validate the input; a timeout above the maximum is refused."""
        args = super().validate(raw)
        timeout = args["timeout"]
        if timeout is not None and timeout > self.max_timeout:
            raise InvalidInput(
                f"invalid input at timeout: at most {self.max_timeout:g} seconds",
                path="timeout",
            )
        return args

    async def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> str:
        """Run the command and return its output, with its exit code when nonzero.

        Raises:
            ToolFailed: the command could not start (`TOOL_FAILED`) or ran past its
                timeout (`TOOL_TIMEOUT`, with the output collected).
        """
        timeout = args.get("timeout") or self.default_timeout
        try:
            outcome = await run_command(
                ["bash", "-c", args["command"]],
                cwd=ctx.workspace,
                env=agent_env(),
                stop=ctx.cancelled,
                on_output=ctx.progress,
                timeout=timeout,
                limit=self.output_limit,
            )
        except OSError as exc:
            raise ToolFailed(f"the command could not start: {exc}") from None
        if outcome.supervisor_lost and not outcome.stopped:
            raise ToolFailed(lost_supervisor_message(outcome))
        if outcome.timed_out and not outcome.stopped:
            raise ToolFailed(
                f"the command timed out after {timeout:g} s and was killed\n"
                f"{outcome.output}",
                code=ErrorCode.TOOL_TIMEOUT,
            )
        return _result_text(outcome)


def tools(config: Config) -> list[Tool]:
    """Return the Bash tool for `config`."""
    del config  # Bash has no settings yet; the grace window is the runtime's.
    return [Bash()]
