"""The optional parts of tether, installed as extras, and the one line a missing one gets.

`pip install tether` brings the runtime, the built-in tools, the agent loop, unattended
runs on the embedded SQLite store and the CLI. Heavier parts that only some users need
are extras: `pip install 'tether[postgres]'` and so on, or `'tether[all]'`. A setting
that needs a part not installed is refused where it is used, with this module's line,
never skipped in silence.
"""

from __future__ import annotations

import importlib.util

__all__ = ("EXTRAS", "installed", "missing")

EXTRAS: dict[str, tuple[str, ...]] = {
    "postgres": ("psycopg",),  # the PostgreSQL store of runs
    "images": ("PIL",),  # GenerateImages' built-in renderer
    "mcp": ("mcp",),  # MCP servers' tools
    "acp": ("acp", "mcp"),  # `tether acp`: editors' sessions bring MCP servers too
    "board": ("starlette", "uvicorn", "sse_starlette"),  # `tether board`
    "openai-agents": ("agents",),  # tether.integrations.openai_agents
    "pydantic-ai": ("pydantic_ai",),  # tether.integrations.pydantic_ai
}
"""Each extra and the top-level modules it installs."""


def installed(extra: str) -> bool:
    """Whether every module of `extra` can be imported (found, not imported)."""
    return all(importlib.util.find_spec(name) is not None for name in EXTRAS[extra])


def missing(extra: str, what: str) -> str:
    """The line that says `what` needs `extra` and how to install it."""
    return f"{what} needs tether's {extra!r} extra: pip install 'tether[{extra}]'"
