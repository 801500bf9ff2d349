"""The agent presets: Claude Code (`agent = "claude"`) and Codex (`agent = "codex"`).

A preset stage runs its CLI unattended in the lane's worktree, inside the same process
containment as a command agent (`run_command`), and adds what a plain command line
cannot have:

- tether's PreToolUse and PostToolUse hook (`tether guard --claude-hook`) for that stage
  only: Claude Code reads it from a settings file written into the lane's log folder
  and passed with `--settings`; Codex from `-c hooks.…` overrides on its command line
  (nothing is written into the person's `~/.claude` or `CODEX_HOME`);
- the hook's record of the agent's calls (`pre` / `deny` / `post` lines, see
  `tether.stop.answer_hook_event`) in `<worktree>/.tether/`, a folder git ignores
  (its own `.gitignore` says `*`). The wall leaves a stage's tree nothing writable but
  its workspace and a private TMPDIR, so the workspace is where a hook inside the tree
  can write; the run reads the file from outside;
- the stop inside the agent: while a stop stands the hook refuses every new call; the
  call in flight runs to its end; an agent that is between calls (no `pre` without its
  `post`) `stop_wait` seconds after the stop, or after the end of the call that was in
  flight, less `ENDING_RESERVE` for its exit and the save, gets SIGTERM on its tree,
  then SIGKILL after `grace`;
- the agent's session id, read from its JSON output and handed to the run
  (`on_session`), so a take-over resumes the conversation (`claude --resume`, `codex
  exec resume`);
- only the environment the CLI needs.

The CLI's full JSON event stream (every tool call and result) goes to the lane log.
What a stage leaves and its receipt are the run's business, as for any agent.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, assert_never, final

import anyio
import attrs

from .._env import TetherEnv
from ..host import run_command
from ..stop._hook import CALLS_ENV
from ._agents import AgentOutcome, declared_writable, timed_out_note
from ._lane_log import LaneLog
from ._plan import Preset, Stage

if TYPE_CHECKING:
    from ._store import Store

__all__ = (
    "CLAUDE_TOOLS",
    "CallsSeen",
    "PresetCall",
    "claude_session_file",
    "preset_argv",
    "preset_env",
    "previous_session",
    "read_calls",
)

_TAIL = 4000
_WATCH_EVERY = 0.05
"""Seconds between reads of the call record while a stop stands."""
ENDING_RESERVE = 1.0
"""Seconds of `stop_wait` kept for what follows ending an idle agent (its CLI's exit
on SIGTERM, the lane's save): it is ended this long before the wait runs out (a
quarter of a wait shorter than four times it), so stop -> halted stays within the rest
of the call in flight plus `stop_wait`."""
CLAUDE_TOOLS = ("Bash", "Read", "Edit", "MultiEdit", "Write", "Glob", "Grep", "LS")
"""The tools a Claude Code stage may use without a prompt (spec 03: file and shell
tools; `dontAsk` refuses every other tool instead of asking)."""
_KEEP = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TERM",
    "TZ",
    "TMPDIR",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "NO_PROXY",
    "https_proxy",
    "http_proxy",
    "no_proxy",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "XDG_CACHE_HOME",
    "XDG_RUNTIME_DIR",
)
"""Variables every preset keeps: where things are, locale, certificates, proxies."""
_KEEP_PREFIXES: dict[Preset, tuple[str, ...]] = {
    "claude": (
        "ANTHROPIC_",
        "CLAUDE_CONFIG_DIR",
        "CLAUDE_CODE_USE_",
        "AWS_",
        "CLOUD_ML_REGION",
        "VERTEX_",
        "GOOGLE_APPLICATION_CREDENTIALS",
    ),
    "codex": ("OPENAI_", "CODEX_HOME", "AZURE_OPENAI_"),
}
"""Each CLI's own key, base URL and account variables."""
_PASS_ENV: dict[Preset, tuple[str, ...]] = {
    "claude": (),
    "codex": ("OPENAI_API_KEY",),
}
"""Variables the wall withholds from trees (tether's own secrets) that the CLI needs."""


def preset_writable(preset: Preset, env: Mapping[str, str]) -> list[Path]:
    """The folders a preset's CLI writes besides its lane, declared by the preset (S15).

    Claude Code's config folder, Codex's `CODEX_HOME`. Made if missing, so the wall has
    a folder to leave writable.
    """
    home = Path(env.get("HOME", "~")).expanduser()
    if preset == "claude":
        folder = Path(env.get("CLAUDE_CONFIG_DIR") or home / ".claude")
    else:
        folder = Path(env.get("CODEX_HOME") or home / ".codex")
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return [folder]


TAKEOVER_PROMPT = (
    "tether: this run was stopped by the person and has now been taken over. The "
    "work you did so far is in the worktree as you left it. Go on with the task from "
    "where you stopped; do not start over. The task was: {brief}"
)


@final
@attrs.frozen(kw_only=True)
class CallsSeen:
    """Where a preset agent's tool calls stand, as its hook recorded them."""

    started: int = 0
    """Calls that were let start."""
    denied: int = 0
    """Calls the hook refused (a stop, or the guard)."""
    in_flight: frozenset[str] = frozenset()
    """Ids of calls started and not yet ended."""


def read_calls(path: Path) -> CallsSeen:
    """Read the hook's call record (`pre ID TOOL`, `deny ID`, `post ID` lines)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return CallsSeen()
    started = denied = 0
    open_calls: dict[str, int] = {}
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        ident = rest.split(" ", 1)[0]
        if kind == "pre":
            started += 1
            open_calls[ident] = open_calls.get(ident, 0) + 1
        elif kind == "post" and open_calls.get(ident):
            open_calls[ident] -= 1
        elif kind == "deny":
            denied += 1
    return CallsSeen(
        started=started,
        denied=denied,
        in_flight=frozenset(i for i, n in open_calls.items() if n > 0),
    )


def hook_command() -> str:
    """The shell command both CLIs run for each hook event.

    The hook ignores SIGTERM (set by its shell before the interpreter starts, kept
    across `exec`): when tether ends an agent, the SIGTERM reaches its whole tree,
    and a hook killed in the middle of its judgment is a failed hook, for which both
    CLIs run the call. A hook that outlives the SIGTERM still refuses it; the SIGKILL
    after the grace ends it with the rest of the tree.
    """
    return f"trap '' TERM; exec {shlex.quote(sys.executable)} -m tether guard --claude-hook"


def claude_settings(hook: str) -> dict[str, object]:
    """The settings of one Claude Code stage: no prompt, tether's hooks."""
    entry = [{"matcher": "*", "hooks": [{"type": "command", "command": hook}]}]
    return {
        "permissions": {"defaultMode": "dontAsk", "allow": list(CLAUDE_TOOLS)},
        "hooks": {
            "PreToolUse": entry,
            "PostToolUse": entry,
            "PostToolUseFailure": entry,
        },
    }


def preset_argv(
    stage: Stage,
    *,
    prompt: str,
    settings: Path,
    hook: str,
    resume: str | None,
    args: tuple[str, ...],
) -> list[str]:
    """The command line of a preset stage (the prompt always last, after `--`)."""
    assert stage.preset is not None
    assert stage.agent is not None
    command = stage.agent[0]
    match stage.preset:
        case "claude":
            argv = [
                command,
                "-p",
                "--output-format",
                "stream-json",
                "--verbose",
                "--permission-mode",
                "dontAsk",
                "--settings",
                str(settings),
                *args,
            ]
            if resume is not None:
                argv += ["--resume", resume]
        case "codex":
            # The hooks go in as config overrides for this invocation only; tether
            # wrote them itself, so they need no persisted trust.
            entry = f'[{{matcher="*",hooks=[{{type="command",command={json.dumps(hook)}}}]}}]'
            argv = [
                command,
                "exec",
                "--json",
                # The outer wall contains the tree: Codex's own sandbox would nest
                # inside it, and no approval can wait for a person.
                "--sandbox",
                "danger-full-access",
                "-c",
                'approval_policy="never"',
                "-c",
                f"hooks.PreToolUse={entry}",
                "-c",
                f"hooks.PostToolUse={entry}",
                "--dangerously-bypass-hook-trust",
                *args,
            ]
            if resume is not None:
                argv += ["resume", resume]
        case _:
            assert_never(stage.preset)
    return [*argv, "--", prompt]


def preset_env(
    preset: Preset,
    environ: Mapping[str, str],
    *,
    run: str,
    lane: str,
    item: str,
    calls: Path,
) -> dict[str, str]:
    """Only what the CLI needs: `_KEEP`, its own variables, tether's own, the markers."""
    prefixes = _KEEP_PREFIXES[preset]
    env = {
        name: value
        for name, value in environ.items()
        if name in _KEEP or name.startswith(prefixes) or name.startswith("TETHER_")
    }
    env.update(
        {
            TetherEnv.AGENT.value: "1",
            "TETHER_RUN": run,
            "TETHER_LANE": lane,
            "TETHER_ITEM": item,
            CALLS_ENV: str(calls),
        }
    )
    return env


def _session_of(event: object, preset: Preset) -> str | None:
    if not isinstance(event, dict):
        return None
    match preset:
        case "claude":
            found = event.get("session_id")
        case "codex":
            found = (
                event.get("thread_id")
                if event.get("type") == "thread.started"
                else None
            )
        case _:
            assert_never(preset)
    return found if isinstance(found, str) and found else None


def claude_session_file(environ: Mapping[str, str], session: str, cwd: Path) -> bool:
    """Make Claude Code's saved session `session` resumable from `cwd`.

    Claude Code keeps sessions per working directory
    (`<config>/projects/<cwd with every other character than letters and digits as
    '-'>/<id>.jsonl`) and `--resume` looks only in the current one; a take-over's lane
    has a new directory, so the session file is copied there. False when no such
    session is kept on this machine.
    """
    config = environ.get("CLAUDE_CONFIG_DIR") or str(
        Path(environ.get("HOME", "~")).expanduser() / ".claude"
    )
    projects = Path(config) / "projects"
    here = projects / re.sub(r"[^A-Za-z0-9]", "-", os.path.realpath(cwd))
    if (here / f"{session}.jsonl").is_file():
        return True
    for found in sorted(projects.glob(f"*/{session}.jsonl")):
        here.mkdir(mode=0o700, parents=True, exist_ok=True)
        shutil.copy2(found, here / found.name)
        return True
    return False


def previous_session(
    store: Store, *, run: str, item: str, stage: Stage, index: int
) -> str | None:
    """The session id a take-over's stage resumes, None when it starts fresh.

    The newest lane of `item` in another run that was still at this stage (`index`)
    and whose agent recorded a session for it (`agent-session` events).
    """
    found: str | None = None
    for row in store.item_lanes(item):
        if row.run == run or row.stage != index:
            continue
        for event in store.events(row.run):
            if event.kind != "agent-session" or event.lane != row.id:
                continue
            name, _, ident = event.detail.rpartition(" ")
            if name == stage.name and ident:
                found = ident
    return found


@attrs.define(eq=False)
class PresetCall:
    """One preset stage's agent, run to its end by `run()`."""

    stage: Stage
    brief: str
    cwd: Path
    log: Path
    run_id: str
    lane: str
    item: str
    halted: anyio.Event
    """Set when the run takes a stop."""
    on_call: Callable[[anyio.CancelScope | None], None]
    on_session: Callable[[str], None]
    resume: str | None = None
    """A session to resume (a take-over)."""
    grace: float = 2.0
    """Seconds between SIGTERM and SIGKILL when tether ends the agent."""
    environ: Mapping[str, str] = attrs.field(factory=lambda: dict(os.environ))
    _ended_by_tether: bool = False
    _session: str | None = None
    _pending: str = ""

    @property
    def calls_file(self) -> Path:
        """The hook's call record of this stage."""
        slug = re.sub(r"[^A-Za-z0-9._-]", "_", self.stage.name)
        return self.cwd / ".tether" / f"calls-{self.lane}-{slug}"

    def _prepare(self) -> Path:
        folder = self.cwd / ".tether"
        folder.mkdir(mode=0o700, exist_ok=True)
        # Git ignores the folder (its own `*`): never committed, never on the branch.
        (folder / ".gitignore").write_text("*\n", encoding="utf-8")
        self.calls_file.write_bytes(b"")
        own = self.log.parent / f"{self.lane}.agent"
        own.mkdir(mode=0o700, parents=True, exist_ok=True)
        settings = own / f"claude-settings-{self.calls_file.name[6:]}.json"
        settings.write_text(
            json.dumps(claude_settings(hook_command()), indent=2), encoding="utf-8"
        )
        return settings

    def _prompt(self) -> str:
        return TAKEOVER_PROMPT.format(brief=self.brief) if self.resume else self.brief

    def _seen(self, text: str) -> None:
        """Find the session id in the CLI's JSON lines as they come."""
        if self._session is not None:
            return
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        assert self.stage.preset is not None
        for line in lines:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            found = _session_of(event, self.stage.preset)
            if found is not None:
                self._session = found
                self._pending = ""
                self.on_session(found)
                return

    async def _end_when_idle(self, stop: anyio.Event, kill: anyio.CancelScope) -> None:
        """After a stop: end the agent once it spent `stop_wait` s between calls."""
        await self.halted.wait()
        quiet_since = anyio.current_time()
        wait = self.stage.stop_wait
        wait -= min(ENDING_RESERVE, wait / 4)
        while True:
            if read_calls(self.calls_file).in_flight:
                # Spec 03: the call in flight runs to its end; the wait starts after.
                quiet_since = anyio.current_time()
            elif anyio.current_time() - quiet_since >= wait:
                break
            await anyio.sleep(_WATCH_EVERY)
        self._ended_by_tether = True
        stop.set()  # SIGTERM to the whole tree
        await anyio.sleep(self.grace)
        kill.cancel()  # the tree is killed and reaped as run_command unwinds

    async def run(self) -> AgentOutcome:
        """Run the agent to its end; returns when every process of its tree is gone."""
        assert self.stage.preset is not None
        settings = self._prepare()
        resume = self.resume
        if (
            resume is not None
            and self.stage.preset == "claude"
            and not claude_session_file(self.environ, resume, self.cwd)
        ):
            # Not kept on this machine: the stage starts over with its brief.
            resume = None
        self.resume = resume
        argv = preset_argv(
            self.stage,
            prompt=self._prompt(),
            settings=settings,
            hook=hook_command(),
            resume=resume,
            args=self.stage.args,
        )
        env = preset_env(
            self.stage.preset,
            self.environ,
            run=self.run_id,
            lane=self.lane,
            item=self.item,
            calls=self.calls_file,
        )
        # What the stage names in `env` it gets, withheld or not.
        env.update({k: self.environ[k] for k in self.stage.env if k in self.environ})
        self.log.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with LaneLog(self.log) as sink:

            def on_output(text: str) -> None:
                sink.write(text)
                self._seen(text)

            started = "resumes session " + resume if resume else "starts"
            sink.write(
                f"tether: {self.stage.preset} stage {self.stage.name} {started}: "
                f"{shlex.join(argv[:-1])} <prompt>\n"
            )
            stop = anyio.Event()
            killed_by_run = False
            outcome = None
            async with anyio.create_task_group() as tg:
                with anyio.CancelScope() as scope:
                    self.on_call(scope)
                    try:
                        with anyio.CancelScope() as kill:
                            tg.start_soon(self._end_when_idle, stop, kill)
                            outcome = await run_command(
                                argv,
                                cwd=self.cwd,
                                env=env,
                                stop=stop,
                                on_output=on_output,
                                timeout=self.stage.timeout,
                                limit=_TAIL,
                                progress_limit=sys.maxsize,
                                # S15: the lane, and the CLI's own folders (its
                                # sessions, settings, caches), as the preset declares.
                                writable=[
                                    *preset_writable(self.stage.preset, env),
                                    *self.stage.writable,
                                    *declared_writable(),
                                ],
                                pass_env=[
                                    *_PASS_ENV[self.stage.preset],
                                    *self.stage.env,
                                ],
                            )
                    except OSError as exc:
                        line = f"tether: the agent could not start: {exc}\n"
                        sink.write(line)
                        tg.cancel_scope.cancel()
                        return AgentOutcome(exit_status=127, log_tail=line)
                    finally:
                        self.on_call(None)
                killed_by_run = scope.cancelled_caught
                tg.cancel_scope.cancel()
            if killed_by_run:
                sink.write(b"\ntether: the agent's tree was killed\n")
                return AgentOutcome(exit_status=-9, log_tail="killed", killed=True)
            seen = read_calls(self.calls_file)
            notes = ""
            if outcome is None:
                notes += (
                    "\ntether: the agent did not end on SIGTERM; its tree was killed"
                )
                tail, status = "", -9
            else:
                tail, status = outcome.output, outcome.returncode
                if outcome.timed_out:
                    notes += f"\ntether: {timed_out_note(self.stage.timeout or 0.0)}"
            if self.halted.is_set():
                notes += (
                    "\ntether: stopped at the person's stop after "
                    f"{seen.started} tool call{'' if seen.started == 1 else 's'}"
                )
                if self._ended_by_tether:
                    notes += (
                        f" (ended by tether: {self.stage.stop_wait:g} s between calls "
                        "after the stop)"
                    )
            if notes:
                sink.write(notes + "\n")
        return AgentOutcome(
            exit_status=status,
            log_tail=tail + notes,
            stopped=self.halted.is_set(),
            calls=seen.started,
            timed_out=self.stage.timeout
            if outcome is not None and outcome.timed_out
            else None,
        )
