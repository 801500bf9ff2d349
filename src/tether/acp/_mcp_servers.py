"""The MCP servers of `session/new` in the `mcpServers` shape tether's config uses.

An editor names MCP servers per session; tether starts them like the servers of the
account's config (`tether.host._mcp`), and a session's server replaces a configured one
of the same name. Transports tether cannot speak are refused here, with what to use
instead, before anything starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from acp.schema import AcpMcpServer, HttpMcpServer, McpServerStdio, SseMcpServer

from ..errors import UsageError

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ("AcpMcpServers", "config_servers")

AcpMcpServers: TypeAlias = Sequence[
    HttpMcpServer | SseMcpServer | AcpMcpServer | McpServerStdio
]


def config_servers(
    servers: AcpMcpServers | None, *, cwd: Path
) -> dict[str, dict[str, Any]]:
    """Convert a session's MCP servers to `mcpServers` entries, by name.

    Stdio servers start in the session's working directory `cwd`.

    Raises:
        UsageError: a server uses a transport tether does not speak (SSE, ACP), or two
            servers share a name; the message says what to do.
    """
    out: dict[str, dict[str, Any]] = {}
    for server in servers or ():
        if server.name in out:
            raise UsageError(
                f"two MCP servers are named {server.name!r}; give each a name of its own"
            )
        match server:
            case McpServerStdio():
                out[server.name] = {
                    "command": server.command,
                    "args": list(server.args),
                    "env": {v.name: v.value for v in server.env},
                    "cwd": str(cwd),
                }
            case HttpMcpServer():
                out[server.name] = {
                    "type": "http",
                    "url": server.url,
                    "headers": {h.name: h.value for h in server.headers},
                }
            case SseMcpServer():
                raise UsageError(
                    f"MCP server {server.name!r} uses SSE, which tether does not speak; "
                    "use its streamable HTTP endpoint or a stdio command"
                )
            case AcpMcpServer():
                raise UsageError(
                    f"MCP server {server.name!r} is carried over ACP, which tether does "
                    "not speak; use a stdio command or a streamable HTTP URL"
                )
    return out
