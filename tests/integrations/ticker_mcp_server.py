"""An MCP server (the SDK's `MCPServer`, over stdio) whose one tool ticks on after a cancel.

`tick(times)` reports `tick N` as progress every 20 ms, `times` times, inside a shield:
MCP's `notifications/cancelled` does not stop it. As MCP says, the server then sends no
answer to the cancelled request.
"""

from __future__ import annotations

import anyio
from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("ticker")


@server.tool()
async def tick(times: int, ctx: Context) -> str:
    """Tick `times` times, one progress notification every 20 ms; a cancel goes unheard."""
    with anyio.CancelScope(shield=True):
        for n in range(times):
            await ctx.report_progress(n + 1, times, f"tick {n + 1}")
            await anyio.sleep(0.02)
    return f"ticked {times} times"


if __name__ == "__main__":
    server.run("stdio")
