"""`tether mcp serve`: tether's tools, stop-classed and walled, as an MCP server on stdio.

`--tool` references load as `tether acp` loads them (`tether.host._stdio.load_tool_refs`).
"""

from __future__ import annotations

from pathlib import Path

import click

__all__ = ("mcp",)


@click.group()
def mcp() -> None:
    """Serve tether's tools to other agents over MCP.

    \b
    Examples:
      tether mcp serve                      every tool, over stdio
      tether mcp serve --tool builtin:Read  one built-in tool only
    """


@mcp.command()
@click.option(
    "--tool",
    "tool_refs",
    multiple=True,
    metavar="MODULE:NAME",
    help="Serve only these tools (`module:name`, or `builtin:Read`); default: the "
    "built-in, plugin and configured MCP servers' tools.",
)
@click.option(
    "--workspace",
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    default=None,
    help="The folder the calls work in; default: the current directory.",
)
@click.option(
    "--grace",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="SECONDS",
    help="A stopped process's grace window; default: the account's (TETHER_GRACE).",
)
@click.option(
    "--ledger",
    "ledger_file",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="The ledger file calls are kept in; default: the account's "
    "(`tether ledger` reads it).",
)
def serve(
    tool_refs: tuple[str, ...],
    workspace: Path | None,
    grace: float | None,
    ledger_file: Path | None,
) -> None:
    """Serve tether's tools as an MCP server on stdin/stdout.

    Each call is a tether call: the account's permission rules (an `ask` rule is a
    refusal: no one is there to ask), the guard, the wall and the ledger. A client's
    cancel stops the call as tether's stop does: a read-only call ends at once, a
    process gets its grace window and its whole tree is ended, a started write runs to
    its end. MCP answers no cancelled request, so the next call's result and
    `tether ledger` say what really happened. Under the person's stop (`tether stop`)
    no call starts and the refusal says why. The client starts this command.

    \b
    Examples:
      tether mcp serve
      tether mcp serve --tool builtin:Read --tool builtin:Grep
      tether mcp serve --grace 2 --workspace ~/src/project
    \b
    In an MCP client's configuration (Claude Code's .mcp.json and others):
      "mcpServers": {"tether": {"command": "tether", "args": ["mcp", "serve"]}}
    """
    from .. import _extras
    from ..errors import StoreError, UsageError

    if not _extras.installed("mcp"):
        raise UsageError(_extras.missing("mcp", "tether mcp serve"))

    import anyio

    from .._config import load_config
    from .._mcpserve import serve_stdio
    from ..host._stdio import load_tool_refs
    from ..runtime import Runtime
    from ..stop import StopStore, StopWatch
    from .chat import ledger_path

    config = load_config()
    tools = load_tool_refs(tool_refs) if tool_refs else None
    watch: StopWatch | None = None
    hold: str | None = None
    try:
        watch = StopStore.from_setup().watch()
    except (
        StoreError
    ) as exc:  # every call is refused with this, the server still answers
        hold = str(exc)
    runtime = Runtime(
        workspace=workspace if workspace is not None else Path.cwd(),
        tools=tools,
        grace=grace,
        ledger=ledger_file if ledger_file is not None else ledger_path(),
        config=config,
    )
    anyio.run(lambda: serve_stdio(runtime, watch=watch, hold=hold))
