"""`tether tools`: every tool this account would serve, its stop class and its rules.

What a call decides when no rule names it is the broker's own rule
(`tether.host._tool.default_decision`, private to the host): shown here from the
function the broker calls, never a copy of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from ._output import echo_json

if TYPE_CHECKING:
    from .._config import Config
    from ..host import PermissionRules, Tool

__all__ = ("tools",)

_STRENGTH = {"deny": 3, "ask": 2, "allow": 1}


def _permission(rules: PermissionRules, tool: Tool) -> dict[str, Any]:
    """The rules that name `tool`, and what they decide for a call of it.

    A bare rule (`Bash`) decides every call; rules with a specifier (`Bash(git
    status:*)`) decide only the calls they match, so the decision then depends on the
    input and the class default applies to the rest.
    """
    from ..host._tool import default_decision

    named = [
        {"kind": kind, "rule": rule.text, "bare": rule.specifier is None}
        for kind in ("deny", "ask", "allow")
        for rule in getattr(rules, kind)
        if rule.names(tool.name)
    ]
    default = default_decision(tool.stop_class)
    bare = [r["kind"] for r in named if r["bare"]]
    if bare:
        decision = max(bare, key=_STRENGTH.__getitem__)
    elif named:
        decision = f"depends on input, else {default}"
    else:
        decision = default
    return {
        "decision": decision,
        "rules": [{"kind": r["kind"], "rule": r["rule"]} for r in named],
        "default": default,
    }


def _source(tool: Tool) -> str:
    from ..tools import PluginTool

    server = getattr(tool, "server", None)  # an McpTool (the SDK may not be installed)
    if isinstance(server, str):
        return f"mcp:{server}"
    if isinstance(tool, PluginTool):
        return f"plugin:{tool.distribution or tool.entry_point}"
    return "built-in"


async def _gather(startup_timeout: float) -> dict[str, Any]:
    from .. import _extras
    from ..config import load_config
    from ..host import PermissionRules
    from ..host.tools.generate_images import unavailable
    from ..tools import default_tools, load_plugins

    config = load_config()
    rules = PermissionRules.from_config(config)
    served: list[Tool] = list(default_tools(config))
    problems: list[str] = []
    if (why := unavailable(config)) is not None:
        problems.append(why)
    plugins = load_plugins()
    problems += [str(p) for p in plugins.problems]
    taken = {t.name for t in served}
    for plugin_tool in plugins.tools:
        if plugin_tool.name in taken:
            problems.append(f"plugin tool {plugin_tool.name} has a taken name; skipped")
            continue
        served.append(plugin_tool)
        taken.add(plugin_tool.name)
    servers: dict[str, dict[str, Any]] = {
        str(name): {"tools": [], "problem": None} for name in config.mcp_servers
    }
    if servers and not _extras.installed("mcp"):
        for entry in servers.values():
            entry["problem"] = _extras.missing("mcp", "an MCP server")
    elif servers:
        await _gather_mcp(config, startup_timeout, servers, served)
    rows = [
        {
            "name": t.name,
            "stop_class": t.stop_class.value,
            "source": _source(t),
            "permission": _permission(rules, t),
        }
        for t in served
    ]
    return {
        "config": str(config.source) if config.source else None,
        "config_looked_at": str(config.looked_at),
        "tools": rows,
        "mcp_servers": servers,
        "problems": problems,
        "containment": _containment(),
    }


async def _gather_mcp(
    config: Config,
    startup_timeout: float,
    servers: dict[str, dict[str, Any]],
    served: list[Tool],
) -> None:
    """Start the configured MCP servers; note each one's tools or problem."""
    from ..tools import McpTools

    async with McpTools.open(config, startup_timeout=startup_timeout) as mcp:
        for problem in mcp.problems:
            servers.setdefault(problem.server, {"tools": [], "problem": None})
            servers[problem.server]["problem"] = problem.reason
        for mcp_tool in mcp.tools:
            servers.setdefault(mcp_tool.server, {"tools": [], "problem": None})
            servers[mcp_tool.server]["tools"].append(mcp_tool.name)
            served.append(mcp_tool)


def _containment() -> dict[str, str] | None:
    from ..errors import UsageError
    from ..host import containment

    try:
        found = containment()
    except UsageError as exc:
        return {"kind": "refused", "reason": str(exc)}
    return {"kind": found.kind, "reason": found.reason}


def _show(view: dict[str, Any]) -> None:
    where = view["config"] or f"no config file at {view['config_looked_at']}"
    click.echo(f"Tools this account serves ({where})")
    width = max(len(row["name"]) for row in view["tools"])
    for row in view["tools"]:
        perm = row["permission"]
        rules = ", ".join(f"{r['kind']} {r['rule']}" for r in perm["rules"])
        click.echo(
            f"  {row['name']:<{width}}  {row['stop_class']:<9}  {row['source']:<12}  "
            f"{perm['decision']}" + (f" ({rules})" if rules else "")
        )
    for name, server in view["mcp_servers"].items():
        if server["problem"] is not None:
            click.echo(f"MCP server {name!r} did not start: {server['problem']}")
        else:
            click.echo(f"MCP server {name!r}: {len(server['tools'])} tools")
    for problem in view["problems"]:
        click.echo(problem)
    found = view["containment"]
    click.echo(f"Containment of process trees: {found['kind']} ({found['reason']})")


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option(
    "--startup-timeout",
    type=float,
    default=10.0,
    show_default=True,
    help="Seconds each MCP server has to start.",
)
def tools(as_json: bool, startup_timeout: float) -> None:
    """List every tool this account would serve, with its stop class and rules.

    Built-in tools, plugin tools (entry-point group tether.tools) and the tools of each
    configured MCP server, which are started to ask them; a server that cannot start
    is listed with the reason. For each tool: its stop class, where it comes from, the
    permission rules that name it and what they decide (rules with a specifier decide
    only the calls they match). Reads the account's config (TETHER_CONFIG, TETHER_HOME).

    \b
    Examples:
      tether tools
      tether tools --json | jq '.tools[] | select(.stop_class == "process")'
    """
    import anyio

    view = anyio.run(_gather, startup_timeout)
    if as_json:
        echo_json(view)
    else:
        _show(view)
