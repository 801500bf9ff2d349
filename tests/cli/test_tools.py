"""`tether tools`: every tool the account would serve — built-ins, each MCP server's tools
or why it did not start — with its stop class and the rules that apply (a tether choice)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from tests.cli._run import tether

pytestmark = pytest.mark.slow


_FIXTURE = Path(__file__).parents[1] / "host" / "mcp_server_fixture.py"


def _config(home: Path, missing: Path) -> None:
    file = home / "config" / "config.toml"
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(
        "[permissions]\n"
        'allow = ["Bash(git status:*)", "mcp__fx"]\n'
        'deny = ["Write"]\n'
        "[mcpServers.fx]\n"
        f"command = {json.dumps(sys.executable)}\n"
        f"args = [{json.dumps(str(_FIXTURE))}]\n"
        "[mcpServers.gone]\n"
        f"command = {json.dumps(str(missing))}\n",
        encoding="utf-8",
    )


def test_tools_lists_builtins_mcp_tools_and_failed_servers(
    tether_home: Path, tmp_path: Path
) -> None:
    """Each tool with its class, source and decision; a server that cannot start is
    named with its reason; the containment in force is shown."""
    _config(tether_home, tmp_path / "no-such-server")
    proc = tether("tools", "--json", "--startup-timeout", "30", timeout=90)
    assert proc.returncode == 0, proc.stderr
    view = json.loads(proc.stdout)
    by_name = {row["name"]: row for row in view["tools"]}
    assert by_name["Read"]["stop_class"] == "read_only"
    assert by_name["Read"]["permission"]["decision"] == "allow"
    assert by_name["Write"]["permission"] == {
        "decision": "deny",
        "rules": [{"kind": "deny", "rule": "Write"}],
        "default": "ask",
    }
    bash = by_name["Bash"]
    assert bash["stop_class"] == "process"
    assert bash["permission"]["decision"] == "depends on input, else ask"
    assert bash["permission"]["rules"] == [
        {"kind": "allow", "rule": "Bash(git status:*)"}
    ]
    fx_tools = view["mcp_servers"]["fx"]["tools"]
    assert fx_tools
    assert all(name.startswith("mcp__fx__") for name in fx_tools)
    first = by_name[fx_tools[0]]
    assert (first["stop_class"], first["source"]) == ("extension", "mcp:fx")
    assert first["permission"]["decision"] == "allow"
    gone = view["mcp_servers"]["gone"]
    assert gone["tools"] == []
    assert "no such file" in gone["problem"].lower()
    assert view["containment"]["kind"] in {"namespace", "subreaper"}


def test_tools_without_config_says_where_it_looked(tether_home: Path) -> None:
    """No config: the built-ins with their class defaults, and the path looked at."""
    proc = tether("tools")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    where = tether_home / "config" / "config.toml"
    assert lines[0] == f"Tools this account serves (no config file at {where})"
    bash = next(line for line in lines if line.split()[:1] == ["Bash"])
    assert bash.split() == ["Bash", "process", "built-in", "ask"]
    assert lines[-1].startswith("Containment of process trees: ")
