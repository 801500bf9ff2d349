"""An MCP server (the SDK's `MCPServer`, over stdio) whose one tool ticks on after a cancel.

`tick(times)` reports `tick N` as progress every 20 ms, `times` times, inside a shield:
MCP's `notifications/cancelled` does not stop it. With `log`, each tick is also a line
appended to that file, so a client that stopped listening can still see it tick. As MCP says, the server then sends no
answer to the cancelled request.
"""

from __future__ import annotations

import anyio
from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("ticker")


@server.tool()
async def tick(times: int, ctx: Context, log: str = "") -> str:
    """Tick `times` times, one progress notification every 20 ms; a cancel goes unheard."""
    with anyio.CancelScope(shield=True):
        for n in range(times):
            await ctx.report_progress(n + 1, times, f"tick {n + 1}")
            if log:
                with open(log, "a", encoding="utf-8") as out:  # noqa: ASYNC230
                    out.write(f"tick {n + 1}\n")
            await anyio.sleep(0.02)
    return f"ticked {times} times"


if __name__ == "__main__":
    server.run("stdio")
