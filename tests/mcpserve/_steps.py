"""A write in two steps, served by `tether mcp serve --tool tests.mcpserve._steps:...`.

Half-done is visible: between its two steps the file holds the first line only.
"""

from __future__ import annotations

import anyio

from tether.host import StopClass, ToolContext, tool

__all__ = ("TwoStepWrite",)

STEPS = "step 1\nstep 2\n"
"""The file once both steps are written."""


@tool(stop_class=StopClass.MUTATING, subject_field="path")
async def TwoStepWrite(ctx: ToolContext, path: str, seconds: float = 0.2) -> str:
    """Write the first line of `path`, mark `path.started`, wait `seconds`, write the
    second line: a stop between the steps must let the second come."""
    target = ctx.resolve(path)
    target.write_text("step 1\n", encoding="utf-8")
    ctx.resolve(path + ".started").write_text("", encoding="utf-8")
    await anyio.sleep(seconds)
    with target.open("a", encoding="utf-8") as out:
        out.write("step 2\n")
    return f"wrote both steps of {path}"
