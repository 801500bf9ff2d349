"""`tether acp`: the Agent Client Protocol server on stdin/stdout.

`--tool` references load as `tether host --stdio` loads them (`tether.host._stdio.
load_tool_refs`, private to the host: both commands take the same `module:name` form,
and no library caller needs it).
"""

from __future__ import annotations

import click

__all__ = ("acp",)


@click.command()
@click.option(
    "--model",
    "model_spec",
    metavar="SPEC",
    help="openai:<model> (endpoint from TETHER_MODEL_URL, key from TETHER_MODEL_KEY)"
    " or scripted:<file>; default: name in the [model] table of the config file.",
)
@click.option(
    "--tool",
    "tool_refs",
    multiple=True,
    metavar="MODULE:NAME",
    help="Offer only these tools (`module:name`, or `builtin:Read`), plus MCP servers' "
    "tools; default: the built-in, plugin and MCP tools.",
)
def acp(model_spec: str | None, tool_refs: tuple[str, ...]) -> None:
    """Serve tether sessions to an editor over ACP (JSON-RPC 2.0 on stdin/stdout).

    The editor starts this command and speaks to it; it is not meant to be typed.
    Sessions are kept in the account's ledger, so `session/load` reopens them.

    \b
    Examples:
      tether acp --model openai:gpt-4.1-mini
      tether acp --model scripted:moves.jsonl
      tether acp --model openai:gpt-4.1-mini --tool builtin:Read --tool builtin:Grep
    \b
    In Zed's settings.json:
      "agent_servers": {"tether": {"type": "custom", "command": "tether",
        "args": ["acp", "--model", "openai:gpt-4.1-mini"]}}
    """
    from .. import _extras
    from ..acp._early import answer_initialize
    from ..errors import UsageError

    if not _extras.installed("acp"):  # before the editor is told it has an agent
        raise UsageError(_extras.missing("acp", "tether acp"))

    # The editor waits for this answer before it shows the agent (spec 05: 0.3 s);
    # the SDK, the models and the tools load after it.
    received, capabilities = answer_initialize(0, 1)

    import anyio

    from .._config import load_config
    from ..acp import serve_stdio
    from ..host._stdio import load_tool_refs
    from .chat import ledger_path

    config = load_config()
    # Without a usable model the editor still gets an agent that answers: `session/new`
    # says how to configure one (an editor shows that; it hides a dead process's stderr).
    model = model_spec or config.model or None
    tools = load_tool_refs(tool_refs) if tool_refs else None
    anyio.run(
        lambda: serve_stdio(
            model=model,
            config=config,
            ledger=ledger_path(),
            tools=tools,
            received=received,
            client_capabilities=capabilities,
        )
    )
