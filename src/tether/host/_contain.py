"""Which containment process trees get here, and what the wall (S15) lets a tree reach.

Every process tree tether starts runs in its own PID, mount and user namespace when the
kernel allows it: the `namespace` containment (see `_supervisor.py`). Inside, the whole
file system is read-only but the tree's writable paths (its workspace, paths a tool or
stage declares) and a private temporary directory; the stop folders and tether's own
folders stay read-only even below a writable path; the session's sockets are masked.
This module decides, in the host, what each tree gets: the writable paths, the walled
paths, the masks, the temporary directory and the environment (`tree_env()`: tether's
secrets and the session's escape variables are withheld). The supervisor only carries
it out.

Some systems refuse unprivileged namespaces (for example Ubuntu's AppArmor
restriction); there the `subreaper` containment is the fallback, with limits written
down in docs/tools-process.md: of the wall only the environment scrub holds.
`containment()` probes once per process, by starting one real contained tree, and says
which is in force and why.

`TETHER_CONTAINMENT` forces the choice: `namespace` (refused with the reason where the
kernel does not allow it), `subreaper`, or `auto` (the default: namespace when it works).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Literal, final

import attrs

from .._env import TetherEnv
from ..errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Mapping, Sequence

__all__ = (
    "SUPERVISOR",
    "CommandOutcome",
    "Containment",
    "ContainmentKind",
    "Network",
    "containment",
    "containment_choice",
    "containment_now",
    "probed",
    "session_masks",
    "supervisor_argv",
    "tether_walls",
    "tree_env",
    "tree_tmp",
    "wall_options",
    "wall_paths",
)

SUPERVISOR = Path(__file__).with_name("_supervisor_start.py")
"""The supervisor program, run by path (`python -I -S`), one per tree: it starts
`_supervisor.py` from its cached bytecode."""
PROBE_BOUND = 10.0
"""Seconds the once-per-process probe may take before namespaces count as refused."""

ContainmentKind = Literal["namespace", "subreaper"]
"""`namespace`: a PID namespace per tree, the stop folders walled read-only.
`subreaper`: the fallback, a subreaping supervisor and an environment marker."""

Network = Literal["host", "none"]
"""`host`: the machine's network (the default: agents need their model endpoint).
`none`: a network namespace of the tree's own with loopback only (`namespace` only)."""

_CHOICES = ("auto", "namespace", "subreaper")

WITHHELD = (
    TetherEnv.MODEL_KEY,
    TetherEnv.STORE,
    TetherEnv.STORE_URL,
    "OPENAI_API_KEY",
)
"""tether's own secrets (S15): its model keys and the store URLs (which carry the
store's password). Not passed to trees unless a tool or stage names them
(`pass_env`)."""
SESSION_VARIABLES = (
    "TMUX",
    "TMUX_PANE",
    "STY",
    "SSH_AUTH_SOCK",
    "SSH_AGENT_PID",
    "GPG_AGENT_INFO",
    "DBUS_SESSION_BUS_ADDRESS",
    "XDG_RUNTIME_DIR",
    "WAYLAND_DISPLAY",
    "DISPLAY",
    "XAUTHORITY",
    "KITTY_LISTEN_ON",
    "WEZTERM_UNIX_SOCKET",
    "ZELLIJ",
    "ZELLIJ_SESSION_NAME",
)
"""Variables that lead to a daemon of the person's session, which would start
processes outside the tree (S15: no way out). Never passed to trees."""
_SHARED_DIRS = frozenset({"/", "/tmp", "/var/tmp", "/run", "/var/run", "/dev/shm"})


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
        scratch = Path(tempfile.mkdtemp(prefix="tether-probe-"))
        try:
            # The probe's command writes in a writable path (idmapped for a root
            # caller) and must find everything else read-only.
            done = subprocess.run(
                [
                    sys.executable,
                    "-I",
                    "-S",
                    str(SUPERVISOR),
                    "probe",
                    f"--rw={scratch}",
                ],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=PROBE_BOUND,
                check=False,
                cwd=scratch,
            )
            lines = done.stderr.decode(errors="replace").splitlines()
            written = scratch / "probe-written"
            if done.returncode == 0 and "exit 0" in lines:
                if written.exists() and written.stat().st_uid == os.geteuid():
                    result = (True, "")
                else:
                    result = (False, "the probe's file did not belong to the caller")
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
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
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
            reason="each tree has its own PID namespace; inside it everything but "
            "the workspace and a private temporary directory is read-only, the "
            "session's sockets are masked, and a root caller's tree runs as an "
            "unprivileged uid",
        )
    if choice == "namespace":
        raise UsageError(
            f"{TetherEnv.CONTAINMENT}=namespace, but the kernel refuses namespaces "
            f"here ({why}); allow unprivileged user namespaces or unset it"
        )
    return Containment(
        kind="subreaper",
        reason=f"the kernel refuses namespaces here ({why}); trees are held by a "
        "subreaper and a marker sweep, which a command can escape, and no wall "
        "holds: a tree can write whatever the account can and reach the session's "
        "sockets; only tether's secrets are kept from its environment (see "
        "docs/tools-process.md); allow unprivileged user namespaces to close it",
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


def tether_walls(
    writable: Sequence[Path], *, roots: Sequence[Path] | None = None
) -> list[Path]:
    """Return tether's own folders that lie below a writable path, made first.

    Outside the writable paths every folder is read-only inside a tree already,
    whether it exists or not (its nearest existing folder is read-only too). Below one,
    a folder not made yet could be made by the tree: so it is made here (owner only)
    and walled read-only (S15).
    """
    mine = [r.absolute() for r in (_tether_roots() if roots is None else roots)]
    opened = [Path(os.path.abspath(p)) for p in writable]
    found: list[Path] = []
    for root in mine:
        if any(_contains(w, root) for w in opened):
            root.mkdir(mode=0o700, parents=True, exist_ok=True)
            found.append(root)
    return found


TREE_SHM_TMP = Path("/dev/shm/tmp")
"""A tree's temporary directory when `/tmp` cannot be replaced: a folder of the
tree's private `/dev/shm` tmpfs (nothing is made outside, nothing can be left)."""


def tree_tmp(writable: Sequence[Path]) -> Path | None:
    """Where a tree's private temporary directory goes, if it needs one.

    None for a tmpfs over `/tmp` (no writable path lies below it), else
    `TREE_SHM_TMP`.
    """
    tmp = Path("/tmp")
    if tmp.is_dir() and not any(_contains(tmp, Path(p).resolve()) for p in writable):
        return None
    return TREE_SHM_TMP


def _socket_dir(path: str) -> str | None:
    """The folder to mask for a socket path: its own folder unless that is shared."""
    if not path.startswith("/"):
        return None
    parent = os.path.dirname(os.path.normpath(path))
    home = os.path.expanduser("~")
    return path if parent in _SHARED_DIRS or parent == home else parent


def _secret_dirs() -> list[str]:
    """The account's secret folders, made now (0700) so a tree never sees them appear.

    `tether board`'s token and the MCP servers' OAuth tokens (`tether mcp login`).
    """
    from .._config import paths

    found = []
    for folder in (paths().board_dir, paths().mcp_auth_dir):
        with contextlib.suppress(FileNotFoundError, FileExistsError):
            folder.mkdir(mode=0o700)
        found.append(str(folder))
    return found


def session_masks(
    envs: Iterable[Mapping[str, str]], *, uid: int, writable: Sequence[Path]
) -> list[str]:
    """Return the existing paths of the session's sockets to mask inside a tree.

    The user's runtime folder (`/run/user/<uid>`, `$XDG_RUNTIME_DIR`: D-Bus, the
    systemd user manager, Wayland, keyrings), tmux's socket folder, and the folders of
    the sockets `TMUX`, `SSH_AUTH_SOCK` and the D-Bus session address name; and
    `tether board`'s token folder and the MCP servers' OAuth tokens. A path holding a writable path or below one is
    left open.
    """
    found = [f"/run/user/{uid}", *_secret_dirs()]
    for env in envs:
        found.append(env.get("XDG_RUNTIME_DIR", ""))
        tmux_tmp = env.get("TMUX_TMPDIR") or "/tmp"
        found.append(os.path.join(tmux_tmp, f"tmux-{uid}"))
        for name in ("TMUX", "SSH_AUTH_SOCK"):
            sock = env.get(name, "").split(",", 1)[0]
            found.append(_socket_dir(sock) or "")
        for part in env.get("DBUS_SESSION_BUS_ADDRESS", "").split(";"):
            for item in part.partition(":")[2].split(","):
                key, _, value = item.partition("=")
                if key == "path":
                    found.append(_socket_dir(value) or "")
    opened = [Path(os.path.abspath(p)) for p in writable]
    masks: list[str] = []
    for raw in found:
        if not raw or raw in masks or not os.path.lexists(raw):
            continue
        where = Path(os.path.abspath(raw))
        if any(_contains(where, w) or _contains(w, where) for w in opened):
            continue
        masks.append(str(where))
    return masks


def tree_env(env: Mapping[str, str], pass_env: Collection[str] = ()) -> dict[str, str]:
    """Return `env` without tether's secrets and the session's escape variables, S15.

    A secret named in `pass_env` is kept; an escape variable is dropped whatever is
    named.
    """
    dropped = {name for name in WITHHELD if name not in pass_env}
    dropped.update(SESSION_VARIABLES)
    return {k: v for k, v in env.items() if k not in dropped}


def wall_options(
    *,
    writable: Sequence[Path],
    see: Sequence[str] = (),
    masks: Sequence[str] = (),
    tmp: Path | None = None,
    network: Network = "host",
) -> list[str]:
    """The supervisor's wall options for a `namespace` tree (`tmp` None: over `/tmp`).

    `see` lists paths the tree must reach (its command, `PATH`, `HOME`): for a root
    caller, a folder on their way that only root may traverse is shown read-only.
    """
    options = [f"--rw={Path(p).resolve()}" for p in writable]
    options.extend(f"--see={p}" for p in see if p.startswith("/"))
    options.extend(f"--mask={m}" for m in masks)
    options.append(f"--tmp={tmp if tmp is not None else '/tmp'}")
    if network != "host":
        options.append(f"--net={network}")
    return options


def supervisor_argv(
    kind: ContainmentKind,
    walls: Sequence[str],
    executable: str,
    argv: Sequence[str],
    *,
    options: Sequence[str] = (),
) -> list[str]:
    """The command line of one tree's supervisor (`options`: `wall_options()`)."""
    return [
        sys.executable,
        "-I",
        "-S",
        str(SUPERVISOR),
        kind,
        *walls,
        *options,
        "--",
        executable,
        *argv,
    ]
