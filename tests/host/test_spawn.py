"""Starting a child process without a thread pool: real processes, real pipes, both
of anyio's backends."""

from __future__ import annotations

import errno
import os
import signal
import sys
from typing import TYPE_CHECKING

import anyio
import anyio.lowlevel
import anyio.to_thread
import psutil
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from tests.threads import default_threads_held

from tether._jsonrpc import FdReceiveStream, FdSendStream
from tether.host._spawn import DEVNULL, ChildProcess, start_process

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _open_fds() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/fd")}


@pytest.fixture
def no_fd_leak() -> Iterator[None]:
    """Every descriptor a test opened is closed by its end."""
    before = _open_fds()
    yield
    # listdir's own descriptor is gone once it returns; anything else is a leak.
    assert _open_fds() <= before


async def _read_all(process: ChildProcess) -> bytes:
    assert process.stdout is not None
    return b"".join([chunk async for chunk in process.stdout])


async def test_streams_carry_bytes_both_ways_and_end_at_eof(no_fd_leak: None) -> None:
    """What goes to stdin comes back on stdout; closing stdin is the child's EOF, and
    the child's exit is the parent's EOF; stderr is a stream of its own."""
    process = start_process(
        [
            sys.executable,
            "-c",
            "import sys; d = sys.stdin.buffer.read(); "
            "sys.stdout.buffer.write(d[::-1]); sys.stderr.write('done')",
        ]
    )
    async with process:
        assert process.stdin is not None
        assert process.stderr is not None
        # More than a pipe holds, so sending waits for the child to read.
        data = os.urandom(300_000)
        stdin = process.stdin

        async def send() -> None:
            await stdin.send(data)
            await stdin.aclose()

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(send)
                out = await _read_all(process)
        assert out == data[::-1]
        err = BufferedByteReceiveStream(process.stderr)
        assert await err.receive_exactly(4) == b"done"
        with pytest.raises(anyio.EndOfStream):
            await process.stderr.receive()
        assert await process.wait() == 0
    assert process.returncode == 0


async def test_exit_codes_and_signals_come_back(workspace: Path) -> None:
    """An exit code comes back as is, a signal as its negative; `pid` is the child's."""
    async with start_process(["sh", "-c", "exit 3"], stdout=DEVNULL) as process:
        assert await process.wait() == 3
    async with start_process(["sleep", "60"], cwd=workspace) as process:
        assert psutil.Process(process.pid).cwd() == str(workspace)
        process.terminate()
        assert await process.wait() == -signal.SIGTERM
        process.kill()  # reaped: a recycled pid is never signalled
    async with start_process(["sleep", "60"]) as process:
        process.kill()
        assert await process.wait() == -signal.SIGKILL
        assert not psutil.pid_exists(process.pid)


async def test_a_command_that_cannot_start_raises_oserror_and_leaks_nothing(
    workspace: Path, no_fd_leak: None
) -> None:
    """Not found, not executable, a missing directory: OSError with the reason, and
    none of the pipes stays open."""
    cases = [
        (["no-such-command-xyz"], workspace, errno.ENOENT),
        ([str(workspace)], workspace, errno.EACCES),
        (["true"], workspace / "missing", errno.ENOENT),
    ]
    for argv, cwd, number in cases:
        with pytest.raises(OSError, match=os.strerror(number)) as caught:
            start_process(argv, cwd=cwd)
        assert caught.value.errno == number
        assert caught.value.strerror == os.strerror(number)


async def test_cancelling_a_read_leaves_the_process_and_its_stream_usable(
    no_fd_leak: None,
) -> None:
    """A reader cancelled while it waits loses nothing: the next read gets the bytes."""
    async with start_process(["cat"]) as process:
        assert process.stdin is not None
        assert process.stdout is not None
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(process.stdout.receive)
                await anyio.wait_all_tasks_blocked()
                scope.cancel()
        assert scope.cancelled_caught
        assert process.returncode is None
        await process.stdin.send(b"still here")
        assert await process.stdout.receive() == b"still here"
        await process.stdin.aclose()
        assert await process.wait() == 0


async def test_closing_a_stream_wakes_its_reader(no_fd_leak: None) -> None:
    """A task waiting on a stream that is closed gets ClosedResourceError at once;
    leaving the block kills nothing that exits on EOF."""
    async with start_process(["cat"]) as process:
        assert process.stdout is not None
        stdout = process.stdout
        caught: list[BaseException] = []

        async def read() -> None:
            try:
                await stdout.receive()
            except anyio.ClosedResourceError as exc:
                caught.append(exc)

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(read)
                await anyio.wait_all_tasks_blocked()
                await stdout.aclose()
        assert len(caught) == 1
        with pytest.raises(anyio.ClosedResourceError):
            await stdout.receive()
    assert process.returncode == 0


async def test_several_waiters_see_the_exit_and_one_cancelled_loses_nothing() -> None:
    """Two tasks wait; the one watching the exit is cancelled; the other still sees it."""
    async with start_process(["cat"]) as process:
        assert process.stdin is not None
        codes: list[int] = []

        async def wait() -> None:
            codes.append(await process.wait())

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                with anyio.CancelScope() as first:
                    async with anyio.create_task_group() as inner:
                        inner.start_soon(wait)
                        await anyio.wait_all_tasks_blocked()
                        tg.start_soon(wait)
                        await anyio.wait_all_tasks_blocked()
                        first.cancel()
                await process.stdin.aclose()
        assert codes == [0]


async def test_sending_to_a_child_that_closed_its_input_is_broken() -> None:
    async with start_process(["true"], stdout=DEVNULL) as process:
        assert process.stdin is not None
        await process.wait()
        with pytest.raises(anyio.BrokenResourceError):
            await process.stdin.send(b"x" * 100_000)


async def test_a_start_in_a_cancelled_scope_is_still_handed_over() -> None:
    """Starting never waits, so a cancellation cannot lose a started process: the
    caller holds it and reclaims it."""
    with anyio.CancelScope() as scope:
        scope.cancel()
        process = start_process(["sleep", "60"])
        try:
            await anyio.lowlevel.checkpoint()
        finally:
            assert psutil.pid_exists(process.pid)
            process.kill()
            with anyio.CancelScope(shield=True):
                await process.aclose()
    assert scope.cancelled_caught
    assert process.returncode == -signal.SIGKILL


async def test_starting_never_waits_for_threads_users_can_hold() -> None:
    """With every place of the default thread limiter held by workers that ignore
    the stop, a process still starts, talks and is reaped at once."""
    async with default_threads_held():
        with anyio.fail_after(5):
            async with start_process(["echo", "hi"]) as process:
                assert await _read_all(process) == b"hi\n"
                assert await process.wait() == 0


async def test_without_pidfd_the_exit_is_seen_from_a_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where the kernel refuses pidfd_open (ENOSYS: the one refusal this machine
    cannot give), a thread waits for the exit and the loop thread reaps it."""

    def refuse(pid: int, flags: int = 0) -> int:
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))

    monkeypatch.setattr(os, "pidfd_open", refuse)
    async with start_process(["sh", "-c", "read x; exit 4"]) as process:
        assert process.stdin is not None
        with anyio.move_on_after(0.05):
            await process.wait()  # an abandoned wait keeps its thread to the exit
        assert process.returncode is None
        await process.stdin.send(b"go\n")
        with anyio.fail_after(5):
            assert await process.wait() == 4


async def test_closing_kills_a_process_whose_wait_is_cancelled() -> None:
    """`aclose()` waits for the exit; cancelled in that wait, it kills and reaps."""
    process = start_process(["sleep", "60"], stdin=DEVNULL)
    process.send_signal(signal.SIGSTOP)  # stopped: its exit can come only by a kill
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(process.aclose)
            await anyio.wait_all_tasks_blocked()
            scope.cancel()
    assert scope.cancelled_caught
    assert process.returncode == -signal.SIGKILL
    assert not psutil.pid_exists(process.pid)


async def test_a_start_whose_pidfd_fails_leaves_no_process_and_no_pipe(
    monkeypatch: pytest.MonkeyPatch, no_fd_leak: None
) -> None:
    """Out of descriptors after the start (EMFILE, which this test cannot cause for
    real without starving the test run): the child is killed and reaped, the error
    raised."""
    started: list[int] = []

    def exhausted(pid: int, flags: int = 0) -> int:
        started.append(pid)
        raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))

    monkeypatch.setattr(os, "pidfd_open", exhausted)
    with pytest.raises(OSError, match=os.strerror(errno.EMFILE)):
        start_process(["sleep", "60"])
    (pid,) = started
    assert not psutil.pid_exists(pid)


async def test_a_pidfd_closed_by_one_waiter_wakes_the_other() -> None:
    """Regression: the exit seen first by a second waiter (its `poll()` reaped) closed
    the pidfd the watching task waited on without telling it: that task slept on, and
    the next descriptor with that number could not be waited on."""
    process = start_process(["sleep", "60"], stdin=DEVNULL, stdout=DEVNULL)
    codes: list[int] = []

    async def watch() -> None:
        codes.append(await process.wait())

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            await anyio.wait_all_tasks_blocked()  # the watcher waits on the pidfd
            # The child dies while the loop is busy here (no await in between; the
            # wait blocks on purpose and leaves it unreaped: WNOWAIT) ...
            os.kill(process.pid, signal.SIGKILL)
            os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)  # noqa: ASYNC222
            # ... and this waiter reaps it and closes the pidfd first.
            assert await process.wait() == -signal.SIGKILL
            reused = start_process(["echo", "hi"], stdin=DEVNULL, stderr=DEVNULL)
            async with reused:
                assert await _read_all(reused) == b"hi\n"
    assert codes == [-signal.SIGKILL]


async def test_a_stream_woken_after_it_was_closed_touches_no_other_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A reader (or writer) made ready and then, before it ran, closed by its owner
    (whose fd number a new file may already hold) ends with ClosedResourceError and
    reads (or writes) nothing."""
    read_end, write_end = os.pipe()
    reader, writer = FdReceiveStream(read_end), FdSendStream(write_end)
    while True:  # a full pipe: the writer has to wait
        try:
            os.write(write_end, b"x" * 65536)
        except BlockingIOError:
            break
    drained = b"".join(iter(lambda: _read_some(read_end), b""))

    async def woken_after_close(fd: int) -> None:
        reader.closed = writer.closed = True  # closed while the task was being woken
        os.write(write_end, b"the new file's bytes")

    monkeypatch.setattr(anyio, "wait_readable", woken_after_close)
    monkeypatch.setattr(anyio, "wait_writable", woken_after_close)
    try:
        with pytest.raises(anyio.ClosedResourceError):
            await reader.receive()
        assert os.read(read_end, 100) == b"the new file's bytes"
        os.write(write_end, drained[: len(drained) - 100])  # full again
        with pytest.raises(anyio.ClosedResourceError):
            await writer.send(b"not for the new file")
    finally:
        os.close(read_end)
        os.close(write_end)


def _read_some(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except BlockingIOError:
        return b""


async def test_without_pidfd_open_at_all_processes_still_start(
    monkeypatch: pytest.MonkeyPatch, no_fd_leak: None
) -> None:
    """A platform with no `os.pidfd_open` (macOS) takes the thread fallback instead of
    failing every start."""
    monkeypatch.delattr(os, "pidfd_open")
    async with start_process(["sh", "-c", "exit 3"], stdin=DEVNULL) as process:
        with anyio.fail_after(5):
            assert await process.wait() == 3


async def test_signals_reach_the_process_by_its_pidfd_and_none_after_reaping(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While the pidfd is open a signal goes through it (it names this process, never
    a recycled pid); once reaped, nothing is sent at all."""
    sent: list[tuple[int, int]] = []
    real = signal.pidfd_send_signal

    def spy(fd: int, sig: int, *rest: object) -> None:
        sent.append((fd, sig))
        real(fd, sig)

    monkeypatch.setattr(signal, "pidfd_send_signal", spy)
    process = start_process(["sleep", "60"], stdin=DEVNULL, stdout=DEVNULL)
    async with process:
        process.terminate()
        with anyio.fail_after(5):
            assert await process.wait() == -signal.SIGTERM
        process.kill()  # reaped: nothing is sent
    assert [sig for _fd, sig in sent] == [signal.SIGTERM]
