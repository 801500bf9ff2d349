"""`tether host --stdio`: the out-of-process tool host.

It serves through `tether.host._stdio` (`serve_stdio`, `load_tool_refs`), private to
the host: the wire between a runtime and this process is tether's own, and a library
user reaches it as `Runtime(host="stdio")`, which starts this command.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ._options import seconds_option

if TYPE_CHECKING:
    from .._config import Config

__all__ = ("host",)


@click.command()
@click.option(
    "--stdio", is_flag=True, required=True, help="Speak JSON-RPC 2.0 on stdin/stdout."
)
@click.option(
    "--workspace",
    type=click.Path(file_okay=False, path_type=Path),
    default=".",
    show_default=True,
    help="Directory the tools work in.",
)
@click.option(
    "--tool",
    "tool_refs",
    multiple=True,
    metavar="MODULE:NAME",
    help="A tool to serve (`module:name`, or `builtin:Read`); default: the built-in tools.",
)
@click.option(
    "--rules",
    metavar="JSON",
    help='Permission rules: {"allow": [...], "ask": [...], "deny": [...]}.',
)
@click.option(
    "--ask-runtime",
    is_flag=True,
    help="Send `ask` decisions to the runtime's approver.",
)
@click.option(
    "--no-guard", is_flag=True, help="Do not apply the stop guard (tests only)."
)
@click.option(
    "--max-concurrent",
    type=click.IntRange(min=1),
    default=16,
    show_default=True,
    help="Calls that may run at once; the others queue.",
)
@seconds_option(
    "--tombstone-ttl",
    default=60.0,
    help="Seconds an abort that arrived before its call is kept.",
)
@seconds_option(
    "--eof-drain",
    default=5.0,
    zero=True,
    help="Seconds calls in flight may take to report after stdin closes; a started"
    " write or extension is waited for beyond them.",
)
def host(
    stdio: bool,
    workspace: Path,
    tool_refs: tuple[str, ...],
    rules: str | None,
    ask_runtime: bool,
    no_guard: bool,
    max_concurrent: int,
    tombstone_ttl: float,
    eof_drain: float,
) -> None:
    """Serve tool calls over JSON-RPC 2.0 on stdin/stdout (one JSON object per line).

    Methods: `tools.execute`, `tools.abort` and `tools.kill` (runtime to host); notifications
    `tools.progress` and `tools.result` (host to runtime); `permission.request` (host to
    runtime, with --ask-runtime). The runtime starts this for `Runtime(host="stdio")`.

    \b
    Examples:
      tether host --stdio
      tether host --stdio --workspace ~/proj --tool builtin:Read --tool builtin:Grep
      echo '{"jsonrpc":"2.0","id":1,"method":"tools.execute","params":{"session_id":"s",
        "call_id":"c1","tool":"Read","input":{"file_path":"README.md"}}}' | tether host --stdio
    """
    import anyio

    from .._config import load_config
    from ..errors import UsageError
    from ..host._stdio import load_tool_refs, serve_stdio
    from ..host.tools import open_mcp_tools, standard_tools

    config = load_config()
    problems: list[str] = []
    tools = load_tool_refs(tool_refs) if tool_refs else standard_tools(config, problems)
    from ..host import PermissionRules

    rule_set = PermissionRules.from_config(config)
    if rules is not None:
        try:
            lists = json.loads(rules)
        except ValueError as exc:
            raise UsageError(f"--rules is not JSON: {exc}") from None
        if not isinstance(lists, dict):
            raise UsageError(
                '--rules takes an object: {"allow": [...], "ask": [...], "deny": [...]}'
            )
        rule_set = PermissionRules.from_lists(
            allow=lists.get("allow", []),
            ask=lists.get("ask", []),
            deny=lists.get("deny", []),
        )

    root = workspace.resolve()

    async def serve() -> None:
        async with open_mcp_tools(
            config if not tool_refs else _no_mcp(config), problems, workspace=root
        ) as mcp:
            for problem in problems:
                click.echo(f"tether host: skipped {problem}", err=True)
            await serve_stdio(
                [*tools, *mcp],
                workspace=root,
                rules=rule_set,
                ask_runtime=ask_runtime,
                guard=not no_guard,
                max_concurrent=max_concurrent,
                tombstone_ttl=tombstone_ttl,
                eof_drain=eof_drain,
            )

    anyio.run(serve)


def _no_mcp(config: Config) -> Config:
    import attrs

    return attrs.evolve(config, mcp_servers={})
