"""The agent channel: what a tether run and the stage agents it starts say to each other.

Three things pass between them, each spelled here once:

- the environment a run gives a stage agent (`stage_env`): `TETHER_AGENT`,
  `TETHER_RUN`, `TETHER_LANE`, `TETHER_ITEM` and, for a preset stage, `TETHER_CALLS`
  (the names themselves are `tether._env.TetherEnv`'s);
- the halting mark (`halting_mark`): a file the run makes in its lane folder once it
  took a stop; the agent's hook, which sees it read-only, then refuses every call;
- the call record: one line per hook event of a preset agent, appended by the hook
  (`record_call`) and read back by the run (`tally_calls`), so the run knows whether
  its agent is inside a tool call (spec 03, "The stop inside an agent").

Boundary: this module makes no file but the record's lines and reads no file but the
mark's `stat`; reading the record safely (S16: by descriptor, beneath the lane, bounded)
is the run's business (`tether.runs._presets.read_calls`), which hands the text here.
Stdlib only, and `typing` only for type checkers: the hook imports it before every
tool call of an agent.
"""

from __future__ import annotations

import os

from ._dirs import state_dir
from ._env import TetherEnv

TYPE_CHECKING = False  # `typing` is not imported at run time: see the docstring
if TYPE_CHECKING:
    from typing import Final, Literal

    CallEvent = Literal["pre", "deny", "post"]
    """A call record line's kind: a call let start, a call refused, a call ended."""

__all__ = (
    "HALTING_MARK",
    "halting_mark",
    "record_call",
    "run_halting",
    "stage_env",
    "tally_calls",
)

HALTING_MARK: Final = ".halting"
"""The halting mark's name in the run's lane folder."""


def stage_env(
    *, run: str, lane: str, item: str, calls: str | None = None
) -> dict[str, str]:
    """The variables a run sets for a stage agent.

    The agent marker, its run, lane and item, and the file its hook records calls in
    (`calls`, a preset stage only).
    """
    env = {
        TetherEnv.AGENT: "1",
        TetherEnv.RUN: run,
        TetherEnv.LANE: lane,
        TetherEnv.ITEM: item,
    }
    if calls is not None:
        env[TetherEnv.CALLS] = calls
    return env


def halting_mark(run: str) -> str:
    """The file a run makes (outside the wall) once it took a stop.

    A tree sees it read-only, so its hook refuses every call even where it cannot judge
    the stop itself (a root caller's tree sees root's files as nobody's, and reads
    HOLD).
    """
    return os.path.join(state_dir(), "lanes", run, HALTING_MARK)


def run_halting(run: str) -> bool:
    """Whether `run` made its halting mark.

    A run id that names no folder of its own (a `/` in it, a leading dot) has none.
    """
    if not run or "/" in run or run.startswith("."):
        return False
    return os.path.exists(halting_mark(run))


def record_call(path: str, event: CallEvent, call: str, tool: str = "-") -> None:
    """Append one line to the call record at `path`.

    The line is `pre CALL TOOL`, `deny CALL` or `post CALL` (`call` is the host's
    tool-use id, `-` when it gave none), written with one `write` and O_APPEND, so
    concurrent hooks interleave whole lines; a link at `path` is not followed.

    Raises:
        OSError: the line could not be written.
    """
    line = f"pre {call} {tool}" if event == "pre" else f"{event} {call}"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, (line.replace("\n", " ") + "\n").encode("utf-8", "replace"))
    finally:
        os.close(fd)


def tally_calls(text: str) -> tuple[int, int, frozenset[str]]:
    """Read a call record's text: (calls let start, calls refused, ids in flight).

    A call is in flight while it has more `pre` lines than `post` lines; a `post`
    without its `pre` counts for nothing, and a line of another kind is skipped.
    """
    started = denied = 0
    open_calls: dict[str, int] = {}
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        call = rest.split(" ", 1)[0]
        if kind == "pre":
            started += 1
            open_calls[call] = open_calls.get(call, 0) + 1
        elif kind == "post" and open_calls.get(call):
            open_calls[call] -= 1
        elif kind == "deny":
            denied += 1
    return started, denied, frozenset(c for c, n in open_calls.items() if n > 0)
