"""Command-line stage agents, contained exactly as Bash calls are.

An agent runs in the lane's worktree through `run_command`, the one entry point for
whatever tether runs as a process tree (the Bash tool uses it too): the same
containment (a PID namespace with the stop folders read-only, or the subreaper), the
tree killed whole when the run dies or kills it. Its environment carries
`TETHER_AGENT=1`, `TETHER_RUN`, `TETHER_LANE` (so the stop verbs refuse it); its output
goes to the lane's log. This module runs one agent and reports how it ended; when and
whether to start one is the run's business.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import final

import anyio
import attrs

from .._env import TetherEnv
from ..host._proctree import run_command

__all__ = ("AgentOutcome", "expand", "run_command_agent")

_PLACEHOLDER = re.compile(r"\{(brief|lane|item)\}")
_TAIL = 4000


def expand(argv: Sequence[str], values: dict[str, str]) -> list[str]:
    """Expand `{brief}`, `{lane}`, `{item}` in a command line.

    An argument that is exactly a placeholder becomes the value as it is (one argument,
    no shell sees it); a placeholder inside a longer argument (such as a `sh -c` script)
    is replaced by the value shell-quoted, so a brief can never inject a command.
    """
    out: list[str] = []
    for part in argv:
        whole = _PLACEHOLDER.fullmatch(part)
        if whole is not None:
            out.append(values[whole.group(1)])
        else:
            out.append(
                _PLACEHOLDER.sub(lambda m: shlex.quote(values[m.group(1)]), part)
            )
    return out


@final
@attrs.frozen(kw_only=True)
class AgentOutcome:
    """How an agent's call ended."""

    exit_status: int
    """Its exit code; negative for a signal; 127 when it could not start."""
    log_tail: str
    """The start and the end of its output."""
    killed: bool = False
    """The run killed its tree (a second Ctrl-C)."""


async def run_command_agent(
    argv: Sequence[str],
    *,
    cwd: Path,
    log: Path,
    run: str,
    lane: str,
    item: str,
    timeout: float | None,
    on_call: Callable[[anyio.CancelScope | None], None],
) -> AgentOutcome:
    """Run one command-line agent to its end, its output appended to `log`.

    `on_call` is told the call's cancel scope once it starts (cancelling it kills and
    reaps the agent's whole tree) and None once the call is over. Returns when every
    process of the tree is gone.
    """
    env = {
        **os.environ,
        TetherEnv.AGENT.value: "1",
        "TETHER_RUN": run,
        "TETHER_LANE": lane,
        "TETHER_ITEM": item,
    }
    log.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with log.open("ab") as sink:

        def on_output(text: str) -> None:
            sink.write(text.encode("utf-8", "replace"))
            sink.flush()

        with anyio.CancelScope() as scope:
            on_call(scope)
            try:
                outcome = await run_command(
                    argv,
                    cwd=cwd,
                    env=env,
                    stop=anyio.Event(),  # spec 03: a stop never cuts an agent's call
                    on_output=on_output,
                    timeout=timeout,
                    limit=_TAIL,
                    progress_limit=sys.maxsize,
                )
            except OSError as exc:
                line = f"tether: the agent could not start: {exc}\n"
                sink.write(line.encode())
                return AgentOutcome(exit_status=127, log_tail=line)
            finally:
                on_call(None)
        if scope.cancelled_caught:
            sink.write(b"\ntether: the agent's tree was killed\n")
            return AgentOutcome(exit_status=-9, log_tail="killed", killed=True)
    tail = outcome.output
    if outcome.timed_out:
        tail += f"\ntether: the agent ran past its {timeout} s and was killed\n"
    return AgentOutcome(exit_status=outcome.returncode, log_tail=tail)
