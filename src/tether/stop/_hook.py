"""One agent hook event judged: a PreToolUse call and the environment it runs in.

The job: given the JSON a host sends before a tool call (Claude Code's PreToolUse shape:
`tool_name`, `tool_input`, `cwd`) and the environment of the agent, answer whether the
call may start and, if not, the message the agent is shown. Two refusals: a stop stands
for the run the agent works in (`TETHER_RUN` set: spec 03, "The stop inside an agent"),
and the guard's (spec 02, "The guard"). Anything that cannot be judged refuses.

Boundary: this module speaks no host's output format and exits nothing; a command (the
`tether guard --claude-hook` process) turns the answer into an exit code and text. It
runs before every tool call of an agent, so it imports at the top only what every event
needs and the guard, the protected paths and the stop reader on first use.
"""

from __future__ import annotations

import collections
import json
import os
from collections.abc import Mapping

from .._env import TetherEnv

TYPE_CHECKING = False  # `typing` is not imported at run time: see `HookAnswer`

__all__ = (
    "MAX_EVENT_BYTES",
    "HookAnswer",
    "answer_hook_event",
    "judge_hook_event",
)

MAX_EVENT_BYTES = 4 * 1024 * 1024
"""A larger event is refused unread: a hook must answer before its host gives up."""
_POST_EVENTS = frozenset({"PostToolUse", "PostToolUseFailure"})


if TYPE_CHECKING:
    from typing import NamedTuple

    from ._protected import Listing

    class _Answer(NamedTuple):
        allowed: bool
        message: str = ""
        stopped: bool = False

else:
    _Answer = collections.namedtuple(
        "_Answer", ("allowed", "message", "stopped"), defaults=("", False)
    )


class HookAnswer(_Answer):
    """Whether one tool call may start, and what the agent is told if not.

    - `allowed`: True when the call may go on to the host's own permission flow.
    - `message`: why the call is refused, for the agent to read; empty when allowed.
    - `stopped`: the refusal is the person's stop: the agent should end its turn, not
      retry.

    A small immutable value like the other answers of `tether.stop`; a named tuple
    rather than an attrs class because it is built on the per-call hook path, where
    importing attrs alone costs several times a bare interpreter's start, and made by
    `collections.namedtuple` (typed as a `typing.NamedTuple` for mypy) since importing
    `typing` costs that path about a tenth of its whole start.
    """

    __slots__ = ()


_ALLOWED = HookAnswer(allowed=True)


def judge_hook_event(
    raw: bytes, *, environ: Mapping[str, str] | None = None
) -> HookAnswer:
    """Judge one PreToolUse event (JSON bytes) in the agent's environment.

    With `TETHER_RUN` in `environ` the agent works in a tether run: while a stop
    stands for this account's runs (the reading is STOPPED), every call is refused
    with a message saying the person stopped the run and the agent should end its
    turn. Then the guard judges the call against the protected paths. Malformed input,
    an event of another kind, or a failure inside the judgment also refuse.

    Args:
        raw: the event as the host wrote it on the hook's standard input.
        environ: the agent's environment (default: this process's).
    """
    env = os.environ if environ is None else environ
    try:
        return _judge(raw, env)
    except Exception as exc:  # fail closed: a crashing hook must not let calls by
        return HookAnswer(
            allowed=False,
            message=f"tether guard failed, so the call is blocked: {exc!r}",
        )


def _judge(raw: bytes, env: Mapping[str, str]) -> HookAnswer:
    if len(raw) > MAX_EVENT_BYTES:
        return _refused("tether guard: the hook event is larger than 4 MiB; blocked")
    try:
        event = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return _refused(f"tether guard: the hook input is not JSON ({exc}); blocked")
    if not isinstance(event, dict):
        return _refused("tether guard: the hook input is not a JSON object; blocked")
    name = event.get("hook_event_name", "PreToolUse")
    if name != "PreToolUse":
        return _refused(
            f"tether guard: expected a PreToolUse event, got {name!r}; blocked"
        )
    tool_name = event.get("tool_name")
    tool_input = event.get("tool_input")
    cwd = event.get("cwd")
    if not isinstance(tool_name, str) or not tool_name:
        return _refused("tether guard: the event has no tool_name string; blocked")
    if not isinstance(tool_input, dict):
        return _refused("tether guard: the event has no tool_input object; blocked")
    if cwd is not None and not isinstance(cwd, str):
        return _refused("tether guard: the event's cwd is not a string; blocked")
    from ._protected import listing

    found = listing()  # read once: the stop's quick look and the guard use it
    run = env.get(TetherEnv.RUN)
    if run:
        stopped = _stop_message(run, env.get(TetherEnv.LANE) or None, found)
        if stopped is not None:
            return HookAnswer(allowed=False, message=stopped, stopped=True)
    return _guarded(tool_name, tool_input, cwd or os.getcwd(), found[0])


def _refused(message: str) -> HookAnswer:
    return HookAnswer(allowed=False, message=message)


def _stop_message(run: str, lane: str | None, found: Listing) -> str | None:
    """The message for an agent of `run` while a stop stands; None when none does.

    A run that took a stop says so with its halting mark (`halting_mark`); where no
    honoured place of `found` holds a stop file (`stop_may_stand`: a few `lstat`s)
    none stands; otherwise the stop is read as the run reads it (every place this
    account honours, every check), display-only: the hook makes no folder. Only
    STOPPED refuses here: a run that cannot read its stop (HOLD) holds by itself at
    its next step, and its agent's calls still pass the guard.
    """
    from .._channel import run_halting

    if not run_halting(run):
        from ._protected import stop_may_stand

        if not stop_may_stand(found=found):
            return None
        from ._reader import ReadOutcome
        from ._stop_store import StopStore

        try:
            reading = StopStore.from_setup(create=False).read()
        except Exception:  # a broken setup holds the run itself; see above
            return None
        if reading.outcome is not ReadOutcome.STOPPED:
            return None
    where = f"run {run}" + (f", lane {lane}" if lane else "")
    return (
        f"tether: the person stopped this run ({where}), so this tool call was not "
        "started. End your turn now: start no other tool call and do not retry; "
        "the work so far is kept, and the person takes the run up again when they "
        "choose."
    )


def _guarded(
    tool_name: str, tool_input: Mapping[str, object], cwd: str, protected: list[str]
) -> HookAnswer:
    # The judgment without its public verdict (`StopGuard`, attrs) and the paths as
    # text (no pathlib): see `tether.guard` and `_protected`.
    from ..guard import Judge

    reason = Judge(protected).refusal(tool_name, tool_input, cwd=cwd)
    if reason is None:
        return _ALLOWED
    return _refused(f"tether guard refused this {tool_name} call: {reason}")


def answer_hook_event(
    raw: bytes, *, environ: Mapping[str, str] | None = None
) -> HookAnswer:
    """Answer one hook event of a stage agent and record where its calls stand.

    PreToolUse is judged by `judge_hook_event`; PostToolUse and PostToolUseFailure
    (the call is over) are allowed. With `TETHER_CALLS` naming a file, one line is
    appended to it per event: `pre ID TOOL` for a call that may start, `deny ID` for a
    refused one, `post ID` for a call that ended, so the run can tell whether its
    agent is inside a tool call. A call that cannot be recorded is refused: the run
    would otherwise take a running call for none and might end the agent inside it.
    """
    env = os.environ if environ is None else environ
    calls = env.get(TetherEnv.CALLS)
    try:
        event = json.loads(raw.decode("utf-8")) if len(raw) <= MAX_EVENT_BYTES else None
    except (UnicodeDecodeError, json.JSONDecodeError):
        event = None
    name = event.get("hook_event_name") if isinstance(event, dict) else None
    ident = event.get("tool_use_id") if isinstance(event, dict) else None
    ident = ident if isinstance(ident, str) and ident else "-"
    if calls:  # a run's preset agent: the only hook that loads the channel to record
        from .._channel import record_call
    if name in _POST_EVENTS:
        if calls:
            # The call is over already; a lost line leaves the run's stage timeout.
            # (No contextlib.suppress: the per-call path imports nothing it can spare.)
            try:  # noqa: SIM105
                record_call(calls, "post", ident)
            except OSError:
                pass
        return _ALLOWED
    answer = judge_hook_event(raw, environ=env)
    if calls:
        tool = event.get("tool_name") if isinstance(event, dict) else None
        try:
            if answer.allowed:
                record_call(calls, "pre", ident, tool if isinstance(tool, str) else "-")
            else:
                record_call(calls, "deny", ident)
        except OSError as exc:
            if answer.allowed:
                return _refused(
                    f"tether could not record this call ({exc}), so it is blocked"
                )
    return answer
