"""`tether acp`: the Agent Client Protocol server on stdin/stdout."""

from __future__ import annotations

import click

__all__ = ("acp",)


@click.command()
@click.option(
    "--model",
    "model",
    required=True,
    metavar="MODEL",
    help="The model: `openai:<name>` (endpoint from TETHER_MODEL_URL, key from "
    "TETHER_MODEL_KEY or OPENAI_API_KEY) or `scripted:<file>`.",
)
@click.option(
    "--tool",
    "tool_refs",
    multiple=True,
    metavar="MODULE:NAME",
    help="Offer only these tools (`module:name`, or `builtin:Read`), plus MCP servers' "
    "tools; default: the built-in, plugin and MCP tools.",
)
def acp(model: str, tool_refs: tuple[str, ...]) -> None:
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
      "agent_servers": {
        "tether": {"command": "tether", "args": ["acp", "--model", "openai:gpt-4.1-mini"]}
      }
    """
    import anyio

    from .._config import load_config, paths
    from ..acp import serve_stdio
    from ..errors import UsageError
    from ..host._stdio import load_tool_refs
    from ..models import ModelError, model_from_spec

    config = load_config()
    try:
        # Refused at start, in one line, rather than on the editor's first prompt.
        model_from_spec(model, config=config)
    except ModelError as exc:
        raise UsageError(str(exc)) from None
    tools = load_tool_refs(tool_refs) if tool_refs else None
    ledger = paths().state_dir / "sessions.sqlite"
    anyio.run(
        lambda: serve_stdio(model=model, config=config, ledger=ledger, tools=tools)
    )
