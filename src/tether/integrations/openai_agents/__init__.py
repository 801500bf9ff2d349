"""tether's tools and honest stop inside the OpenAI Agents SDK (`openai-agents`).

`TetherTools(runtime)` hands a runtime's tools to an `agents.Agent`: each as an
`agents.FunctionTool` (`function_tools()`), and each configured MCP server's as an
object the SDK takes where it takes an MCP server (`mcp_server(name)`). Every call the
agent makes is a tether call in a session of its own: the account's permission rules,
the guard, the wall and the ledger apply.

The SDK's cancel is tether's stop. `RunResultStreaming.cancel()`, or cancelling the task
that runs `Runner.run`, cancels each tool call in flight, and that is the call's
`Session.abort()`: a `READ_ONLY` call ends at once and its work is cancelled; a
`PROCESS` call's tree gets SIGTERM, its grace window, then SIGKILL, and is reclaimed
whole; a started `MUTATING` or `EXTENSION` call is never abandoned: it runs to its real
end, which the ledger records. `wait_aborted()` returns the aborts' reports,
`wait_settled()` waits for the real ends, and `results_after_cancel()` gives the input
items that tell the model what really happened to each cancelled call.

Only the SDK's public interface is used: `FunctionTool`, `agents.mcp.MCPServer` and
the MCP types it takes. The SDK is an extra: `pip install 'tether[openai-agents]'`.
"""

from __future__ import annotations

from ._adapter import TetherMCPServer as TetherMCPServer
from ._adapter import TetherTools as TetherTools

__all__ = ("TetherMCPServer", "TetherTools")
