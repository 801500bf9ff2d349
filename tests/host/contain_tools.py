"""A custom tool that starts a program through `ctx.run_process` (loaded by reference
in the stdio host, so it lives in a module of its own)."""

from __future__ import annotations

from tether import StopClass, ToolContext, tool
from tether.testing import announce


@tool(stop_class=StopClass.READ_ONLY)
async def slow_listing(ctx: ToolContext) -> str:
    """List slowly: a program that ignores SIGTERM and leaves a setsid child."""
    say = announce()
    script = (
        f"trap '' TERM; setsid sh -c '{say}; exec sleep 300' & {say}; exec sleep 300"
    )
    done = await ctx.run_process(["bash", "-c", script], stream=True)
    return done.output
