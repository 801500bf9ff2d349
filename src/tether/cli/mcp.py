"""`tether mcp serve`: tether's tools, stop-classed and walled, as an MCP server.

On stdio by default; `--http` serves streamable HTTP on loopback, behind a token.
`tether mcp login / logout / list` (OAuth at the person's servers) are in `_mcpauth.py`.

`--tool` references load as `tether acp` loads them (`tether.host._stdio.load_tool_refs`).
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from ._mcpauth import list_servers, login, logout
from ._options import seconds_option

__all__ = ("mcp",)


@click.group()
def mcp() -> None:
    """Serve tether's tools over MCP; authorise tether at MCP servers (OAuth).

    \b
    Examples:
      tether mcp serve                      every tool, over stdio
      tether mcp serve --http               over HTTP on http://127.0.0.1:8766/mcp
      tether mcp serve --tool builtin:Read  one built-in tool only
      tether mcp list                       the configured servers, authorised or not
      tether mcp login docs                 authorise tether at the server `docs`
      tether mcp logout docs                remove its tokens
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
@seconds_option(
    "--grace",
    default=None,
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
@click.option(
    "--http",
    "http",
    is_flag=True,
    help="Serve streamable HTTP on loopback instead of stdio, until Ctrl-C.",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8766,
    show_default=True,
    help="With --http: the loopback port (0: any free one).",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="With --http: the loopback address (127.0.0.1 or ::1; no other).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="With --http: print the URL and token as one JSON line.",
)
def serve(
    tool_refs: tuple[str, ...],
    workspace: Path | None,
    grace: float | None,
    ledger_file: Path | None,
    http: bool,
    port: int,
    host: str,
    as_json: bool,
) -> None:
    """Serve tether's tools as an MCP server on stdin/stdout (or HTTP, `--http`).

    Each call is a tether call: the account's permission rules (an `ask` rule is a
    refusal: no one is there to ask), the guard, the wall and the ledger. A client's
    cancel stops the call as tether's stop does: a read-only call ends at once, a
    process gets its grace window and its whole tree is ended, a started write runs to
    its end. MCP answers no cancelled request, so the next call's result and
    `tether ledger` say what really happened. Under the person's stop (`tether stop`)
    no call starts and the refusal says why. Over stdio the client starts this
    command.

    With --http it serves streamable HTTP at http://127.0.0.1:PORT/mcp until Ctrl-C:
    only this machine can connect, and each request must carry the token printed at
    start (`Authorization: Bearer TOKEN`, new at each start). A 2026-07-28 client
    cancels a call by closing its request's stream and may take each call as a task
    (the MCP tasks extension) whose status tells what really happened.

    \b
    Examples:
      tether mcp serve
      tether mcp serve --tool builtin:Read --tool builtin:Grep
      tether mcp serve --grace 2 --workspace ~/src/project
      tether mcp serve --http --port 0 --json   any free port; URL and token as JSON
    \b
    In an MCP client's configuration (Claude Code's .mcp.json and others):
      "mcpServers": {"tether": {"command": "tether", "args": ["mcp", "serve"]}}
      "mcpServers": {"tether": {"type": "http", "url": "http://127.0.0.1:8766/mcp",
                     "headers": {"Authorization": "Bearer TOKEN"}}}
    Claude Code kills its stdio servers about 0.5 s after an interrupt: give it
    `"args": ["mcp", "serve", "--grace", "0.3"]` so a stopped tree's grace window
    ends first (docs/mcp-serve.md, "With Claude Code").
    """
    from .. import _extras
    from ..errors import StoreError, UsageError

    if not _extras.installed("mcp"):
        raise UsageError(_extras.missing("mcp", "tether mcp serve"))
    if http:
        from .._loopback import listen_loopback, loopback_host

        sock = listen_loopback(
            port, loopback_host(host, what="tether mcp serve --http")
        )

    import anyio

    from .._config import load_config
    from .._mcpserve import serve_stdio
    from .._mcpserve._elicit import ElicitRelay
    from .._mcpserve._server import freeze_heap
    from ..host._stdio import load_tool_refs
    from ..runtime import Runtime
    from ..stop import StopStore, StopWatch
    from ._output import echo_json
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
        # A fronted server's question goes to the client whose call it belongs to.
        elicitor=ElicitRelay(),
    )
    freeze_heap(http=http)
    if not http:
        anyio.run(lambda: serve_stdio(runtime, watch=watch, hold=hold))
        return
    from .._mcpserve import McpHttp

    async def run() -> None:
        server = McpHttp(runtime, sock, watch=watch, hold=hold, signals=True)
        async with anyio.create_task_group() as tg:
            await tg.start(server.serve)
            if as_json:
                echo_json(
                    {"url": server.url, "token": server.token, "pid": os.getpid()}
                )
            else:
                click.echo(f"tether mcp serve: {server.url}")
                click.echo(f"Authorization: Bearer {server.token}")
            click.echo("serving over HTTP on loopback; Ctrl-C to end it", err=True)

    anyio.run(run)


mcp.add_command(login)
mcp.add_command(logout)
mcp.add_command(list_servers)
