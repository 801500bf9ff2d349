"""The built-in tools, one module each; `default_tools()` builds them from config."""

from __future__ import annotations

from ..._config import Config, load_config
from .._tool import Tool

__all__ = ("default_tools",)


def default_tools(config: Config | None = None) -> list[Tool]:
    """Return the built-in tools: Read, Glob, Grep, WebFetch, Write, Edit, Bash,
    GenerateImages (MCP and plugin tools are added by the runtime's host set-up)."""
    from . import bash, edit, generate_images, glob, grep, read, webfetch, write

    cfg = config if config is not None else load_config()
    tools: list[Tool] = []
    for module in (read, glob, grep, webfetch, write, edit, bash, generate_images):
        tools.extend(module.tools(cfg))
    return tools
