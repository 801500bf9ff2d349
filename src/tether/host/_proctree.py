"""Process trees: run a command so that every process it starts is reclaimed (S13).

A `ProcessTree` starts one supervisor program per command (`_supervisor.py`, run by
path) in the containment `containment()` chose for this process:

- `namespace`: the tree lives in its own PID namespace, where every process it starts
  stays, whatever it does (`setsid`, double forks, `env -i`, killing its parent); when
  the namespace's first process dies the kernel kills the rest. Inside it is walled
  (S15): everything is read-only but the workspace, the declared `writable` paths and a
  private temporary directory (`TMPDIR`); the stop folders
  (`tether.stop.protected_paths()`) and tether's own folders stay read-only even below
  a writable path; the session's sockets are masked; the mounts are locked; a root
  caller's tree runs as an unprivileged uid. `network="none"` gives it loopback only.
- `subreaper`: the fallback. The supervisor is a child subreaper, and every process
  carries the tree's marker (`TETHER_TREE=<token>`), so the host can sweep what is left
  if the supervisor is killed. A process that both clears its environment and outlives
  a killed supervisor escapes, and no wall holds: the limits are in
  docs/tools-process.md.

Under both, the environment is scrubbed (`tree_env()`): tether's secrets are withheld
unless the tool or stage names them (`pass_env`), and the session's escape variables
(`TMUX`, `SSH_AUTH_SOCK`, ...) are never passed.

The supervisor obeys one-byte orders (`T` terminate, `K` or end of file kill) and
reports `pid`, `error`, `refused`, `left` and `exit` lines; see its docstring.

`run_command()` runs a command through a tree with the PROCESS stop policy of spec 01:
a stop sends SIGTERM and the output is collected until every process of the tree has
exited, and the git locks a stopped command that did not exit 0 left are named; what a
command left running at its exit gets SIGTERM, then SIGKILL, and the git locks that
left are named; a cancellation of the caller (the grace window closed) kills and reaps
the whole tree inside a bounded shield, streams what it printed up to the kill and the
git locks the kill left (`stale_git_locks()`), then propagates. It is the one entry
point for whatever tether runs as a process tree: the Bash and GenerateImages tools,
custom tools through `ToolContext.run_process()`, and the command-line agents of
unattended runs.
"""

from __future__ import annotations

import codecs
import contextlib
import math
import os
import shlex
import shutil
import signal
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING, Literal, final

import anyio
import anyio.abc
import anyio.lowlevel
import anyio.to_thread
import attrs
import psutil
from anyio.streams.buffered import BufferedByteReceiveStream

from .._bounded_output import BoundedOutput
from .._threads import builtin_threads
from ..errors import UsageError
from ._contain import (
    CommandOutcome,
    Containment,
    Network,
    containment_now,
    session_masks,
    supervisor_argv,
    tether_walls,
    tree_env,
    tree_tmp,
    wall_options,
    wall_paths,
)
from ._spawn import start_process
from ._sweep import TREE_MARKER, marked_pids, sweep_marked

if TYPE_CHECKING:
    from collections.abc import (
        AsyncGenerator,
        Callable,
        Collection,
        Mapping,
        Sequence,
    )

__all__ = (
    "TREE_MARKER",
    "CommandOutcome",
    "ProcessTree",
    "marked_pids",
    "namespace_wall",
    "resolve_command",
    "run_command",
    "stale_git_locks",
    "sweep_marked",
)

KILL_BOUND = 5.0
"""Seconds a kill may take (supervisor kill, then the host's own fallback) in a shield."""
START_BOUND = 10.0
"""Seconds a supervisor may take to start the command (shielded: a tree half started
is never left behind by a cancellation)."""
DRAIN_BOUND = 1.0
"""Seconds to read the rest of the output once the tree is gone."""
_SUPERVISOR_BOUND = 2.0
"""Seconds the supervisor gets to kill and reap before the host kills from outside."""
PROGRESS_LIMIT = 1_000_000
"""Bytes of output streamed as progress per command; past it, one marker line and the
result's head and tail only (a flood must not grow anyone's memory)."""


def resolve_command(argv0: str, env: Mapping[str, str], cwd: Path) -> str:
    """Return the executable `argv0` names, searched on the `PATH` of `env`.

    A few stats, made in the loop thread: a thread could be one users' code holds.
    """
    if not cwd.is_dir():
        raise NotADirectoryError(20, f"working directory is not a directory: {cwd}")
    if os.sep in argv0:
        path = Path(argv0)
        path = path if path.is_absolute() else cwd / path
        if not path.exists():
            raise FileNotFoundError(2, f"no such file: {argv0}")
        return str(path)
    found = shutil.which(argv0, path=env.get("PATH", os.defpath))
    if found is None:
        raise FileNotFoundError(2, f"command not found: {argv0}")
    return found


def _stop_paths() -> list[Path]:
    from ..stop import protected_paths

    return protected_paths()


def namespace_wall(
    executable: str,
    *,
    env: Mapping[str, str],
    workspace: Path,
    writable: Sequence[Path] = (),
    protect: Sequence[Path] | None = None,
    network: Network = "host",
) -> tuple[list[str], list[str], str]:
    """The wall of a `namespace` tree (S15).

    The wall is its walled paths, the supervisor's wall options and the tree's `TMPDIR`.

    `workspace` and the `writable` paths (made here if missing) can be written;
    `protect` (default: the stop's own paths) and tether's own folders stay read-only
    even below them.
    """
    opened = [workspace]
    for path in writable:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        opened.append(path)
    paths = _stop_paths() if protect is None else list(protect)
    paths.extend(tether_walls(opened))
    walls = wall_paths(paths, workspace=workspace)
    tmp = tree_tmp(opened)
    masks = session_masks([os.environ, env], uid=os.geteuid(), writable=opened)
    see = [executable, *env.get("PATH", "").split(os.pathsep), env.get("HOME", "")]
    options = wall_options(
        writable=opened, see=see, masks=masks, tmp=tmp, network=network
    )
    return walls, options, str(tmp or "/tmp")


@final
@attrs.define(eq=False)
class ProcessTree:
    """A command and every process it starts, kept in one containment.

    Use it as an async context manager: leaving the block kills and reaps the whole tree
    (inside a bounded shield), whatever happened inside.

    ```python
    async with ProcessTree() as tree:
        await tree.start(["bash", "-c", "make"], cwd=workspace, env=env)
        async for chunk in tree.output():
            ...
        code = await tree.wait()
    ```
    """

    pid: int | None = None
    """The command's pid as the command sees it (`$$`; its process group too)."""
    returncode: int | None = None
    """The command's exit code once the tree is gone; negative for a signal."""
    containment: Containment | None = None
    """The containment the tree runs in, once started."""
    supervisor_lost: bool = False
    """The supervisor died without reporting (killed from outside, or by the command
    under the fallback): the tree was swept, but its end is not the command's."""
    leftovers: int = 0
    """Processes of the tree still running when the command exited by itself: they got
    SIGTERM and a short window to end (`LEFTOVER_GRACE` of `_supervisor.py`)."""
    leftovers_killed: int = 0
    """Of `leftovers`, the ones still running when that window closed: SIGKILLed."""
    _process: anyio.abc.Process | None = None
    _status: BufferedByteReceiveStream | None = None
    _reported: int | None = None
    """The exit code the supervisor reported; `returncode` once it is reaped too."""
    _terminated: bool = False
    token: str = attrs.field(factory=lambda: os.urandom(16).hex())
    """Marks every process of the tree: `TETHER_TREE=<token>` is in their environment."""

    @property
    def supervisor_pid(self) -> int | None:
        """The supervisor's pid, the root of the tree, once started."""
        return self._process.pid if self._process is not None else None

    async def start(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        protect: Sequence[Path] | None = None,
        workspace: Path | None = None,
        writable: Sequence[Path] = (),
        pass_env: Collection[str] = (),
        network: Network = "host",
    ) -> None:
        """Start `argv` in `cwd` with `env` (scrubbed) under a new supervisor.

        In a `namespace` tree (S15) only `workspace` (default: `cwd`), the `writable`
        paths (made if missing) and a private temporary directory (`TMPDIR`) can be
        written; `protect` lists the paths walled read-only even below those (default:
        the stop's own, `tether.stop.protected_paths()`; tether's own folders are
        added). `env` goes in without tether's secrets, unless named in `pass_env`,
        and without the session's escape variables (`tree_env()`). `network="none"`
        gives the tree loopback only. Starting is shielded from cancellation
        (bounded): a tree is either not started or fully known.

        Raises:
            OSError: the command could not be started (not found, not executable, bad
                directory, containment refused); the message says why.
        """
        if self._process is not None:
            raise RuntimeError("a ProcessTree starts one command")
        if not argv:
            raise ValueError("argv must name a command")
        executable = resolve_command(argv[0], env, cwd)
        try:
            self.containment = chosen = await containment_now()
        except UsageError as exc:
            raise OSError(f"cannot contain {argv[0]}: {exc}") from None
        walls: list[str] = []
        options: list[str] = []
        tree = {**tree_env(env, pass_env), TREE_MARKER: self.token}
        if chosen.kind == "namespace":
            walls, options, tree["TMPDIR"] = namespace_wall(
                executable,
                env=env,
                workspace=workspace if workspace is not None else cwd,
                writable=writable,
                protect=protect,
                network=network,
            )
        elif network != "host":
            raise OSError(
                f"cannot contain {argv[0]}: network {network!r} needs the namespace "
                f"containment ({chosen.reason})"
            )
        command = supervisor_argv(chosen.kind, walls, executable, argv, options=options)
        kind, rest = "eof", "no report in time"
        with anyio.CancelScope(shield=True), anyio.move_on_after(START_BOUND):
            self._process = start_process(
                command, cwd=cwd, env=tree, start_new_session=True
            )
            assert self._process.stderr is not None
            self._status = BufferedByteReceiveStream(self._process.stderr)
            kind, rest = await self._next_status()
        if kind == "pid":
            self.pid = int(rest)
            # A cancellation that came while starting is delivered now, with the tree
            # fully known, so the caller's clean-up reclaims it.
            await anyio.lowlevel.checkpoint()
            return
        self._reported = 127
        if kind not in ("error", "refused") and self._process is not None:
            # No report in time, or the supervisor died starting: kill from here.
            await self._kill_from_host()
        await self.aclose()
        self.returncode = self._reported
        if kind == "error":
            number, _, text = rest.partition(" ")
            raise OSError(int(number), f"cannot start {argv[0]}: {text}")
        if kind == "refused":
            raise OSError(f"cannot contain {argv[0]}: {rest.partition(' ')[2] or rest}")
        raise OSError(f"cannot start {argv[0]}: the supervisor failed ({rest})")

    async def _next_status(self) -> tuple[str, str]:
        assert self._status is not None
        try:
            line = await self._status.receive_until(b"\n", 65536)
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.DelimiterNotFound):
            return "eof", "no report"
        kind, _, rest = line.decode("ascii", "replace").partition(" ")
        return kind, rest

    async def output(self) -> AsyncGenerator[bytes, None]:
        """Yield the command's merged stdout and stderr until every writer is gone."""
        if self._process is None or self._process.stdout is None:
            return
        while True:
            try:
                chunk = await self._process.stdout.receive(65536)
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                return
            yield chunk

    async def wait(self) -> int:
        """Wait until the command exited and the rest of its tree is gone.

        Returns:
            The command's exit code; negative when a signal ended it.
        """
        if self.returncode is not None:
            return self.returncode
        while self._reported is None:
            kind, rest = await self._next_status()
            if kind == "exit":
                self._reported = int(rest)
            elif kind == "left":
                found, _, killed = rest.partition(" ")
                self.leftovers, self.leftovers_killed = int(found), int(killed)
            elif kind == "eof":
                # The supervisor died without reporting. Under the namespace the kernel
                # kills the tree with it; under the fallback its orphans went to init.
                # Either way, wait until no process carrying the marker is left.
                self.supervisor_lost = True
                self._reported = -signal.SIGKILL
                await anyio.to_thread.run_sync(self._sweep, limiter=builtin_threads())
        await self._finish()
        self.returncode = self._reported
        return self._reported

    async def _finish(self) -> None:
        assert self._process is not None
        await self._process.wait()
        if self._process.stdin is not None:
            await self._process.stdin.aclose()

    async def _order(self, order: bytes) -> bool:
        if self._process is None or self._reported is not None:
            return False
        assert self._process.stdin is not None
        try:
            await self._process.stdin.send(order)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            return False
        return True

    async def terminate(self) -> None:
        """Send SIGTERM to every process of the tree."""
        self._terminated = True
        await self._order(b"T")

    @property
    def terminated(self) -> bool:
        """Whether `terminate()` was called."""
        return self._terminated

    async def kill(self) -> int | None:
        """SIGKILL every process of the tree and reap them all.

        Returns:
            The command's exit code, or None if it was never started.
        """
        if self._process is None:
            return None
        if self.returncode is not None:
            return self.returncode
        await self._order(b"K")
        with anyio.move_on_after(_SUPERVISOR_BOUND):
            return await self.wait()
        # The supervisor did not answer in time: kill the tree from here.
        await self._kill_from_host()
        return await self.wait()

    def _sweep(self) -> None:
        """SIGKILL every process carrying this tree's marker.

        Under the fallback, also the command's process group while it still holds one of
        them.
        """
        kind = self.containment.kind if self.containment is not None else None
        if kind == "subreaper" and self.pid is not None:
            marked = marked_pids(self.token)
            if any(_pgid(pid) == self.pid for pid in marked):
                # The group still holds a process of this tree: its id is not recycled.
                with contextlib.suppress(OSError):
                    os.killpg(self.pid, signal.SIGKILL)
        sweep_marked(self.token)

    async def _kill_from_host(self) -> None:
        """SIGKILL the tree from the host, then the supervisor.

        The tree from a thread (the sweep may wait), the supervisor from the event
        loop's thread (the one that reaps it).
        """
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self._kill_tree, limiter=builtin_threads())
            assert self._process is not None
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()

    def _kill_tree(self) -> None:
        for pid in self.alive_pids():
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).kill()
        self._sweep()

    def alive_pids(self) -> list[int]:
        """Return the host pids of the supervisor and its descendants, zombies left out.

        Under the namespace every process of the tree is a descendant of the supervisor
        (the namespace's first process reaps its orphans).
        """
        root = self.supervisor_pid
        if root is None or self.returncode is not None:
            return []
        try:
            supervisor = psutil.Process(root)
            procs = [supervisor, *supervisor.children(recursive=True)]
        except psutil.Error:
            return []
        alive: list[int] = []
        for proc in procs:
            try:
                if proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(proc.pid)
            except psutil.Error:
                pass
        return alive

    async def aclose(self) -> None:
        """Kill and reap the whole tree and close its pipes, inside a bounded shield."""
        with anyio.move_on_after(KILL_BOUND, shield=True):
            await self.kill()
            if self._process is not None:
                await self._process.aclose()

    async def __aenter__(self) -> ProcessTree:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _progress_pump(
    on_output: Callable[[str], None], limit: int
) -> Callable[[bytes | None], None]:
    """Decode chunks (UTF-8, replacement characters) and stream at most `limit` bytes.

    `None` flushes the decoder at the end.
    """
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    sent = 0

    def take(chunk: bytes | None) -> None:
        nonlocal sent
        if sent > limit:
            return
        if chunk is None:
            text = decoder.decode(b"", final=True)
        else:
            if sent + len(chunk) > limit:
                text = decoder.decode(chunk[: limit - sent], final=True)
                text += f"\n[... streaming paused after {limit} bytes ...]\n"
                sent = limit + 1
                on_output(text)
                return
            sent += len(chunk)
            text = decoder.decode(chunk)
        if text:
            on_output(text)

    return take


async def _kill_and_drain(
    tree: ProcessTree, kept: BoundedOutput, stream: Callable[[bytes | None], None]
) -> None:
    """Kill the tree and read what it wrote up to the kill (bounded in time)."""
    with anyio.move_on_after(KILL_BOUND):
        await tree.kill()
    with anyio.move_on_after(DRAIN_BOUND):
        async for chunk in tree.output():
            kept.add(chunk)
            stream(chunk)
    stream(None)


GIT_LOCKS = (
    "index.lock",
    "HEAD.lock",
    "ORIG_HEAD.lock",
    "config.lock",
    "packed-refs.lock",
    "shallow.lock",
    "gc.pid",
    "gc.log.lock",
    "objects/maintenance.lock",
)
"""Files in a git directory whose presence makes later git commands refuse to work
(`gc.pid` names the pid of a `git gc` that git then believes still runs; a detached
`git gc` dies on `gc.log.lock`; `git maintenance` skips its work while
`objects/maintenance.lock` exists)."""

EndedBy = Literal["kill", "stop", "leftovers"]
_ENDED_BY: dict[EndedBy, tuple[str, str]] = {
    "kill": ("the kill left", "killed"),
    "stop": ("the stop left", "stopped"),
    "leftovers": (
        "ending what the command left running (at its exit) left",
        "ended",
    ),
}
"""What `stale_git_locks()` says ended the command: the words before "git lock files",
and what happened to the tree `gc.pid` names a process of."""


def stale_git_locks(cwd: Path, *, since: float, by: EndedBy = "kill") -> str:
    """Say which of git's lock files a killed or stopped command left in `cwd`'s repository.

    Only the repository of `cwd` (its nearest `.git` directory; a `.git` file, a
    worktree's pointer, is not followed), only the files of `GIT_LOCKS` changed since
    `since` (wall-clock seconds, less a second of timestamp slack), by `lstat` alone.
    `by` names what ended the command (`kill` or `stop`), or `leftovers` when what the
    command left running was ended at its exit (a detached `git gc`): a stop leaves
    locks too, as git opens `index.lock` before it installs the handler that removes
    it on SIGTERM.
    Returns one bracketed line with the command that removes them, or "" when none is
    left. Nothing is removed: another git command may hold one.
    """
    git = _git_dir(cwd)
    if git is None:
        return ""
    found: list[str] = []
    for name in GIT_LOCKS:
        try:
            st = os.lstat(git / name)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_mtime >= since - 1.0:
            found.append(name)
    if not found:
        return ""
    paths = " ".join(shlex.quote(str(git / name)) for name in found)
    what, ended = _ENDED_BY[by]
    why = (
        f"; gc.pid names a process of the {ended} tree, so git would believe a gc still runs"
        if "gc.pid" in found
        else ""
    )
    return (
        f"\n[{what} git lock files in {git}: {', '.join(found)}{why}. Git "
        f"refuses to work while they exist; once no other git command runs there, "
        f"remove them with: rm -f {paths}]\n"
    )


def _git_dir(cwd: Path) -> Path | None:
    """The `.git` directory of the repository `cwd` is in, found by `lstat` alone."""
    for folder in (cwd, *cwd.parents):
        try:
            st = os.lstat(folder / ".git")
        except OSError:
            continue
        return folder / ".git" if stat.S_ISDIR(st.st_mode) else None
    return None


async def run_command(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    stop: anyio.Event,
    on_output: Callable[[str], None],
    timeout: float | None = None,
    limit: int = 30_000,
    progress_limit: int = PROGRESS_LIMIT,
    workspace: Path | None = None,
    writable: Sequence[Path] = (),
    pass_env: Collection[str] = (),
    network: Network = "host",
) -> CommandOutcome:
    """Run `argv` in a `ProcessTree` with the PROCESS stop policy (S13).

    Output is handed to `on_output` as it comes (decoded, at most `progress_limit`
    bytes) and kept bounded for the outcome (`limit` bytes: head and tail). When
    `stop` is set, the tree gets SIGTERM and the output is collected until every
    process of the tree has exited; if the command then did not exit 0, a line naming
    the git locks it left in `cwd`'s repository ends the output. When the command exits
    by itself, what it left running gets SIGTERM and a short window, then SIGKILL, and
    a line names the git locks that left (a detached `git gc` ended mid-way). When the caller is cancelled (the grace window
    closed), every process of the tree is killed and reaped inside a bounded shield,
    what it printed up to the kill goes to `on_output`, and so does a line naming the
    git locks the kill left in `cwd`'s repository; then the cancellation propagates. After `timeout` seconds the tree is killed. `workspace`, `writable`,
    `pass_env` and `network` shape the wall (S15), as in `ProcessTree.start()`.

    Raises:
        OSError: the command could not be started.
    """
    tree = ProcessTree()
    kept = BoundedOutput(limit)
    stream = _progress_pump(on_output, progress_limit)
    timed_out = False
    since = time.time()
    try:
        await tree.start(
            argv,
            cwd=cwd,
            env=env,
            workspace=workspace,
            writable=writable,
            pass_env=pass_env,
            network=network,
        )
        async with anyio.create_task_group() as tg:
            drained = anyio.Event()

            async def pump() -> None:
                async for chunk in tree.output():
                    kept.add(chunk)
                    stream(chunk)
                stream(None)
                drained.set()

            async def terminate_on_stop() -> None:
                await stop.wait()
                await tree.terminate()

            tg.start_soon(pump)
            tg.start_soon(terminate_on_stop)
            deadline = math.inf if timeout is None else timeout
            with anyio.move_on_after(deadline) as scope:
                code = await tree.wait()
            if scope.cancelled_caught:
                timed_out = True
                killed = await tree.kill()
                code = -signal.SIGKILL if killed is None else killed
            with anyio.move_on_after(DRAIN_BOUND):
                await drained.wait()
            tg.cancel_scope.cancel()
        by: EndedBy | None = None
        if timed_out:
            by = "kill"
        elif tree.terminated and code != 0:
            # A stopped command that did not exit 0 may have died in a window its own
            # clean-up does not cover (git between `open(index.lock)` and its handlers).
            by = "stop"
        elif tree.leftovers:
            # What it left running (a detached `git gc`) was ended at its exit.
            by = "leftovers"
        if by is not None:
            note = stale_git_locks(cwd, since=since, by=by)
            if note:
                kept.add(note.encode())
                on_output(note)
    except anyio.get_cancelled_exc_class():
        # The grace window closed (or the caller went away): kill the tree, then keep
        # what it printed up to the kill and say what locks of git the kill left.
        with anyio.CancelScope(shield=True):
            await _kill_and_drain(tree, kept, stream)
            note = stale_git_locks(cwd, since=since) if tree.pid is not None else ""
            if note:
                on_output(note)
        raise
    finally:
        # S13: settled never coexists with a live process, on every path out.
        await tree.aclose()
    return CommandOutcome(
        output=kept.text(),
        returncode=code,
        stopped=tree.terminated,
        timed_out=timed_out,
        supervisor_lost=tree.supervisor_lost,
        containment=tree.containment,
    )
