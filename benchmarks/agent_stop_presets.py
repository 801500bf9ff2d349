"""A stop reaching inside a stage agent: the Claude Code and Codex presets.

Each sample is one `tether run` of a one-stage plan whose agent is the real CLI, driven
by a stub model server on 127.0.0.1 that plays a model ignoring tether's refusals: one
long Bash call (`--call` seconds), then eight more calls one after another, then it
thinks without ending its turn. The stop is set through the real stop path
(`set_stop()`) at a random moment of the long call. The figures: stop -> halted (the
run's exit) and the same less the rest of the call in flight, against the target
(spec 05): stop -> halted <= the rest of the call in flight + 10 s, with the default
`stop_wait` of 10 s.

    .venv/bin/python benchmarks/agent_stop_presets.py --runs 5 --call 3

A CLI that is not installed is skipped and says so.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio.from_thread

sys.path.insert(0, str(Path(__file__).parent))
from _common import machine, summary

from tether.testing._agent_server import AgentServer, Move, Wire, tool_results

if TYPE_CHECKING:
    from collections.abc import Callable


def _shell(body: dict[str, Any], command: str) -> tuple[str, dict[str, Any]]:
    tools = {t.get("name") for t in body.get("tools", []) if isinstance(t, dict)}
    if "messages" in body:
        return ("Bash", {"command": command, "description": "a step"})
    if "exec_command" in tools:
        return ("exec_command", {"cmd": command})
    return ("shell_command", {"command": command})


def _stubborn(marks: Path, call: float) -> Callable[[dict[str, Any]], Move]:
    def script(body: dict[str, Any]) -> Move:
        if not body.get("tools"):
            return Move(text="A title")
        done = len(tool_results(body))
        if done == 0:
            command = f"touch {marks}/started; sleep {call}; touch {marks}/finished"
            return Move(calls=(_shell(body, command),))
        if done <= 8:
            return Move(calls=(_shell(body, f"echo {done} >> {marks}/later"),))
        return Move(text="thinking", think=120.0)

    return script


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def _env(preset: str, server: AgentServer, root: Path) -> dict[str, str]:
    home = root / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "TETHER_HOME": str(root / "tether")}
    if preset == "claude":
        return env | {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "sk-b"}
    codex = home / "codex"
    codex.mkdir()
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
    return env | {"CODEX_HOME": str(codex), "OPENAI_API_KEY": "sk-b"}


def _one(
    preset: str, wire: Wire, *, call: float, stop_wait: float
) -> tuple[float, float]:
    """One sample: (stop -> halted, the rest of the call in flight at the stop)."""
    with tempfile.TemporaryDirectory(prefix="agent-stop-") as tmp:
        root = Path(tmp)
        marks = root / "marks"
        marks.mkdir()
        repo = root / "repo"
        repo.mkdir()
        _git(repo, "init", "-q", "-b", "main")
        _git(
            repo,
            "-c",
            "user.email=a@b",
            "-c",
            "user.name=a",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "init",
        )
        plan = root / "plan.toml"
        plan.write_text(
            f'repo = "{repo}"\npoll = 0.1\n\n[[stage]]\nname = "work"\n'
            f'agent = "{preset}"\nstop_wait = {stop_wait}\n\n'
            '[[item]]\nid = "one"\nbrief = "Work on one"\n',
            encoding="utf-8",
        )
        with (
            anyio.from_thread.start_blocking_portal() as portal,
            portal.wrap_async_context_manager(
                AgentServer.open(wire, _stubborn(marks, call))
            ) as server,
        ):
            env = _env(preset, server, root)
            env["TETHER_WRITABLE"] = str(
                marks
            )  # the stub's commands mark their moments
            proc = subprocess.Popen(
                [sys.executable, "-m", "tether", "run", str(plan)],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            deadline = time.monotonic() + 120
            while not (marks / "started").exists():
                if time.monotonic() > deadline or proc.poll() is not None:
                    proc.kill()
                    raise RuntimeError(f"{preset}: the long call never started")
                time.sleep(0.02)
            started = time.time()
            time.sleep(random.uniform(0.1, call * 0.8))
            os.environ["TETHER_HOME"] = env["TETHER_HOME"]
            from tether.stop import set_stop

            stopped = time.time()
            set_stop("benchmark")
            code = proc.wait(timeout=300)
            halted = time.time()
        if code != 3:
            raise RuntimeError(f"{preset}: the run ended {code}, not halted (3)")
        if (marks / "later").exists():
            raise RuntimeError(f"{preset}: a call after the stop ran")
        return halted - stopped, max(0.0, call - (stopped - started))


def _preset_stop(preset: str, wire: Wire, args: argparse.Namespace) -> None:
    if shutil.which(preset) is None:
        print(f"{preset}: not installed, skipped")
        return
    total: list[float] = []
    beyond: list[float] = []
    for _ in range(args.runs):
        took, rest = _one(preset, wire, call=args.call, stop_wait=args.stop_wait)
        total.append(took)
        beyond.append(took - rest)
    print(summary(f"{preset} preset: stop -> halted", total))
    print(summary(f"{preset} preset: stop -> halted less the call's rest", beyond))
    worst = max(beyond)
    verdict = "meets" if worst <= 10.0 else "MISSES"
    print(
        f"{preset} preset: worst {worst:.2f} s beyond the call: {verdict} the 10 s target"
    )


def claude_preset_stop(args: argparse.Namespace) -> None:
    """Stop -> halted for `agent = "claude"` (Claude Code, Anthropic Messages stub)."""
    _preset_stop("claude", "anthropic", args)


def codex_preset_stop(args: argparse.Namespace) -> None:
    """Stop -> halted for `agent = "codex"` (Codex, OpenAI Responses stub)."""
    _preset_stop("codex", "responses", args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--call", type=float, default=3.0, help="seconds of the long call"
    )
    parser.add_argument("--stop-wait", type=float, default=10.0)
    parser.add_argument("--only", choices=["claude", "codex"])
    args = parser.parse_args()
    print(machine())
    print(f"runs={args.runs} call={args.call}s stop_wait={args.stop_wait}s")
    if args.only in (None, "claude"):
        claude_preset_stop(args)
    if args.only in (None, "codex"):
        codex_preset_stop(args)


if __name__ == "__main__":
    main()
