"""The tools tether serves besides your own: built-ins, MCP servers' tools, plugin tools.

`default_tools()` builds the built-ins; `McpTools.open(config)` starts the configured MCP
servers for a block; `load_plugins()` loads the `tether.tools` entry points. Servers and
plugins that cannot be used are reported in `.problems` and skipped, never fatal. Names
are imported on first use so that the MCP SDK loads only when it is needed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports as _lazy_exports

if TYPE_CHECKING:
    from .host._mcp import McpProblem as McpProblem
    from .host._mcp import McpTool as McpTool
    from .host._mcp import McpTools as McpTools
    from .host._plugins import PluginProblem as PluginProblem
    from .host._plugins import PluginTool as PluginTool
    from .host._plugins import PluginTools as PluginTools
    from .host._plugins import load_plugins as load_plugins
    from .host.tools import default_tools as default_tools

__all__, __getattr__, __dir__ = _lazy_exports(
    __name__,
    {
        ".host._mcp": ("McpProblem", "McpTool", "McpTools"),
        ".host._plugins": (
            "PluginProblem",
            "PluginTool",
            "PluginTools",
            "load_plugins",
        ),
        ".host.tools": ("default_tools",),
    },
)
