"""Process trees: run a command so that every process it starts can be found and reaped.

A `ProcessTree` starts a small supervising child (`python -I -S -c _SUPERVISOR`). On
Linux the supervisor makes itself a child subreaper (`prctl(PR_SET_CHILD_SUBREAPER)`
through ctypes on libc), so a descendant orphaned by `setsid`, a double fork or `nohup`
is re-parented to the supervisor, never to init: the whole tree stays below it. The
supervisor spawns the command in a process group of its own (stdin `/dev/null`, stdout
and stderr merged into one pipe the host reads), reaps whatever reaches it, and obeys
one-byte orders on its stdin:

- `T`: SIGTERM to the command's process group and to every descendant outside it;
- `K` (or end of file, so a host that dies takes its trees with it): SIGKILL to every
  descendant, repeated until the supervisor has no child left, then exit.

Descendants are found through `/proc/<pid>/task/<tid>/children` (a scan of `/proc` where
the kernel lacks that file) and signalled through pidfds where the kernel has them, after
checking that the pid still belongs to the tree, so a recycled pid is never signalled.
When the command exits, the supervisor kills whatever is left of the tree (background
`&` jobs included) before it reports the exit status: nothing outlives the command.

The supervisor reports on its stderr, one line each: `pid <n>` once the command started,
`error <errno> <text>` if it could not, `exit <code>` once the tree is gone (the code as
`subprocess` gives it: negative for a signal).

`run_stoppable()` runs a command through a tree with the PROCESS stop policy of spec 01
(S13): a stop sends SIGTERM and the output is collected until the command exits; a
cancellation of the caller (the grace window closed) kills and reaps the whole tree
inside a bounded shield before it propagates. This module knows nothing of tools or
the runtime; the Bash and GenerateImages tools and command-line agents build on it.
"""

from __future__ import annotations

import codecs
import contextlib
import math
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import final

import anyio
import anyio.abc
import attrs
import psutil
from anyio.streams.buffered import BufferedByteReceiveStream

__all__ = (
    "TREE_MARKER",
    "BoundedOutput",
    "CommandOutcome",
    "ProcessTree",
    "marked_pids",
    "run_stoppable",
    "sweep_marked",
)

KILL_BOUND = 5.0
"""Seconds a kill may take (supervisor kill, then the host's own fallback) in a shield."""
DRAIN_BOUND = 1.0
"""Seconds to read the rest of the output once the tree is gone."""
_SUPERVISOR_BOUND = 2.0
"""Seconds the supervisor gets to kill and reap before the host kills from outside."""

_SUPERVISOR = r"""
import os, select, signal, sys

def main():
    me = os.getpid()
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except Exception:
        pass
    have_children_file = os.path.exists("/proc/%d/task/%d/children" % (me, me))
    have_pidfd = hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal")

    def status(line):
        os.write(2, (line + "\n").encode())

    def stat(p):
        # (ppid, pgrp) of p, or None when p is gone.
        try:
            with open("/proc/%d/stat" % p, "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            return int(fields[1]), int(fields[2])
        except (OSError, IndexError, ValueError):
            return None

    def children(p):
        out = []
        try:
            tids = os.listdir("/proc/%d/task" % p)
        except OSError:
            return out
        for t in tids:
            try:
                with open("/proc/%d/task/%s/children" % (p, t), "rb") as f:
                    out.extend(int(x) for x in f.read().split())
            except (OSError, ValueError):
                pass
        return out

    def descendants():
        if have_children_file:
            found, todo = [], [me]
            while todo:
                kids = children(todo.pop())
                found.extend(kids)
                todo.extend(kids)
            return found
        parents = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                st = stat(int(name))
                if st is not None:
                    parents.setdefault(st[0], []).append(int(name))
        found, todo = [], [me]
        while todo:
            kids = parents.get(todo.pop(), [])
            found.extend(kids)
            todo.extend(kids)
        return found

    def send(p, sig, tree):
        # Signal p only if it is still a member of the tree (no recycled pid).
        if have_pidfd:
            try:
                fd = os.pidfd_open(p)
            except OSError:
                return
            try:
                st = stat(p)
                if st is not None and st[0] in tree:
                    signal.pidfd_send_signal(fd, sig)
            except OSError:
                pass
            finally:
                os.close(fd)
        else:
            st = stat(p)
            if st is not None and st[0] in tree:
                try:
                    os.kill(p, sig)
                except OSError:
                    pass

    codes = {}

    def reap(block):
        # Reap children; False once none is left.
        while True:
            try:
                p, st = os.waitpid(-1, 0 if block else os.WNOHANG)
            except ChildProcessError:
                return False
            except InterruptedError:
                continue
            if p == 0:
                return True
            if p == child:
                codes["exit"] = os.waitstatus_to_exitcode(st)
            if block:
                return True

    def kill_all():
        while True:
            tree = descendants()
            members = set(tree)
            members.add(me)
            for p in tree:
                send(p, signal.SIGKILL, members)
            if not reap(True):
                return

    def terminate():
        try:
            os.killpg(child, signal.SIGTERM)
        except OSError:
            pass
        tree = descendants()
        members = set(tree)
        members.add(me)
        for p in tree:
            st = stat(p)
            if st is not None and st[1] != child:
                send(p, signal.SIGTERM, members)

    rfd, wfd = os.pipe()
    os.set_blocking(rfd, False)
    os.set_blocking(wfd, False)
    signal.set_wakeup_fd(wfd)
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: None)

    actions = [(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
               (os.POSIX_SPAWN_DUP2, 1, 2)]
    try:
        child = os.posix_spawn(sys.argv[1], sys.argv[2:], os.environ,
                               file_actions=actions, setpgroup=0,
                               setsigdef=(signal.SIGPIPE, signal.SIGXFSZ,
                                          signal.SIGCHLD, signal.SIGTERM,
                                          signal.SIGINT, signal.SIGHUP),
                               setsigmask=())
    except OSError as exc:
        status("error %d %s" % (exc.errno or 0, exc.strerror or exc))
        return
    status("pid %d" % child)
    while "exit" not in codes:
        ready = select.select([0, rfd], [], [])[0]
        if rfd in ready:
            try:
                woken = os.read(rfd, 512)
            except BlockingIOError:
                woken = b""
            if any(s in woken for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)):
                break
        reap(False)
        if 0 in ready:
            order = os.read(0, 64)
            if not order or b"K" in order:
                break
            if b"T" in order:
                terminate()
    kill_all()
    status("exit %d" % codes.get("exit", -signal.SIGKILL))

main()
"""


TREE_MARKER = "TETHER_TREE"
"""Environment variable naming the tree a process belongs to (an unguessable token)."""


def _environ(pid: int) -> bytes:
    with open(f"/proc/{pid}/environ", "rb") as f:
        return b"\0" + f.read() + b"\0"


def _stat_fields(pid: int) -> list[bytes]:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()


def marked_pids(token: str, *, name: str = TREE_MARKER) -> list[int]:
    """Return the live (non-zombie) pids whose environment holds `name=token`.

    A process that cleared its environment (`env -i`) is not found this way: the
    supervisor, while it lives, finds every descendant without the marker.
    """
    needle = f"\0{name}={token}\0".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if needle in _environ(int(entry)) and _stat_fields(int(entry))[0] != b"Z":
                found.append(int(entry))
        except (OSError, IndexError):
            continue
    return found


def _kill_if_marked(pid: int, needle: bytes) -> None:
    # Pin the pid first (pidfd), then check the marker again: a pid recycled since the
    # scan is never signalled.
    try:
        fd = os.pidfd_open(pid)
    except (OSError, AttributeError):
        fd = None
    try:
        if needle not in _environ(pid):
            return
        if fd is not None:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
    finally:
        if fd is not None:
            os.close(fd)


def _pgid(pid: int) -> int | None:
    try:
        return int(_stat_fields(pid)[2])
    except (OSError, IndexError, ValueError):
        return None


def sweep_marked(
    token: str, *, name: str = TREE_MARKER, limit: float = 2.0
) -> list[int]:
    """SIGKILL every process marked `name=token` until none is left; blocking.

    Scans again after each round (a process may fork while it is killed), pausing
    briefly, for at most `limit` seconds.

    Returns:
        The marked pids still alive when the time ran out (empty when all are gone).
    """
    needle = f"\0{name}={token}\0".encode()
    deadline = time.monotonic() + limit
    pause = threading.Event()  # a bounded wait in a worker thread, not a sleep
    while True:
        found = marked_pids(token, name=name)
        if not found or time.monotonic() > deadline:
            return found
        for pid in found:
            _kill_if_marked(pid, needle)
        pause.wait(0.002)


def _resolve(argv0: str, env: Mapping[str, str], cwd: Path) -> str:
    """Return the executable `argv0` names, searched on the `PATH` of `env`."""
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


@final
@attrs.define(eq=False)
class ProcessTree:
    """A command and every process it starts, kept under a subreaping supervisor.

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
    """The command's pid (also its process group id) once started."""
    returncode: int | None = None
    """The command's exit code once the tree is gone; negative for a signal."""
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
        self, argv: Sequence[str], *, cwd: Path, env: Mapping[str, str]
    ) -> None:
        """Start `argv` in `cwd` with exactly `env` under a new supervisor.

        Raises:
            OSError: the command could not be started (not found, not executable, bad
                directory); the message says why.
        """
        if self._process is not None:
            raise RuntimeError("a ProcessTree starts one command")
        if not argv:
            raise ValueError("argv must name a command")
        if not await anyio.Path(cwd).is_dir():
            raise NotADirectoryError(20, f"working directory is not a directory: {cwd}")
        executable = _resolve(argv[0], env, cwd)
        self._process = await anyio.open_process(
            [sys.executable, "-I", "-S", "-c", _SUPERVISOR, executable, *argv],
            cwd=cwd,
            env={**env, TREE_MARKER: self.token},
            start_new_session=True,
        )
        assert self._process.stderr is not None
        self._status = BufferedByteReceiveStream(self._process.stderr)
        kind, rest = await self._next_status()
        if kind == "pid":
            self.pid = int(rest)
            return
        self._reported = 127
        await self._finish()
        self.returncode = self._reported
        await self._process.aclose()
        if kind == "error":
            number, _, text = rest.partition(" ")
            raise OSError(int(number), f"cannot start {argv[0]}: {text}")
        raise OSError(f"cannot start {argv[0]}: the supervisor failed ({rest})")

    async def _next_status(self) -> tuple[str, str]:
        assert self._status is not None
        try:
            line = await self._status.receive_until(b"\n", 65536)
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.DelimiterNotFound):
            return "eof", "no report"
        kind, _, rest = line.decode("ascii", "replace").partition(" ")
        return kind, rest

    async def output(self) -> AsyncIterator[bytes]:
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
            elif kind == "eof":
                # The supervisor died without reporting (killed, perhaps by the command
                # itself): its orphans went to init. Find them by their marker.
                self._reported = -signal.SIGKILL
                await anyio.to_thread.run_sync(self._sweep)
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
        """Send SIGTERM to the command's group and every descendant outside it."""
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
        self._kill_from_host()
        return await self.wait()

    def _sweep(self) -> None:
        """SIGKILL the command's group and every process carrying this tree's marker."""
        marked = marked_pids(self.token)
        if self.pid is not None and any(_pgid(pid) == self.pid for pid in marked):
            # The group still holds a process of this tree, so its id is not recycled.
            with contextlib.suppress(OSError):
                os.killpg(self.pid, signal.SIGKILL)
        sweep_marked(self.token)

    def _kill_from_host(self) -> None:
        assert self._process is not None
        self._sweep()
        for _ in range(100):
            found = self.alive_pids()
            if not found:
                break
            for pid in found:
                with contextlib.suppress(psutil.Error):
                    psutil.Process(pid).kill()
        if self.pid is not None:
            with contextlib.suppress(OSError):
                os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            self._process.kill()

    def alive_pids(self) -> list[int]:
        """Return the pids of the supervisor and its descendants that are not zombies."""
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


@final
class BoundedOutput:
    """Keep the first and last bytes of an output and count what fell between them."""

    def __init__(self, limit: int) -> None:
        """Keep at most `limit` bytes: half from the start, half from the end."""
        self._head_limit = limit // 2
        self._tail_limit = limit - self._head_limit
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0
        """Bytes seen in all."""

    def add(self, chunk: bytes) -> None:
        """Take the next chunk of output."""
        self.total += len(chunk)
        room = self._head_limit - len(self._head)
        if room > 0:
            self._head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self._tail += chunk
            if len(self._tail) > self._tail_limit:
                del self._tail[: len(self._tail) - self._tail_limit]

    @property
    def dropped(self) -> int:
        """Bytes seen but not kept."""
        return self.total - len(self._head) - len(self._tail)

    def text(self) -> str:
        """Return what was kept, with a marker where bytes were dropped."""
        head = self._head.decode("utf-8", "replace")
        tail = self._tail.decode("utf-8", "replace")
        if self.dropped == 0:
            return head + tail
        return f"{head}\n[... {self.dropped} bytes of output dropped ...]\n{tail}"


@attrs.frozen
class CommandOutcome:
    """How a command run by `run_stoppable()` ended."""

    output: str
    """Merged stdout and stderr, bounded (head and tail with a marker)."""
    returncode: int
    """Exit code; negative when a signal ended the command."""
    stopped: bool
    """A stop arrived before the command ended (SIGTERM was sent)."""
    timed_out: bool
    """The command ran past its timeout and was killed."""


async def run_stoppable(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    stop: anyio.Event,
    on_output: Callable[[str], None],
    timeout: float | None = None,
    limit: int = 30_000,
) -> CommandOutcome:
    """Run `argv` in a `ProcessTree` with the PROCESS stop policy (S13).

    Output is decoded (UTF-8, replacement characters) and handed to `on_output` as it
    comes. When `stop` is set, the tree gets SIGTERM and the output is collected until
    the command exits. When the caller is cancelled (the grace window closed), every
    process of the tree is killed and reaped inside a bounded shield, then the
    cancellation propagates. After `timeout` seconds the tree is killed.

    Raises:
        OSError: the command could not be started.
    """
    tree = ProcessTree()
    kept = BoundedOutput(limit)
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    timed_out = False
    try:
        await tree.start(argv, cwd=cwd, env=env)
        async with anyio.create_task_group() as tg:
            drained = anyio.Event()

            async def pump() -> None:
                async for chunk in tree.output():
                    kept.add(chunk)
                    text = decoder.decode(chunk)
                    if text:
                        on_output(text)
                rest = decoder.decode(b"", final=True)
                if rest:
                    on_output(rest)
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
    finally:
        # S13: settled never coexists with a live process, on every path out.
        await tree.aclose()
    return CommandOutcome(
        output=kept.text(),
        returncode=code,
        stopped=tree.terminated,
        timed_out=timed_out,
    )
