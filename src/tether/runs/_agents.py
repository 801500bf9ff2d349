"""Command-line stage agents, contained exactly as Bash calls are.

An agent runs in the lane's worktree through `run_command`, the one entry point for
whatever tether runs as a process tree (the Bash tool uses it too): the same
containment (a PID namespace walled as S15 says, or the subreaper), the tree killed
whole when the run dies or kills it. Its tree may write the lane (its own git dir
inside it) and the folders `TETHER_WRITABLE` declares. Its environment carries
`TETHER_AGENT=1`, `TETHER_RUN`, `TETHER_LANE` (so the stop verbs refuse it); its output
goes to the lane's log. This module runs one agent and reports how it ended; when and
whether to start one is the run's business.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, final

import anyio
import attrs

from .._channel import stage_env
from .._env import TetherEnv
from ..host import run_command
from ._lane_log import LaneLog, append_line

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ._plan import Stage

__all__ = (
    "WINDOW_SHARE",
    "AgentOutcome",
    "declared_writable",
    "expand",
    "run_command_agent",
    "usage_reset",
    "window_reset",
)

_PLACEHOLDER = re.compile(r"\{(brief|lane|item)\}")
_TAIL = 4000


def declared_writable() -> list[Path]:
    """The folders `TETHER_WRITABLE` declares writable.

    They are writable for every command and preset stage agent (a builtin stage's tools
    write only the lane; the run says so).
    """
    raw = os.environ.get(TetherEnv.WRITABLE, "")
    return [Path(p) for p in raw.split(os.pathsep) if os.path.isabs(p)]


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
    rate_limits: tuple[tuple[str, str], ...] = ()
    """The rate-limit headers of the model's latest answer (builtin stages)."""
    stopped: bool = False
    """The person's stop ended the agent between tool calls: the stage did not finish
    and nothing of it was cut (builtin stages)."""
    calls: int = 0
    """Tool calls the agent started, each run to its own end (builtin stages)."""
    session_id: str | None = None
    """The agent session whose transcript a take-over continues (builtin stages)."""
    timed_out: float | None = None
    """The stage's `timeout` when it ended the agent (its tree was killed)."""

    @property
    def note(self) -> str:
        """How the stop ended the stage, as the receipt says it; empty when it did not."""
        if not self.stopped:
            return ""
        plural = "" if self.calls == 1 else "s"
        return f"stopped at the person's stop after {self.calls} tool call{plural}"


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
    writable: Sequence[Path] = (),
    pass_env: Sequence[str] = (),
) -> AgentOutcome:
    """Run one command-line agent to its end, its output appended to `log`.

    `writable` and `pass_env` are what the stage declares (S15): folders its tree may
    write besides the lane, and withheld variables it needs.

    `on_call` is told the call's cancel scope once it starts (cancelling it kills and
    reaps the agent's whole tree) and None once the call is over. Returns when every
    process of the tree is gone.
    """
    env = {**os.environ, **stage_env(run=run, lane=lane, item=item)}
    log.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with LaneLog(log) as sink:
        on_output = sink.write

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
                    # S15: the lane is the workspace, its own git dir inside it; the
                    # person's repository is read-only, as is the rest of the account.
                    writable=[*writable, *declared_writable()],
                    pass_env=pass_env,
                )
            except OSError as exc:
                line = f"tether: the agent could not start: {exc}\n"
                sink.write(line)
                return AgentOutcome(exit_status=127, log_tail=line)
            finally:
                on_call(None)
        if scope.cancelled_caught:
            sink.write(b"\ntether: the agent's tree was killed\n")
            return AgentOutcome(exit_status=-9, log_tail="killed", killed=True)
    tail = outcome.output
    if outcome.timed_out:
        line = f"\ntether: {timed_out_note(timeout or 0.0)}\n"
        tail += line
        sink_line(log, line)
        return AgentOutcome(
            exit_status=outcome.returncode, log_tail=tail, timed_out=timeout
        )
    return AgentOutcome(exit_status=outcome.returncode, log_tail=tail)


def timed_out_note(seconds: float) -> str:
    """What the screen, the receipt and the digest say of a stage ended by its timeout."""
    return f"timed out after {seconds:g} s; its tree was killed"


def sink_line(log: Path, line: str) -> None:
    """Append one line of tether's own to a lane log (through its bound)."""
    append_line(log, line)


def usage_reset(stage: Stage, outcome: AgentOutcome, now: float) -> float | None:
    """When a failed agent said it hit a usage limit: the time its window resets.

    The stage's `usage_limit` pattern is searched in the log tail; a named group
    `reset` holding a Unix time or an ISO 8601 time gives the reset, else the stage's
    `usage_wait` seconds from now. None when the call did not hit a limit.
    """
    if outcome.exit_status == 0 or stage.usage_limit is None:
        return None
    found = re.search(stage.usage_limit, outcome.log_tail)
    if found is None:
        return None
    text = found.groupdict().get("reset")
    if text:
        try:
            return float(text)
        except ValueError:
            pass
        try:
            when = datetime.fromisoformat(text)
        except ValueError:
            pass
        else:
            if when.tzinfo is None:
                when = when.replace(tzinfo=UTC)
            return when.timestamp()
    return now + stage.usage_wait


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
WINDOW_SHARE = 0.95
"""A model account at this share of its usage window waits for the reset."""


def _seconds(text: str) -> float | None:
    """`6m0s`, `1.5s`, `20ms`, `3` (seconds) -> seconds; None when unreadable."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * _UNIT[u] for n, u in parts)


def window_reset(headers: tuple[tuple[str, str], ...], seen_at: float) -> float | None:
    """When an endpoint's answer says its window is at 95 % or more: the reset time.

    Reads `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` (OpenAI's names);
    the later reset of the windows that are used up counts. None when no window is.
    """
    got = {name.lower(): value for name, value in headers}
    resets: list[float] = []
    for kind in ("requests", "tokens"):
        try:
            limit = float(got[f"x-ratelimit-limit-{kind}"])
            remaining = float(got[f"x-ratelimit-remaining-{kind}"])
        except (KeyError, ValueError):
            continue
        if limit <= 0 or (limit - remaining) / limit < WINDOW_SHARE:
            continue
        after = _seconds(got.get(f"x-ratelimit-reset-{kind}", ""))
        resets.append(seen_at + (after if after is not None else 60.0))
    return max(resets) if resets else None
