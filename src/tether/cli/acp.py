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
def acp(model: str) -> None:
    """Serve tether sessions to an editor over ACP (JSON-RPC 2.0 on stdin/stdout).

    The editor starts this command and speaks to it; it is not meant to be typed.
    Sessions are kept in the account's ledger, so `session/load` reopens them.

    \b
    Examples:
      tether acp --model openai:gpt-4.1-mini
      tether acp --model scripted:moves.jsonl
    \b
    In Zed's settings.json:
      "agent_servers": {
        "tether": {"command": "tether", "args": ["acp", "--model", "openai:gpt-4.1-mini"]}
      }
    """
    import anyio

    from ..acp import serve_stdio

    anyio.run(lambda: serve_stdio(model=model))
