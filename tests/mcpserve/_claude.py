"""The real Claude Code CLI as the MCP client of `tether mcp serve`, against a stub model.

Claude Code (`claude -p`, stream-json) is given tether as its only MCP server
(`--mcp-config`, `--strict-mcp-config`) and talks to a stub Anthropic Messages server on
127.0.0.1 whose script plays a model that calls tether's tools (`mcp__tether__Bash`,
...). In `-p` mode Claude Code does not wait for its MCP servers before the first model
request: the model first calls Claude Code's `WaitForMcpServers` when tether's tools are
not yet in its tool list, as a real model is told to.

Interrupted (SIGINT to the CLI), Claude Code 2.1 stops its stdio MCP servers itself: it
sends SIGINT to the server, `notifications/cancelled` for the call in flight, SIGTERM,
and SIGKILL about half a second after the interrupt.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
from tests.runs.presets_support import serving
from tests.waiting import wait_until

from tether.testing._agent_server import Move, tool_results

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tether.testing._agent_server import AgentServer, Script

__all__ = (
    "ROOT",
    "Caller",
    "claude_code",
    "ended",
    "served_by",
    "start_claude",
    "tether_home_allowing",
)

ROOT = Path(__file__).resolve().parents[2]
"""The repository: the server imports the test tools below from it."""

PREFIX = "mcp__tether__"


class Caller:
    """A model that waits for tether's tools, makes `calls` one after another (each
    `(tool, input)`, the tool named as tether serves it), then ends its turn."""

    def __init__(self, *calls: tuple[str, dict[str, Any]]) -> None:
        self.calls = calls

    def __call__(self, body: dict[str, Any]) -> Move:
        if not body.get("tools"):
            return Move(text="A title")  # a side request (the session's title)
        names = {t.get("name") for t in body["tools"] if isinstance(t, dict)}
        if not any(str(n).startswith(PREFIX) for n in names):
            return Move(calls=(("WaitForMcpServers", {}),))
        done = [r for r in tool_results(body) if not r.startswith("ready:")]
        if len(done) < len(self.calls):
            tool, args = self.calls[len(done)]
            return Move(calls=((PREFIX + tool, args),))
        return Move(text="done")


def tether_home_allowing(home: Path, *tools: str) -> dict[str, str]:
    """An account (TETHER_HOME) whose rules allow `tools` unattended."""
    config = home / "config" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    allow = ", ".join(json.dumps(t) for t in tools)
    config.write_text(f"[permissions]\nallow = [{allow}]\n", encoding="utf-8")
    return {"TETHER_HOME": str(home)}


def start_claude(
    root: Path,
    model: AgentServer,
    *,
    ledger: Path,
    grace: float,
    tools: tuple[str, ...],
    account: dict[str, str],
    allowed: tuple[str, ...] | None = None,
) -> subprocess.Popen[str]:
    """`claude -p` in `root/ws` with tether (this interpreter) as its MCP server.

    `tools`: the server's `--tool` references; `allowed`: the tether tools Claude Code
    may call without asking (`--allowedTools`), all of them by default. The CLI gets a
    home of its own and the stub's URL; its stream-json events go to `root/claude.jsonl`.
    """
    workspace = root / "ws"
    workspace.mkdir(parents=True, exist_ok=True)
    home = root / "claude-home"
    home.mkdir(exist_ok=True)
    argv = ["-m", "tether", "mcp", "serve", "--grace", str(grace)]
    argv += ["--ledger", str(ledger)]
    for ref in tools:
        argv += ["--tool", ref]
    server_env = account | {"PYTHONPATH": str(ROOT)}
    entry = {"command": sys.executable, "args": argv, "env": server_env}
    config = {"mcpServers": {"tether": entry}}
    (root / "mcp.json").write_text(json.dumps(config), encoding="utf-8")
    names = allowed if allowed is not None else tuple(r.split(":")[-1] for r in tools)
    env = {k: v for k, v in os.environ.items() if k != "CLAUDECODE"}
    env |= {
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": model.url,
        "ANTHROPIC_API_KEY": "sk-test",
    }
    command = ["claude", "-p", "Use tether's tools.", "--mcp-config"]
    command += [str(root / "mcp.json"), "--strict-mcp-config"]
    command += ["--output-format", "stream-json", "--verbose"]
    command += ["--allowedTools", ",".join(PREFIX + n for n in names)]
    with (root / "claude.jsonl").open("w") as out:
        return subprocess.Popen(
            command,
            cwd=workspace,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )


def served_by(ledger: Path) -> list[psutil.Process]:
    """The `tether mcp serve` processes keeping `ledger`, still alive."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        line = proc.info["cmdline"] or ()
        if "serve" in line and str(ledger) in line:
            try:
                if proc.status() != psutil.STATUS_ZOMBIE:
                    found.append(proc)
            except psutil.NoSuchProcess:
                continue
    return found


@contextmanager
def claude_code(
    root: Path,
    model: Script,
    *,
    ledger: Path,
    grace: float,
    tools: tuple[str, ...],
    allow: tuple[str, ...],
) -> Iterator[tuple[subprocess.Popen[str], AgentServer]]:
    """`start_claude` against a stub model playing `model`, under an account whose
    rules allow `allow`; the CLI is killed (if still there) when the block ends."""
    account = tether_home_allowing(root / "tether", *allow)
    with serving("anthropic", model) as server:
        claude = start_claude(
            root, server, ledger=ledger, grace=grace, tools=tools, account=account
        )
        try:
            yield claude, server
        finally:
            claude.kill()
            claude.wait()


def ended(claude: subprocess.Popen[str], ledger: Path) -> None:
    """Wait for the CLI and its tether server to exit."""
    claude.wait(timeout=30)
    wait_until(lambda: not served_by(ledger), what="the server's exit")
