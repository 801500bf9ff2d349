"""The runtime's standard tools: built-ins, plugins and MCP servers from the account's config,
through both hosts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tether import ErrorCode, Runtime, StopClass
from tether._config import load_config

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

FIXTURE = Path(__file__).parent.parent / "host" / "mcp_server_fixture.py"


async def test_runtime_with_default_tools_serves_configured_mcp_servers(
    host_kind: str, workspace: Path, tether_home: Path
) -> None:
    """`tools=None` gives the built-ins plus the MCP servers of the config file, named
    `mcp__<server>__<tool>` and EXTENSION; a broken server is reported, not fatal."""
    config_file = tether_home / "config" / "config.toml"
    config_file.parent.mkdir(parents=True)
    config_file.write_text(
        f"""
[mcpServers.fx]
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(FIXTURE))}]

[mcpServers.broken]
command = "/nonexistent/server"
""",
        encoding="utf-8",
    )
    config = load_config()
    assert set(config.mcp_servers) == {"fx", "broken"}
    async with Runtime(
        workspace=workspace,
        host=host_kind,  # type: ignore[arg-type]
        permissions={"allow": ["mcp__fx__*"]},
        guard=False,
        config=config,
    ) as rt:
        names = {t.name for t in rt.tools}
        assert {
            "Read",
            "Glob",
            "Grep",
            "WebFetch",
            "Write",
            "Edit",
            "Bash",
            "GenerateImages",
        } <= names
        if host_kind == "inprocess":
            assert rt.stop_class_of("mcp__fx__echo") is StopClass.EXTENSION
            assert any("broken" in p for p in rt.problems)
        session = rt.session()
        async with session.turn() as turn:
            result = await turn.call("mcp__fx__echo", {"text": "hi", "times": 2})
        assert not result.is_error, result.output
        assert "hi" in result.output
        [record] = session.ledger_calls()
        assert record.tool == "mcp__fx__echo"


async def test_runtime_applies_the_rules_of_the_account_config(
    host_kind: str, workspace: Path, tether_home: Path
) -> None:
    """`permissions=None` means the account's rules: a deny in the config file is
    enforced, and a path outside the workspace asks (no approver: denied)."""
    outside = workspace.parent / "outside.txt"
    outside.write_text("secret\n", encoding="utf-8")
    (workspace / "inside.txt").write_text("fine\n", encoding="utf-8")
    (workspace / "blocked.txt").write_text("no\n", encoding="utf-8")
    config_file = tether_home / "config" / "config.toml"
    config_file.parent.mkdir(parents=True)
    config_file.write_text(
        '[permissions]\ndeny = ["Read(blocked.txt)"]\n', encoding="utf-8"
    )
    from tether.host.tools import default_tools

    tools = [t for t in default_tools() if t.name == "Read"]
    async with Runtime(
        workspace=workspace,
        tools=tools,
        host=host_kind,  # type: ignore[arg-type]
        guard=False,
        config=load_config(),
    ) as rt:
        session = rt.session()
        async with session.turn() as turn:
            inside = await turn.call("Read", {"file_path": "inside.txt"})
            blocked = await turn.call("Read", {"file_path": "blocked.txt"})
            away = await turn.call("Read", {"file_path": str(outside)})
    assert "fine" in inside.output
    assert blocked.code is ErrorCode.PERMISSION_DENIED
    assert away.code is ErrorCode.PERMISSION_DENIED
    assert "secret" not in away.output


async def test_grace_and_abort_bound_come_from_the_account_settings(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without arguments, grace and abort bound are the account's (TETHER_GRACE, ...)."""
    monkeypatch.setenv("TETHER_GRACE", "0.7")
    monkeypatch.setenv("TETHER_ABORT_BOUND", "0.4")
    runtime = Runtime(workspace=workspace, tools=[], guard=False)
    assert (runtime.grace, runtime.abort_bound) == (0.7, 0.4)
    explicit = Runtime(workspace=workspace, tools=[], guard=False, grace=2.0)
    assert explicit.grace == 2.0
