"""The guard: refuses an agent's tool call that would set, lift or tamper with a stop.

The job: judge one tool call (a tool name and its input) against the protected paths
(the stop directories and the setup record) and answer a `GuardVerdict`: allowed or
refused, with a reason that names the path or the command. The judgment itself is
`_judge.Judge`, which the per-call hook runs without this module (and without attrs);
this module gives it the public API: `GuardVerdict`, `StopGuard`, `guard_tool_call`.

Boundary: the guard does not find the protected paths (`tether.stop` does), runs nothing,
and holds against an agent acting by mistake. Against an agent acting on purpose only an
operating-system account boundary binds (spec 02, "The guard").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, final

import attrs

from ..errors import GuardRefused
from ._judge import TIME_LIMIT, Judge

__all__ = ("GuardVerdict", "StopGuard", "guard_tool_call")


@attrs.frozen
class GuardVerdict:
    """The guard's answer for one tool call."""

    allowed: bool
    """True when the call may go on to the permission check."""
    reason: str = ""
    """Why the call was refused, naming the path or command; empty when allowed."""

    def raise_if_refused(self) -> None:
        """Raise `GuardRefused` (code `GUARD_REFUSED`) with the reason when refused.

        Raises:
            GuardRefused: the call was refused.
        """
        if not self.allowed:
            raise GuardRefused(self.reason)


_ALLOWED = GuardVerdict(allowed=True)


def guard_tool_call(
    tool_name: str,
    tool_input: Mapping[str, Any],
    *,
    cwd: Path,
    protected: Sequence[Path],
    mutating: bool | None = None,
    environ: Mapping[str, str] | None = None,
) -> GuardVerdict:
    """Judge one tool call against the protected paths; refuse what would touch a stop.

    Args:
        tool_name: the tool's name (`Bash`, `Write`, `Edit`, `mcp__srv__tool`, ...).
        tool_input: the call's input, as the tool receives it.
        cwd: the directory relative paths in the call start from.
        protected: the stop directories and the setup record; a path protects itself
            and everything under it.
        mutating: whether the tool changes files. None: known by name for the file,
            shell and read-only tools; any other tool is judged by every string in its
            input. Shell tools are always parsed.
        environ: the environment the command would see (default: this process's).

    Returns:
        The verdict. Any error inside the guard refuses: the guard fails closed.
    """
    guard = StopGuard(protected, environ=environ)
    return guard.judge(tool_name, tool_input, cwd=cwd, mutating=mutating)


@final
class StopGuard:
    """The guard over protected paths resolved once, for every call of a runtime.

    The protected paths, their spellings and identities, and the environment are
    pinned when the guard is built (a runtime pins its stop folder and setup the same
    way), so a call pays only for what it can touch: a read-only call that names no
    command costs a dictionary look-up.
    """

    def __init__(
        self,
        protected: Sequence[Path | str],
        *,
        environ: Mapping[str, str] | None = None,
        time_limit: float = TIME_LIMIT,
    ) -> None:
        """Resolve `protected` (relative paths from this process's directory).

        `time_limit`: seconds one command may take to judge; past it, it is refused.
        """
        self._judge = Judge(protected, environ=environ, time_limit=time_limit)

    def lets_reads_by(self, tool_name: str) -> bool:
        """Whether every read-only call of this tool passes, whatever its input.

        A tool that is not a shell reads; a read of a stop is allowed (spec 02).
        """
        return self._judge.lets_reads_by(tool_name)

    def judge(
        self,
        tool_name: str,
        tool_input: Mapping[str, Any],
        *,
        cwd: Path | str,
        mutating: bool | None = None,
    ) -> GuardVerdict:
        """Judge one call (see `guard_tool_call`); never raises, refuses in doubt."""
        reason = self._judge.refusal(tool_name, tool_input, cwd=cwd, mutating=mutating)
        return (
            _ALLOWED if reason is None else GuardVerdict(allowed=False, reason=reason)
        )
