"""Runtime test support: the test tools, each allowed, and a write held half done."""

from __future__ import annotations

import anyio

from tether import StopClass, ToolContext, tool
from tether.testing import (
    Echo,
    Fail,
    Hang,
    Obedient,
    SlowExtension,
    SlowWrite,
    Stubborn,
    Stuck,
)

TEST_TOOLS = [Echo, Fail, Hang, Obedient, SlowExtension, SlowWrite, Stubborn, Stuck]
ALLOW_ALL = {"allow": [t.name for t in TEST_TOOLS]}


@tool(stop_class=StopClass.MUTATING)
async def HeldWrite(ctx: ToolContext, path: str, release: str) -> str:
    """Write the first half of a file, wait until the file `release` exists, then write
    the second half: cut in between, the file is left half written.

    Module-level, so the stdio host can import it.
    """
    target = anyio.Path(ctx.resolve(path))
    await target.write_text("first half,", encoding="utf-8")
    ctx.progress("started")
    flag = anyio.Path(ctx.resolve(release))
    # A file, not an `anyio.Event`: the test releases it from another process.
    while not await flag.exists():  # noqa: ASYNC110
        await anyio.sleep(0.01)
    await target.write_text("first half, second half", encoding="utf-8")
    return "wrote both halves"
