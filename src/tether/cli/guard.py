"""`tether guard`: the stop guard as a hook for other agents (Claude Code PreToolUse)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

import click

__all__ = ("guard",)


@click.command(
    "guard",
    epilog="""\b
Examples:
  tether guard --print-hook-config > tether-hook.json
  echo '{"tool_name": "Bash", "tool_input": {"command": "ls"}}' | tether guard --claude-hook

\b
The `.claude/settings.json` entry that --print-hook-config prints (matcher "*": every
tool, MCP tools included), with the absolute path of this `tether`:
  {
    "hooks": {
      "PreToolUse": [
        {
          "matcher": "*",
          "hooks": [
            {"type": "command",
             "command": "'/path/to/tether' guard --claude-hook || exit 2"}
          ]
        }
      ]
    },
    "sandbox": {"enabled": true, "allowUnsandboxedCommands": false,
                "filesystem": {"denyWrite": ["//stop/dir", ...]}}
  }
On Linux, Claude Code's sandbox needs bubblewrap and socat installed; without them it
turns itself off, saying so only in its own output.
""",
)
@click.option(
    "--claude-hook",
    "claude_hook",
    is_flag=True,
    help="Read one Claude Code PreToolUse event (JSON) on stdin and judge it.",
)
@click.option(
    "--print-hook-config",
    "print_config",
    is_flag=True,
    help="Print the Claude Code settings (hook and sandbox) that run this guard.",
)
def guard(claude_hook: bool, print_config: bool) -> None:
    """Refuse an agent's tool call that would set, lift or tamper with a stop.

    With --claude-hook, reads a PreToolUse event on stdin (`tool_name`, `tool_input`,
    `cwd`, ...). Allowed: exit 0, no output. Refused: exit 2 with the reason on stderr,
    which Claude Code shows to the model. Empty or malformed input, or an event of
    another kind, also exits 2 with a message: the hook fails closed.

    With --print-hook-config, prints the JSON to merge into `.claude/settings.json`:
    the hook, by the absolute path of this `tether` (`|| exit 2` blocks every call
    if that program is ever missing), and the sandbox's `denyWrite` on the stop
    directories and the setup record, a kernel wall for the commands the sandbox runs.

    The guard holds against an agent acting by mistake; against one acting on purpose
    only a separate operating-system account binds.
    """
    if claude_hook == print_config:
        raise click.UsageError(
            "say what to do: tether guard --claude-hook (judge one event on stdin) "
            "or tether guard --print-hook-config"
        )
    if print_config:
        click.echo(json.dumps(hook_config(_protected_paths()), indent=2))
        return
    from ._hook import run_claude_hook

    run_claude_hook()


def hook_config(protected: list[Path]) -> dict[str, Any]:
    """The Claude Code settings that run this guard before every tool call."""
    command = " ".join(shlex.quote(word) for word in _tether_argv())
    hook = {"type": "command", "command": f"{command} guard --claude-hook || exit 2"}
    # Claude Code's sandbox paths: `//` starts at the root (`/x` is relative to the
    # settings file).
    deny = ["/" + str(path) for path in dict.fromkeys(protected)]
    return {
        "hooks": {"PreToolUse": [{"matcher": "*", "hooks": [hook]}]},
        # Without `allowUnsandboxedCommands: false` the model may set
        # `dangerouslyDisableSandbox` on a command and run it outside the sandbox.
        "sandbox": {
            "enabled": True,
            "allowUnsandboxedCommands": False,
            "filesystem": {"denyWrite": deny},
        },
    }


def _tether_argv() -> list[str]:
    """An absolute command that runs this installation of tether."""
    beside = Path(sys.executable).parent / "tether"
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside.absolute())]
    found = shutil.which("tether")
    if found is not None:
        return [os.path.abspath(found)]
    return [os.path.abspath(sys.executable), "-m", "tether"]


def _protected_paths() -> list[Path]:
    """The stop directories and the setup record of this account."""
    from tether.stop import protected_paths

    return protected_paths()
