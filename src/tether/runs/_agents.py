"""Command-line stage agents, contained exactly as Bash calls are.

An agent runs in the lane's worktree under the process-tree supervisor
(`tether.host._proctree`): its own process group, a subreaper holding every descendant,
the tree killed whole when the run dies or kills it. Its environment carries
`TETHER_AGENT=1`, `TETHER_RUN`, `TETHER_LANE` (so the stop verbs refuse it); its output
goes to the lane's log. This module runs one agent and reports how it ended; when and
whether to start one is the run's business.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import final

import anyio
import attrs

from .._env import TetherEnv
from ..host._proctree import BoundedOutput, ProcessTree

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
    """The end of its output."""
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
    on_tree: Callable[[ProcessTree | None], None],
) -> AgentOutcome:
    """Run one command-line agent to its end, its output appended to `log`.

    `on_tree` is told the agent's tree once it started (so the run can kill it) and
    None once it is gone. Returns when every process of the tree is gone.
    """
    env = {
        **os.environ,
        TetherEnv.AGENT.value: "1",
        "TETHER_RUN": run,
        "TETHER_LANE": lane,
        "TETHER_ITEM": item,
    }
    kept = BoundedOutput(_TAIL)
    log.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with log.open("ab") as sink:
        async with ProcessTree() as tree:
            try:
                await tree.start(argv, cwd=cwd, env=env)
            except OSError as exc:
                line = f"tether: the agent could not start: {exc}\n".encode()
                sink.write(line)
                kept.add(line)
                return AgentOutcome(exit_status=127, log_tail=kept.text())
            on_tree(tree)
            try:
                async with anyio.create_task_group() as tg:

                    async def pump() -> None:
                        async for chunk in tree.output():
                            kept.add(chunk)
                            sink.write(chunk)
                            sink.flush()

                    tg.start_soon(pump)
                    with anyio.move_on_after(
                        timeout if timeout else float("inf")
                    ) as scope:
                        code = await tree.wait()
                    if scope.cancelled_caught:
                        killed_code = await tree.kill()
                        code = -9 if killed_code is None else killed_code
                        note = f"\ntether: the agent ran past its {timeout} s and was killed\n"
                        kept.add(note.encode())
                        sink.write(note.encode())
            finally:
                on_tree(None)
    return AgentOutcome(exit_status=code, log_tail=kept.text())
