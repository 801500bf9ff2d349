"""Which containment process trees get here, and what the wall around the stop covers.

Every process tree tether starts runs in its own PID, mount and (for a caller other than
root) user namespace when the kernel allows it: the `namespace` containment (see
`_supervisor.py`). Some systems refuse unprivileged namespaces (for example Ubuntu's
AppArmor restriction); there the `subreaper` containment is the fallback, with limits
written down in docs/tools-process.md. `containment()` probes once per process, by
starting one real contained tree, and says which is in force and why.

`TETHER_CONTAINMENT` forces the choice: `namespace` (refused with the reason where the
kernel does not allow it), `subreaper`, or `auto` (the default: namespace when it works).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal, final

import attrs

from .._env import TetherEnv
from ..errors import UsageError

__all__ = (
    "SUPERVISOR",
    "CommandOutcome",
    "Containment",
    "ContainmentKind",
    "containment",
    "containment_choice",
    "containment_now",
    "containment_shown",
    "probed",
    "supervisor_argv",
    "wall_paths",
)

SUPERVISOR = Path(__file__).with_name("_supervisor.py")
"""The supervisor program, run by path (`python -I -S`), one per tree."""
PROBE_BOUND = 10.0
"""Seconds the once-per-process probe may take before namespaces count as refused."""

ContainmentKind = Literal["namespace", "subreaper"]
"""`namespace`: a PID namespace per tree, the stop folders walled read-only.
`subreaper`: the fallback, a subreaping supervisor and an environment marker."""

_CHOICES = ("auto", "namespace", "subreaper")


@final
@attrs.frozen
class Containment:
    """The containment process trees get in this process, and why."""

    kind: ContainmentKind
    """`namespace` or `subreaper`."""
    reason: str
    """One line: why this kind is in force (and, for the fallback, what to do)."""

    @property
    def walls_the_stop(self) -> bool:
        """Whether the stop folders are read-only inside every tree."""
        return self.kind == "namespace"


@final
@attrs.frozen
class CommandOutcome:
    """How a contained command ended (`ToolContext.run_process()`, `run_command()`)."""

    output: str
    """Merged stdout and stderr, bounded (head and tail with a marker)."""
    returncode: int
    """Exit code; negative when a signal ended the command."""
    stopped: bool
    """A stop arrived before the command ended (SIGTERM was sent)."""
    timed_out: bool
    """The command ran past its timeout and was killed."""
    supervisor_lost: bool = False
    """The tree's supervisor was killed before it could report how the command ended."""
    containment: Containment | None = None
    """The containment the command ran in."""


_lock = threading.Lock()
_probed: dict[str, tuple[bool, str]] = {}


def _probe() -> tuple[bool, str]:
    """Start one contained tree; (True, "") if its command found the wall in place."""
    with _lock:
        if "result" in _probed:
            return _probed["result"]
        try:
            done = subprocess.run(
                [sys.executable, "-I", "-S", str(SUPERVISOR), "probe"],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=PROBE_BOUND,
                check=False,
            )
            lines = done.stderr.decode(errors="replace").splitlines()
            if done.returncode == 0 and "exit 0" in lines:
                result = (True, "")
            else:
                last = next(
                    (line for line in reversed(lines) if line.strip()),
                    f"exit status {done.returncode}",
                )
                kind, _, rest = last.partition(" ")
                if kind in ("refused", "error"):
                    result = (False, rest.partition(" ")[2] or rest)
                elif kind == "exit":
                    result = (False, f"the probe found the wall open (code {rest})")
                else:
                    result = (False, last)
        except (OSError, subprocess.SubprocessError) as exc:
            result = (False, f"the probe could not run: {exc}")
        _probed["result"] = result
        return result


def probed() -> bool:
    """Whether the probe has run in this process (`containment()` will not block)."""
    return "result" in _probed


def containment_choice() -> str:
    """Return what `TETHER_CONTAINMENT` asks for: `auto`, `namespace` or `subreaper`.

    Raises:
        UsageError: the variable names no containment.
    """
    choice = os.environ.get(TetherEnv.CONTAINMENT, "auto").strip().lower() or "auto"
    if choice not in _CHOICES:
        raise UsageError(
            f"{TetherEnv.CONTAINMENT}={choice!r} is not a containment; "
            f"use one of {', '.join(_CHOICES)}"
        )
    return choice


def containment_shown() -> tuple[str, str]:
    """Return (kind, reason) for a report: `refused` with the reason when
    `TETHER_CONTAINMENT` cannot be honoured (every process tree would fail to start)."""
    try:
        found = containment()
    except UsageError as exc:
        return "refused", str(exc)
    return found.kind, found.reason


async def containment_now() -> Containment:
    """`containment()` for async code: the once-per-process probe runs in a thread."""
    import anyio.to_thread

    from .._threads import builtin_threads

    if probed():
        return containment()
    return await anyio.to_thread.run_sync(containment, limiter=builtin_threads())


def containment() -> Containment:
    """Return the containment process trees get, probing the kernel once per process.

    Raises:
        UsageError: `TETHER_CONTAINMENT` names no containment, or asks for `namespace`
            where the kernel refuses it.
    """
    choice = containment_choice()
    if choice == "subreaper":
        return Containment(
            kind="subreaper",
            reason=f"{TetherEnv.CONTAINMENT}=subreaper asks for the fallback",
        )
    if not sys.platform.startswith("linux"):
        works, why = False, f"namespaces are a Linux feature (this is {sys.platform})"
    else:
        works, why = _probe()
    if works:
        return Containment(
            kind="namespace",
            reason="each tree has its own PID namespace; the stop folders are "
            "read-only inside it",
        )
    if choice == "namespace":
        raise UsageError(
            f"{TetherEnv.CONTAINMENT}=namespace, but the kernel refuses namespaces "
            f"here ({why}); allow unprivileged user namespaces or unset it"
        )
    return Containment(
        kind="subreaper",
        reason=f"the kernel refuses namespaces here ({why}); trees are held by a "
        "subreaper and a marker sweep, which a command can escape "
        "(see docs/tools-process.md); allow unprivileged user namespaces to close it",
    )


def _contains(outer: Path, inner: Path) -> bool:
    return inner == outer or outer in inner.parents


def _tether_roots() -> list[Path]:
    from .._config import paths

    found = paths()
    return [found.config_dir.absolute(), found.state_dir.absolute()]


def wall_paths(
    protect: Iterable[Path],
    *,
    workspace: Path,
    roots: Sequence[Path] | None = None,
) -> list[str]:
    """Return the paths to bind read-only inside a tree, from the stop's paths.

    A path that exists is walled as it is. One not made yet is walled through its
    nearest existing folder, so no command can make it, as long as that folder is one of
    tether's own (`roots`: the account's tether config and state folders, or below
    them); otherwise it is left out (nothing there to change yet). A path that holds the
    workspace is left out too (the command must write there).
    """
    mine = [r.absolute() for r in (_tether_roots() if roots is None else roots)]
    here = workspace.resolve()
    found: list[str] = []
    for path in protect:
        where = Path(os.path.abspath(path))
        while not where.exists() and any(
            _contains(root, where.parent) for root in mine
        ):
            where = where.parent
        try:
            where = where.resolve(strict=True)
        except OSError:
            continue
        if _contains(where, here):
            continue
        if str(where) not in found:
            found.append(str(where))
    # A folder walled makes walling what is below it needless (and is done first).
    found.sort(key=len)
    return [
        p
        for i, p in enumerate(found)
        if not any(_contains(Path(q), Path(p)) for q in found[:i])
    ]


def supervisor_argv(
    kind: ContainmentKind, walls: Sequence[str], executable: str, argv: Sequence[str]
) -> list[str]:
    """The command line of one tree's supervisor."""
    return [
        sys.executable,
        "-I",
        "-S",
        str(SUPERVISOR),
        kind,
        *walls,
        "--",
        executable,
        *argv,
    ]
