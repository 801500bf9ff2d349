"""Start a child process without a thread pool that users' code can fill.

Written by hand because `anyio.open_process` on trio calls `trio.lowlevel.open_process`,
which runs `subprocess.Popen` in a thread of trio's default limiter: the same 40 places
a user's tool holds when it blocks in `anyio.to_thread.run_sync` and ignores the stop.
After enough stopped calls, every process tether starts (Bash, Grep, the stdio host)
waits forever for a place. Here nothing waits for a thread:

- `Popen` runs in the event loop's own thread, as asyncio itself does (with vfork the
  parent is held until the child has called exec: about a millisecond,
  docs/benchmarks.md "process start").
- The parent's pipe ends are non-blocking and read and written when the event loop
  says they are ready (`anyio.wait_readable` / `anyio.wait_writable`).
- The exit is awaited on a pidfd (Linux 5.3+), reaped by `Popen.poll()` so that
  `Popen` knows its child is gone and never waits on a recycled pid.

Where the kernel refuses `pidfd_open`, a thread waits for the exit (`waitid` with
`WNOWAIT`, the reaping stays in the loop thread) under a limiter of its own without a
bound, as trio does on such kernels: one thread per waiting call, and a wait abandoned
by a cancellation keeps its thread until the process exits.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import signal as _signals
import subprocess
from typing import IO, TYPE_CHECKING, Final, final

import anyio
import anyio.abc
import anyio.lowlevel
import anyio.to_thread
from anyio.lowlevel import RunVar

from .._jsonrpc import FdReceiveStream, FdSendStream

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

__all__ = ("DEVNULL", "PIPE", "ChildProcess", "run_process", "start_process")

PIPE: Final = subprocess.PIPE
"""Give the child a pipe whose other end becomes the process's stream."""
DEVNULL: Final = subprocess.DEVNULL
"""Give the child `/dev/null`."""

Redirect = int | IO[bytes] | None
"""`PIPE`, `DEVNULL`, an open file descriptor or file, or None to inherit."""

_CHUNK: Final = 65536

_exit_waiters: RunVar[anyio.CapacityLimiter] = RunVar("tether_exit_waiters")


def _exit_waiter_limiter() -> anyio.CapacityLimiter:
    """Threads waiting for an exit where there is no pidfd: one per waiting call.

    So there is no bound: a bound shared by waits could be filled by waits of processes
    that live long, and then no exit would be seen.
    """
    try:
        return _exit_waiters.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(math.inf)
        _exit_waiters.set(limiter)
        return limiter


@final
class _PipeReceiveStream(FdReceiveStream):
    """The parent's read end of a pipe: owned, closed by `aclose()`.

    Closing it wakes a task waiting on it (ClosedResourceError).
    """

    async def receive(self, max_bytes: int = _CHUNK) -> bytes:
        if self.closed:
            raise anyio.ClosedResourceError
        await anyio.lowlevel.checkpoint_if_cancelled()
        try:
            data = await super().receive(max_bytes)
        except OSError as exc:
            raise anyio.BrokenResourceError(exc.strerror) from exc
        await anyio.lowlevel.cancel_shielded_checkpoint()
        return data

    async def aclose(self) -> None:
        _close(self)
        await anyio.lowlevel.checkpoint()


@final
class _PipeSendStream(FdSendStream):
    """The parent's write end of a pipe: owned, closed by `aclose()`.

    A child that closed its end makes `send()` raise BrokenResourceError.
    """

    async def send(self, item: bytes) -> None:
        if self.closed:
            raise anyio.ClosedResourceError
        await anyio.lowlevel.checkpoint_if_cancelled()
        await super().send(item)
        await anyio.lowlevel.cancel_shielded_checkpoint()

    async def aclose(self) -> None:
        _close(self)
        await anyio.lowlevel.checkpoint()


def _close(stream: _PipeReceiveStream | _PipeSendStream) -> None:
    """Close a stream's fd now, waking whoever waits on it."""
    if not stream.closed:
        stream.closed = True
        anyio.notify_closing(stream.fd)
        os.close(stream.fd)


@final
class ChildProcess(anyio.abc.Process):
    """A started child process: its pipes as anyio streams, its exit on a pidfd.

    `wait()` may be called by several tasks at once; one of them watches the exit,
    the others wait for it to finish (and take over if it is cancelled).
    """

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        pidfd: int | None,
        stdin: _PipeSendStream | None,
        stdout: _PipeReceiveStream | None,
        stderr: _PipeReceiveStream | None,
    ) -> None:
        self._popen = popen
        self._pidfd = pidfd
        self._stdin = stdin
        self._stdout = stdout
        self._stderr = stderr
        self._watching = False
        self._watch_over = anyio.Event()

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        """The exit code once reaped; negative when a signal ended the process."""
        return self._popen.returncode

    @property
    def stdin(self) -> anyio.abc.ByteSendStream | None:
        return self._stdin

    @property
    def stdout(self) -> anyio.abc.ByteReceiveStream | None:
        return self._stdout

    @property
    def stderr(self) -> anyio.abc.ByteReceiveStream | None:
        return self._stderr

    def send_signal(self, signal: int) -> None:
        """Send `signal` unless the process is reaped.

        It goes through its pidfd, which names this process and no other, or (without
        one) through `Popen`, which checks.

        Called from the event loop's thread, the one that reaps and closes the pidfd.
        """
        if self._popen.returncode is not None:
            return
        if self._pidfd is None:
            self._popen.send_signal(signal)
            return
        with contextlib.suppress(ProcessLookupError):
            _signals.pidfd_send_signal(self._pidfd, signal)

    def terminate(self) -> None:
        self.send_signal(_signals.SIGTERM)

    def kill(self) -> None:
        self.send_signal(_signals.SIGKILL)

    async def wait(self) -> int:
        """Wait until the process exited and reap it; return its exit code."""
        await anyio.lowlevel.checkpoint_if_cancelled()
        while (code := self._popen.poll()) is None:
            if self._watching:
                await self._watch_over.wait()
                continue
            self._watching = True
            try:
                await self._wait_exit()
            finally:
                self._watching = False
                self._watch_over.set()
                self._watch_over = anyio.Event()
        self._close_pidfd()
        await anyio.lowlevel.cancel_shielded_checkpoint()
        return code

    async def _wait_exit(self) -> None:
        if self._pidfd is not None:
            with contextlib.suppress(anyio.ClosedResourceError):
                # Closed under us: another waiter reaped it (the loop polls again).
                await anyio.wait_readable(self._pidfd)
            return
        await anyio.to_thread.run_sync(
            _wait_exited,
            self._popen,
            abandon_on_cancel=True,
            limiter=_exit_waiter_limiter(),
        )

    def _close_pidfd(self) -> None:
        fd, self._pidfd = self._pidfd, None
        if fd is not None:
            # Wakes a task watching it, before its number can be reused.
            anyio.notify_closing(fd)
            os.close(fd)

    async def aclose(self) -> None:
        """Close the pipes and wait for the exit; killed if that wait is cancelled.

        As `anyio.abc.Process.aclose` does.
        """
        with anyio.CancelScope(shield=True) as scope:
            for stream in (self._stdin, self._stdout, self._stderr):
                if stream is not None:
                    await stream.aclose()
            scope.shield = False
            try:
                await self.wait()
            except BaseException:
                scope.shield = True
                self.kill()
                await self.wait()
                raise


def _wait_exited(popen: subprocess.Popen[bytes]) -> None:
    """Block until the process exited, leaving it to be reaped in the loop's thread.

    The wait uses `WNOWAIT`; where there is no `waitid`, reap it here (`Popen` holds a
    lock for that, which its `poll()` in the loop's thread never blocks on).
    """
    waitid = getattr(os, "waitid", None)
    if waitid is None:  # pragma: no cover - macOS before Python 3.13
        popen.wait()
        return
    with contextlib.suppress(ChildProcessError):
        waitid(os.P_PID, popen.pid, os.WEXITED | os.WNOWAIT)


def _open_pidfd(pid: int) -> int | None:
    """A pidfd for `pid`, or None where the kernel (or the platform) has none.

    None means the thread fallback.
    """
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is None:
        return None
    try:
        fd: int = pidfd_open(pid)
        return fd
    except OSError as exc:
        if exc.errno in (errno.ENOSYS, errno.EPERM, errno.EACCES):
            return None
        raise


def start_process(
    command: Sequence[str],
    *,
    stdin: Redirect = PIPE,
    stdout: Redirect = PIPE,
    stderr: Redirect = PIPE,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    start_new_session: bool = False,
) -> ChildProcess:
    """Start `command` in the event loop's thread and return it, started.

    It never waits, so a cancellation cannot come between the start and the caller
    holding the process: the caller reclaims it (`aclose()`) on every way out.

    Raises:
        OSError: the command could not be started (`strerror` says why: not found,
            not executable, bad directory).
    """
    parent_fds: list[int] = []
    child_fds: list[int] = []

    def pipe(redirect: Redirect, *, parent_reads: bool) -> Redirect:
        if redirect != PIPE:
            return redirect
        read_end, write_end = os.pipe2(os.O_CLOEXEC)
        mine, theirs = (read_end, write_end) if parent_reads else (write_end, read_end)
        parent_fds.append(mine)
        child_fds.append(theirs)
        return theirs

    try:
        child_in = pipe(stdin, parent_reads=False)
        child_out = pipe(stdout, parent_reads=True)
        child_err = pipe(stderr, parent_reads=True)
        popen = subprocess.Popen(
            list(command),
            stdin=child_in,
            stdout=child_out,
            stderr=child_err,
            cwd=cwd,
            env=env,
            start_new_session=start_new_session,
        )
    except BaseException:
        for fd in parent_fds:
            os.close(fd)
        raise
    finally:
        for fd in child_fds:
            os.close(fd)
    try:
        pidfd = _open_pidfd(popen.pid)
    except BaseException:
        popen.kill()
        popen.wait()
        for fd in parent_fds:
            os.close(fd)
        raise
    mine = iter(parent_fds)
    return ChildProcess(
        popen,
        pidfd,
        _PipeSendStream(next(mine)) if stdin == PIPE else None,
        _PipeReceiveStream(next(mine)) if stdout == PIPE else None,
        _PipeReceiveStream(next(mine)) if stderr == PIPE else None,
    )


async def run_process(
    command: Sequence[str],
    *,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run `command` to its end (stdin `/dev/null`) and return what it printed.

    As `anyio.run_process(check=False)` does, without a thread (see above).

    Raises:
        OSError: the command could not be started.
    """
    out, err = bytearray(), bytearray()

    async def drain(
        stream: anyio.abc.ByteReceiveStream | None, into: bytearray
    ) -> None:
        assert stream is not None
        async for chunk in stream:
            into += chunk

    async with start_process(command, stdin=DEVNULL, cwd=cwd, env=env) as process:
        async with anyio.create_task_group() as tg:
            tg.start_soon(drain, process.stdout, out)
            tg.start_soon(drain, process.stderr, err)
        code = await process.wait()
    return subprocess.CompletedProcess(list(command), code, bytes(out), bytes(err))
