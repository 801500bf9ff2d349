"""`tether permissions`: the permission rules in force, and what they decide for a call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..errors import UsageError
from ..host import StopClass, Tool, ToolContext
from ._output import echo_json

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ("permissions",)

# What `--check` assumes of a built-in tool when the tool set cannot be loaded.
_BUILTIN: dict[str, tuple[str, str | None]] = {
    "Read": ("read_only", "file_path"),
    "Glob": ("read_only", "path"),
    "Grep": ("read_only", "path"),
    "WebFetch": ("read_only", "url"),
    "Write": ("mutating", "file_path"),
    "Edit": ("mutating", "file_path"),
    "Bash": ("process", "command"),
    "GenerateImages": ("process", "prompt"),
}


class _StandIn(Tool):
    """A tool known by name, stop class and subject field only; never run."""

    def __init__(self, name: str, stop_class: StopClass, field: str | None) -> None:
        self.name = name
        self.stop_class = stop_class
        self.subject_field = field

    def input_schema(self) -> dict[str, Any]:
        return {"type": "object"}

    def validate(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        return dict(raw)

    async def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> str:
        raise UsageError(f"{self.name} is a stand-in for --check and cannot run")


def _find_tool(name: str) -> Tool:
    """Return the tool called `name`, or a stand-in with its class and subject field."""
    import importlib

    from ..tools import load_plugins

    known: dict[str, Tool] = {}
    try:
        module = importlib.import_module("tether.host.tools")
        known.update({t.name: t for t in module.default_tools()})
    except (ImportError, AttributeError, TypeError):
        pass  # the stand-ins below still know the built-ins' classes and subjects
    for plugin in load_plugins().tools:
        known.setdefault(plugin.name, plugin)
    if name in known:
        return known[name]
    if name in _BUILTIN:
        stop_class, field = _BUILTIN[name]
        return _StandIn(name, StopClass(stop_class), field)
    if name.startswith("mcp__"):
        return _StandIn(name, StopClass.EXTENSION, None)
    choices = ", ".join(sorted({*known, *_BUILTIN}))
    raise UsageError(
        f"unknown tool {name!r}; known tools: {choices}, or mcp__<server>__<tool>"
    )


def _human(rules_view: dict[str, Any], looked_at: Path | None) -> str:
    source = rules_view["source"]
    lines = [
        f"Rules from {source}"
        if source
        else f"No config file at {looked_at}: defaults only"
    ]
    for kind in ("deny", "ask", "allow"):
        lines.append(f"{kind}:")
        lines.extend(f"  {rule}" for rule in rules_view[kind] or ["(none)"])
    lines.append("when no rule matches:")
    for stop_class, decision in rules_view["defaults"].items():
        lines.append(f"  {stop_class:<10} {decision}")
    lines.append(
        "A path outside the workspace is at least ask unless an allow rule names it."
    )
    lines.append(
        "A URL on a loopback, link-local or private address is at least ask unless "
        "an allow rule names its host."
    )
    return "\n".join(lines)


@click.command(
    "permissions",
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.option(
    "--check",
    "check_tool",
    metavar="TOOL",
    help="Show the decision for a hypothetical call of TOOL with INPUT_JSON.",
)
@click.option(
    "--workspace",
    type=click.Path(file_okay=False, path_type=Path),
    default=".",
    show_default=True,
    help="Workspace the call's paths are judged against (with --check).",
)
@click.argument("input_json", required=False, metavar="[INPUT_JSON]")
def permissions(
    as_json: bool, check_tool: str | None, workspace: Path, input_json: str | None
) -> None:
    """Show the permission rules in force, or what they decide for one call.

    With --check, the input is first checked against the tool's own schema, and the
    answer names the rule that decided (or the default for the tool's stop class).

    Rules come from the [permissions] table of the config file
    (`$TETHER_HOME/config/config.toml`; the TETHER_CONFIG variable names another
    file). Deny wins over ask, ask over allow; with no matching rule READ_ONLY
    tools are allowed and every other class asks.

    \b
    Examples:
      tether permissions
      tether permissions --json
      tether permissions --check Bash '{"command": "git status; rm -rf x"}'
      tether permissions --check Write '{"file_path": "src/app.py"}' --workspace .
      tether permissions --check mcp__time__get_current_time

    \b
    Config:
      [permissions]
      allow = ["Bash(git status:*)", "Write(src/**)", "mcp__time__*"]
      ask   = ["Bash(git push:*)"]
      deny  = ["Read(~/.ssh/**)", "WebFetch(domain:example.com)"]
    """
    from .._config import load_config
    from ..host import PermissionRules

    config = load_config()
    rules = PermissionRules.from_config(config)
    view = rules.to_json()
    if check_tool is None:
        if input_json is not None:
            raise UsageError("INPUT_JSON goes with --check TOOL")
        echo_json(view) if as_json else click.echo(_human(view, config.looked_at))
        return
    try:
        args = json.loads(input_json) if input_json else {}
    except json.JSONDecodeError as exc:
        raise UsageError(f"INPUT_JSON is not valid JSON: {exc}") from None
    if not isinstance(args, dict):
        raise UsageError("INPUT_JSON must be a JSON object")
    tool = _find_tool(check_tool)
    _check_input(tool, args)
    ws = workspace.resolve()
    why = rules.explain(tool, args, workspace=ws)
    if as_json:
        out = {
            "tool": tool.name,
            "input": args,
            "stop_class": tool.stop_class.value,
            "workspace": str(ws),
            "decision": why.decision,
            "rules": list(why.rules),
            "why": why.why,
        }
        echo_json(out)
    else:
        shown = json.dumps(args, ensure_ascii=False)
        by = f"{why.why} {', '.join(why.rules)}" if why.rules else why.why
        click.echo(
            f"{tool.name} {shown} ({tool.stop_class.value}): {why.decision} ({by})"
        )


def _check_input(tool: Tool, args: dict[str, Any]) -> None:
    """Refuse an input the tool itself would refuse: its decision would mislead.

    Raises:
        UsageError: the input does not fit the tool's schema; the message names the
            field and the fields the tool takes.
    """
    from ..errors import InvalidInput

    try:
        tool.validate(args)
    except InvalidInput as exc:
        fields = sorted(tool.input_schema().get("properties", {}))
        takes = f"; {tool.name} takes {', '.join(fields)}" if fields else ""
        raise UsageError(
            f"INPUT_JSON does not fit {tool.name}'s input: {exc}{takes}"
        ) from None
