"""Run a reading in a worker thread and give up on it after a bound.

A system call into a FUSE or network mount can wait for ever, and no signal ends it, so
a reading that may cross one runs in a worker thread while the caller waits at most the
bound. A worker that does not finish in time is abandoned, on purpose: it stays blocked
in the kernel until the mount answers or goes away, and then finishes and drops its
result. Each place has one worker, so a mount that never answers costs one thread, not
one per reading; while that worker is still blocked, a new reading of the place holds at
once and names what it is blocked on.

Written by hand: the stdlib's executors would queue the next reading behind the blocked
one (or start a thread per reading), and anyio's `to_thread` needs an event loop, while
readings are synchronous calls made from anywhere (a run, a verb, a guard).
"""

from __future__ import annotations

import _thread
import os
import queue
import threading
import time
from typing import TYPE_CHECKING, Generic, TypeVar, final

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable

__all__ = ("Hung", "Progress", "run_bounded")

T = TypeVar("T")


@final
class Progress:
    """What a reading is doing now: the path it is about to touch."""

    __slots__ = ("where",)

    def __init__(self) -> None:
        self.where = "starting"


class Hung(Exception):
    """A reading did not finish within its bound; the message names what hung."""


@final
class _Job(Generic[T]):
    __slots__ = ("done", "error", "fn", "progress", "result", "started")

    def __init__(self, fn: Callable[[Progress], T]) -> None:
        self.fn = fn
        self.progress = Progress()
        self.result: T | None = None
        self.error: BaseException | None = None
        self.done = _thread.allocate_lock()
        self.done.acquire()
        self.started = time.monotonic()


@final
class _Worker:
    def __init__(self, name: str) -> None:
        self.callers = threading.Lock()
        self.jobs: queue.SimpleQueue[_Job[object]] = queue.SimpleQueue()
        # Invariant: set by a caller when it hands a job over, cleared by the worker
        # when that job is finished (never by a caller that gave up on it).
        self.inflight: _Job[object] | None = None
        thread = threading.Thread(target=self._serve, name=name, daemon=True)
        thread.start()

    def _serve(self) -> None:
        while True:
            job = self.jobs.get()
            try:
                job.result = job.fn(job.progress)
            except BaseException as exc:  # handed to the caller, who decides
                job.error = exc
            finally:
                self.inflight = None
                job.done.release()


_workers: dict[Hashable, _Worker] = {}
_workers_lock = threading.Lock()


def _worker(key: Hashable) -> _Worker:
    with _workers_lock:
        found = _workers.get(key)
        if found is None:
            found = _workers[key] = _Worker(f"tether-stop-reader-{len(_workers)}")
        return found


def _hung(job: _Job[object], bound: float) -> Hung:
    waited = time.monotonic() - job.started
    return Hung(
        f"the reading did not finish within {bound:g} s: it hung at "
        f"{job.progress.where} (waiting {waited:.1f} s); a mount there does not answer"
    )


def run_bounded(key: Hashable, fn: Callable[[Progress], T], *, bound: float) -> T:
    """Run `fn(progress)` in the worker of `key`; return its result within `bound` s.

    Raises:
        Hung: `fn` did not finish in time, or the worker is still blocked in an
            earlier call; nothing is started then.
        BaseException: whatever `fn` raised.
    """
    worker = _worker(key)
    start = time.monotonic()
    if not worker.callers.acquire(timeout=bound):
        stuck = worker.inflight
        raise Hung(
            f"the reading did not start within {bound:g} s: another reading of the "
            f"same place is blocked at {stuck.progress.where if stuck else '?'}"
        )
    try:
        stuck = worker.inflight
        if stuck is not None:
            raise _hung(stuck, bound)
        job: _Job[T] = _Job(fn)
        worker.inflight = job  # type: ignore[assignment]
        worker.jobs.put(job)  # type: ignore[arg-type]
        left = max(0.0, bound - (time.monotonic() - start))
        if not job.done.acquire(timeout=left):
            raise _hung(job, bound)  # type: ignore[arg-type]
    finally:
        worker.callers.release()
    if job.error is not None:
        raise job.error
    return job.result  # type: ignore[return-value]


def _forget_after_fork() -> None:
    global _workers_lock
    _workers.clear()
    _workers_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)
