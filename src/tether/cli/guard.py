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

_MAX_EVENT_BYTES = 4 * 1024 * 1024
_BLOCK = 2
"""Claude Code blocks a PreToolUse call only on exit code 2; any other failure lets the
call through, so every failure here exits 2 (fail closed)."""


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
    "sandbox": {"enabled": true, "filesystem": {"denyWrite": ["//stop/dir", ...]}}
  }
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
    try:
        reason = _judge_claude_event(sys.stdin.buffer.read(_MAX_EVENT_BYTES + 1))
    except Exception as exc:  # fail closed: exit 1 would let the call through
        reason = f"tether guard failed, so the call is blocked: {exc!r}"
    if reason is not None:
        click.echo(reason, err=True)
        # Not `ctx.exit()`: under `cli.main(standalone_mode=False)` click returns that
        # code instead of exiting, and a hook that exits 0 lets the call through.
        raise SystemExit(_BLOCK)


def _judge_claude_event(raw: bytes) -> str | None:
    """Return why the event's call is blocked, or None when it may go on."""
    from tether.stop._guard import guard_tool_call

    if len(raw) > _MAX_EVENT_BYTES:
        return "tether guard: the hook event is larger than 4 MiB; blocked"
    try:
        event = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return f"tether guard: the hook input is not JSON ({exc}); blocked"
    if not isinstance(event, dict):
        return "tether guard: the hook input is not a JSON object; blocked"
    name = event.get("hook_event_name", "PreToolUse")
    if name != "PreToolUse":
        return f"tether guard: expected a PreToolUse event, got {name!r}; blocked"
    tool_name = event.get("tool_name")
    tool_input = event.get("tool_input")
    cwd = event.get("cwd")
    if not isinstance(tool_name, str) or not tool_name:
        return "tether guard: the event has no tool_name string; blocked"
    if not isinstance(tool_input, dict):
        return "tether guard: the event has no tool_input object; blocked"
    if cwd is not None and not isinstance(cwd, str):
        return "tether guard: the event's cwd is not a string; blocked"
    verdict = guard_tool_call(
        tool_name,
        tool_input,
        cwd=Path(cwd) if cwd else Path.cwd(),
        protected=_protected_paths(),
    )
    if verdict.allowed:
        return None
    return f"tether guard refused this {tool_name} call: {verdict.reason}"


def hook_config(protected: list[Path]) -> dict[str, Any]:
    """The Claude Code settings that run this guard before every tool call."""
    command = " ".join(shlex.quote(word) for word in _tether_argv())
    hook = {"type": "command", "command": f"{command} guard --claude-hook || exit 2"}
    # Claude Code's sandbox paths: `//` starts at the root (`/x` is relative to the
    # settings file).
    deny = ["/" + str(path) for path in dict.fromkeys(protected)]
    return {
        "hooks": {"PreToolUse": [{"matcher": "*", "hooks": [hook]}]},
        "sandbox": {"enabled": True, "filesystem": {"denyWrite": deny}},
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
