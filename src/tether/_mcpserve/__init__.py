"""`tether mcp serve`: tether's tools as an MCP server whose every call is a tether call.

Each `tools/call` runs in a session of its own in one `Runtime` (the account's permission
rules, the guard, the wall, the ledger); the client's `notifications/cancelled` for it is
that session's `Session.abort()`. The person's recorded stop is read before each call:
under a stop no call starts and the refusal says why. MCP answers no cancelled request,
so what really happened to a cancelled call is in the ledger and in the next call's result.
Over streamable HTTP (`McpHttp`) a 2026-07-28 client may take each call as a task (the
tasks extension) whose status tells what really happened.
"""

from __future__ import annotations

from ._http import McpHttp as McpHttp
from ._server import McpServe as McpServe
from ._server import serve_stdio as serve_stdio
from ._server import tool_annotations as tool_annotations

__all__ = ("McpHttp", "McpServe", "serve_stdio", "tool_annotations")
