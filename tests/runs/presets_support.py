"""Helpers of the preset tests: the real CLIs against stub model servers on 127.0.0.1."""

from __future__ import annotations

import textwrap
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import anyio.from_thread
from tests.machine import missing, which

from tether.testing._agent_server import AgentServer, Move, Script, Wire, tool_results

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

WIRE: dict[str, Wire] = {"claude": "anthropic", "codex": "responses"}
STOP_SAYS = "the person stopped this run"


def need_cli(name: str) -> None:
    """Skip when the CLI is missing, with the reason; in CI it must be there."""
    if which(name) is None:
        missing(
            "the preset tests",
            f"{name} is not installed (npm install -g "
            f"{'@anthropic-ai/claude-code' if name == 'claude' else '@openai/codex'})",
        )


def shell_call(body: dict[str, Any], command: str) -> tuple[str, dict[str, Any]]:
    """A shell tool call in the shape the requesting CLI offers."""
    tools = {t.get("name") for t in body.get("tools", []) if isinstance(t, dict)}
    if "Bash" in tools or "messages" in body:
        return ("Bash", {"command": command, "description": "a step"})
    if "exec_command" in tools:
        return ("exec_command", {"cmd": command})
    if "shell_command" in tools:
        return ("shell_command", {"command": command})
    return ("shell", {"command": ["bash", "-lc", command]})


def prompts(body: dict[str, Any]) -> str:
    """Every text the request carries, joined (to look for briefs and prompts)."""
    return repr(body.get("messages", [])) + repr(body.get("input", []))


@contextmanager
def serving(wire: Wire, script: Script) -> Iterator[AgentServer]:
    """An `AgentServer` on a thread of its own, for tests that run `tether` processes."""
    with (
        anyio.from_thread.start_blocking_portal() as portal,
        portal.wrap_async_context_manager(AgentServer.open(wire, script)) as server,
    ):
        yield server


def preset_env(preset: str, server: AgentServer, home: Path) -> dict[str, str]:
    """What a run needs to reach the stub: the CLI's URL and a dummy key, a home."""
    home.mkdir(parents=True, exist_ok=True)
    env = {"HOME": str(home)}
    if preset == "claude":
        env |= {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "sk-test"}
    else:
        codex = home / "codex"
        codex.mkdir(exist_ok=True)
        (codex / "config.toml").write_text(
            textwrap.dedent(
                f"""\
                model = "stub-model"
                model_provider = "stub"
                [model_providers.stub]
                name = "stub"
                base_url = "{server.url}"
                env_key = "OPENAI_API_KEY"
                wire_api = "responses"
                """
            ),
            encoding="utf-8",
        )
        env |= {"CODEX_HOME": str(codex), "OPENAI_API_KEY": "sk-test"}
    return env


def write_preset_plan(
    root: Path, repo: Path, preset: str, *, stop_wait: float = 1.0
) -> Path:
    plan = root / "plan.toml"
    plan.write_text(
        textwrap.dedent(
            f"""\
            repo = "{repo}"
            lanes = 1
            poll = 0.1

            [[stage]]
            name = "implement"
            agent = "{preset}"
            stop_wait = {stop_wait}
            timeout = 300

            [[item]]
            id = "one"
            brief = "Work on one"
            """
        ),
        encoding="utf-8",
    )
    return plan


class Stubborn:
    """A model that makes one long call, then ignores every refusal: `queued` more
    calls one after another, then it thinks for a minute without ending its turn."""

    def __init__(self, marks: Path, *, sleep: float, queued: int = 8) -> None:
        self.marks = marks
        self.sleep = sleep
        self.queued = queued

    def __call__(self, body: dict[str, Any]) -> Move:
        if not body.get("tools"):
            return Move(text="A title")  # a side request (Claude Code's session title)
        done = len(tool_results(body))
        m = self.marks
        if done == 0:
            command = (
                f"touch {m}/started; sleep {self.sleep}; echo work > work.txt; "
                f"touch {m}/finished"
            )
            return Move(text="working", calls=(shell_call(body, command),))
        if done <= self.queued:
            return Move(calls=(shell_call(body, f"echo {done} >> {m}/later"),))
        return Move(text="still thinking", think=60.0)


class Longrunner:
    """A model whose agent makes a quick first call, then one that runs for minutes."""

    def __init__(self, marks: Path) -> None:
        self.marks = marks

    def __call__(self, body: dict[str, Any]) -> Move:
        if not body.get("tools"):
            return Move(text="A title")
        done = len(tool_results(body))
        if done == 0:
            return Move(calls=(shell_call(body, "echo first-step-ok"),))
        command = f"touch {self.marks}/started; sleep 600"
        return Move(text="the long step", calls=(shell_call(body, command),))


class Resumed:
    """The model of a take-over: one call that leaves more work, then the end."""

    def __call__(self, body: dict[str, Any]) -> Move:
        if not body.get("tools"):
            return Move(text="A title")
        if "resumed-ok" in "".join(tool_results(body)):
            return Move(text="finished")
        return Move(calls=(shell_call(body, "echo more > more.txt; echo resumed-ok"),))
