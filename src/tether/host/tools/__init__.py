"""The built-in tools, one module each; `default_tools()` builds them from config."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from ... import _extras
from ..._config import Config, load_config

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from .._protocol import Elicitor
    from .._tool import Tool

__all__ = ("default_tools", "open_mcp_tools", "standard_tools")


def default_tools(config: Config | None = None) -> list[Tool]:
    """Return the built-in tools; the runtime's host set-up adds MCP and plugin tools.

    The built-in tools are Read, Glob, Grep, WebFetch, Write, Edit, Bash and
    GenerateImages.

    GenerateImages is left out where it has no renderer: no `image_command` is
    configured and the `images` extra (Pillow) is not installed; `standard_tools`
    says so in its problems.
    """
    from . import bash, edit, generate_images, glob, grep, read, webfetch, write

    cfg = config if config is not None else load_config()
    tools: list[Tool] = []
    for module in (read, glob, grep, webfetch, write, edit, bash, generate_images):
        tools.extend(module.tools(cfg))
    return tools


def standard_tools(config: Config, problems: list[str]) -> list[Tool]:
    """The built-in tools plus the plugin tools; skipped ones go to `problems`."""
    from .._plugins import load_plugins
    from .generate_images import unavailable

    tools = default_tools(config)
    if (why := unavailable(config)) is not None:
        problems.append(why)
    names = {t.name for t in tools}
    plugins = load_plugins()
    problems.extend(str(p) for p in plugins.problems)
    for tool in plugins.tools:
        if tool.name in names:
            problems.append(
                f"plugin tool {tool.name} has the name of a built-in; skipped"
            )
            continue
        tools.append(tool)
    return tools


@asynccontextmanager
async def open_mcp_tools(
    config: Config,
    problems: list[str],
    *,
    workspace: Path | None = None,
    elicitor: Elicitor | None = None,
) -> AsyncIterator[list[Tool]]:
    """Start the configured MCP servers for the block and yield their tools.

    Stdio servers may write `workspace` (default: the working directory), walled as
    every process tree. Servers that fail to start are reported in `problems` and
    skipped. `elicitor` answers the servers' questions (None: declined).
    """
    if not config.mcp_servers:
        yield []
        return
    if not _extras.installed("mcp"):
        problems.append(_extras.missing("mcp", "the configured MCP servers"))
        yield []
        return
    from .._mcp import McpTools

    async with McpTools.open(config, workspace=workspace, elicitor=elicitor) as mcp:
        problems.extend(str(p) for p in mcp.problems)
        yield list(mcp.tools)
