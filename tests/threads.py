"""Every place of anyio's default thread limiter held, as a user's stopped tools hold
them: workers blocked in `anyio.to_thread.run_sync` that ignore the stop."""

from __future__ import annotations

import threading
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread

if TYPE_CHECKING:
    from collections.abc import AsyncIterator


@asynccontextmanager
async def default_threads_held() -> AsyncIterator[None]:
    """Hold every place of the default limiter for the block; released after it."""
    release = threading.Event()
    limiter = anyio.to_thread.current_default_thread_limiter()
    try:
        async with anyio.create_task_group() as tg:
            for _ in range(int(limiter.total_tokens)):
                tg.start_soon(
                    partial(
                        anyio.to_thread.run_sync, release.wait, abandon_on_cancel=True
                    )
                )
            await anyio.wait_all_tasks_blocked()
            assert limiter.available_tokens == 0
            yield
            tg.cancel_scope.cancel()
    finally:
        release.set()
