"""The wall (S15) around the MCP stdio servers tether starts, attacked from a real server.

The test server (`mcp_server_fixture.py`) offers tools that try to write a path, report
its PID namespace and environment, start a detached process, and reach a loopback port.
Under the `namespace` containment the server may write the session's workspace, its
entry's `writable` paths and its private `TMPDIR` and nothing else; it and everything it
starts end with the session, or with the host when the host is killed.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import psutil
import pytest
from tests.waiting import await_until, wait_until

from tether._config import Config
from tether.host import ToolContext
from tether.host._mcp import McpTool, McpTools

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping

pytestmark = [pytest.mark.rule("S15"), pytest.mark.slow]

FIXTURE = Path(__file__).with_name("mcp_server_fixture.py")


@pytest.fixture(autouse=True)
def namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_CONTAINMENT", "namespace")


def _server(**extra: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(FIXTURE)], **extra}


@asynccontextmanager
async def _open(
    entry: Mapping[str, Any], workspace: Path
) -> AsyncIterator[tuple[McpTools, dict[str, McpTool]]]:
    config = Config(mcp_servers={"fx": dict(entry)})
    with anyio.fail_after(60):
        async with McpTools.open(config, workspace=workspace) as mcp:
            yield mcp, {t.name.removeprefix("mcp__fx__"): t for t in mcp.tools}


async def _call(tools: dict[str, McpTool], ws: Path, name: str, **args: Any) -> str:
    ctx = ToolContext(call_id="c", session_id="s", workspace=ws)
    return await tools[name].run(ctx, args)


def _marked(marker: str) -> list[psutil.Process]:
    return [
        proc
        for proc in psutil.process_iter(["cmdline"])
        if marker in (proc.info["cmdline"] or [])
    ]


@pytest.mark.anyio
async def test_S15_an_mcp_server_writes_its_workspace_and_nothing_else(
    workspace: Path, tmp_path: Path
) -> None:
    """The workspace, a declared path and TMPDIR take writes; tether's folders, the
    stop's and any other file of the account stay as they were."""
    home = Path(os.environ["TETHER_HOME"])
    (home / "config").mkdir(parents=True, exist_ok=True)
    setup = home / "config" / "stop-setup.json"
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("mine")
    declared = tmp_path / "cache"
    entry = _server(writable=[str(declared)])
    async with _open(entry, workspace) as (mcp, tools):
        assert mcp.problems == []
        attempts = {
            "workspace": workspace / "made.txt",
            "declared": declared / "made.txt",
            "setup record": setup,
            "config": home / "config" / "config.toml",
            "state": home / "state" / "store.sqlite",
            "elsewhere": elsewhere,
        }
        said = {
            k: await _call(tools, workspace, "attempt", path=str(p))
            for k, p in attempts.items()
        }
        where = json.loads(await _call(tools, workspace, "where"))
    assert said["workspace"] == "wrote"
    assert said["declared"] == "wrote"
    for name in ("setup record", "config", "state", "elsewhere"):
        assert said[name].startswith("refused E"), (name, said[name])
    assert not setup.exists()
    assert not (home / "config" / "config.toml").exists()
    assert elsewhere.read_text() == "mine"
    assert (workspace / "made.txt").read_text() == "x"
    assert (workspace / "made.txt").stat().st_uid == os.geteuid()
    assert where["pidns"] != os.readlink("/proc/self/ns/pid")
    assert "TMPDIR" in where["env"]


@pytest.mark.anyio
async def test_S15_an_mcp_server_and_what_it_starts_end_with_the_session(
    workspace: Path,
) -> None:
    """A server that outlives its closed stdin, and a process it detaches (its own
    session), are gone once the block ends."""
    marker = f"tether-mcp-{os.urandom(4).hex()}"
    entry = _server(args=[str(FIXTURE), "--linger"])
    async with _open(entry, workspace) as (_, tools):
        await _call(tools, workspace, "spawn", marker=marker)
        assert _marked(marker)
    await await_until(lambda: not _marked(marker), what=f"no process marked {marker}")


def test_S15_an_mcp_server_dies_with_its_host_killed(tmp_path: Path) -> None:
    """SIGKILL to the host: the server's stdin closes, and the tree is killed at once
    whatever it does (the supervisor's parent-death signal)."""
    marker = f"tether-mcp-{os.urandom(4).hex()}"
    script = tmp_path / "host.py"
    script.write_text(
        "import pathlib, sys, anyio\n"
        "from tether._config import Config\n"
        "from tether.host import ToolContext\n"
        "from tether.host._mcp import McpTools\n"
        "async def main():\n"
        f"    entry = {{'command': sys.executable, 'args': [{str(FIXTURE)!r}, '--linger']}}\n"
        "    config = Config(mcp_servers={'fx': entry})\n"
        f"    async with McpTools.open(config, workspace=pathlib.Path({str(tmp_path)!r})) as mcp:\n"
        "        tool = next(t for t in mcp.tools if t.name.endswith('__spawn'))\n"
        "        ctx = ToolContext(call_id='c', session_id='s', workspace=None)\n"
        f"        await tool.run(ctx, {{'marker': {marker!r}}})\n"
        "        print('ready', flush=True)\n"
        "        await anyio.sleep_forever()\n"
        "anyio.run(main)\n"
    )
    with subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, text=True, cwd=tmp_path
    ) as host:
        try:
            assert host.stdout is not None
            assert host.stdout.readline().strip() == "ready"
            assert _marked(marker)
            host.send_signal(signal.SIGKILL)
            host.wait(timeout=10)
            wait_until(
                lambda: not _marked(marker), what=f"no process marked {marker}", bound=5
            )
        finally:
            host.kill()


@pytest.mark.anyio
async def test_S15_an_mcp_server_gets_what_its_entry_names_and_no_session_socket(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A secret the entry's `env` names is passed; a session variable never is."""
    monkeypatch.setenv("TETHER_STORE_URL", "postgresql://u:secret@db/x")
    entry = _server(env={"TETHER_MODEL_KEY": "k", "SSH_AUTH_SOCK": "/tmp/agent.sock"})
    async with _open(entry, workspace) as (_, tools):
        where = json.loads(await _call(tools, workspace, "where"))
    assert "TETHER_MODEL_KEY" in where["env"]
    assert "SSH_AUTH_SOCK" not in where["env"]
    assert "TETHER_STORE_URL" not in where["env"]


@pytest.mark.anyio
async def test_S15_network_none_gives_an_mcp_server_loopback_only(
    workspace: Path,
) -> None:
    """A port listening on the host's loopback is out of reach of `network = "none"`."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        async with _open(_server(network="none"), workspace) as (_, tools):
            walled = await _call(tools, workspace, "reach", port=port)
        async with _open(_server(), workspace) as (_, tools):
            open_ = await _call(tools, workspace, "reach", port=port)
    assert walled.startswith("refused"), walled
    assert open_ == "connected"


@pytest.mark.anyio
async def test_S15_bad_wall_entries_are_refused_with_the_reason(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative `writable`, an unknown `network`, and `network = "none"` under the
    fallback each skip the server with one reason; nothing starts."""
    config = Config(
        mcp_servers={
            "rel": _server(writable=["cache"]),
            "net": _server(network="wifi"),
        }
    )
    async with McpTools.open(config, workspace=workspace) as mcp:
        reasons = {p.server: p.reason for p in mcp.problems}
    assert "absolute" in reasons["rel"]
    assert "network" in reasons["net"]
    monkeypatch.setenv("TETHER_CONTAINMENT", "subreaper")
    config = Config(mcp_servers={"fx": _server(network="none")})
    async with McpTools.open(config, workspace=workspace) as mcp:
        assert mcp.tools == []
        (problem,) = mcp.problems
    assert "namespace containment" in problem.reason
