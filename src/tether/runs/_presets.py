"""The agent presets: Claude Code (`agent = "claude"`) and Codex (`agent = "codex"`).

A preset stage runs its CLI unattended in the lane's worktree, inside the same process
containment as a command agent (`run_command`), and adds what a plain command line
cannot have:

- a CLI folder of the lane's own (`_cli_folder`): a copy of the person's credentials,
  passed as `CLAUDE_CONFIG_DIR` / `CODEX_HOME` and left writable by the wall instead
  of the person's `~/.claude` or `CODEX_HOME`, which stay read-only: what the agent
  writes there (settings, hooks, MCP servers) never reaches the person's own CLI;
- tether's PreToolUse and PostToolUse hook (`tether guard --claude-hook`) for that stage
  only: Claude Code reads it from a settings file written into the lane's log folder
  and passed with `--settings`; Codex from `-c hooks.…` overrides on its command line;
- the hook's record of the agent's calls (`pre` / `deny` / `post` lines, see
  `tether.stop.answer_hook_event`) in `<worktree>/.tether/`, a folder git ignores
  (its own `.gitignore` says `*`). The wall leaves a stage's tree nothing writable but
  its workspace and a private TMPDIR, so the workspace is where a hook inside the tree
  can write; the run reads the file from outside, as data (S16): `.tether/` and its
  files are made below a descriptor of the lane (a link or anything else planted at
  their names is replaced, never followed), and the record is read by descriptor,
  non-blocking, only if it is a regular file of at most `CALLS_LIMIT` bytes. A record
  that cannot be read leaves the calls unknown: after a stop the agent is then ended
  `stop_wait` after the stop, as one between calls, and the log says why;
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
import sys
from collections.abc import Callable, Mapping
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, assert_never, final

import anyio
import attrs

from .._channel import stage_env, tally_calls
from .._env import PREFIX
from .._untrusted import dir_beneath, own_dir_at, read_beneath, write_beneath
from ..host import run_command
from ._agents import AgentOutcome, declared_writable, timed_out_note
from ._cli_folder import carry_session, cli_folder, make_cli_folder
from ._lane_log import LaneLog
from ._lane_paths import lane_log
from ._plan import Preset, Stage

if TYPE_CHECKING:
    from ._values import LaneRow

__all__ = (
    "CALLS_LIMIT",
    "CLAUDE_TOOLS",
    "CallsSeen",
    "EarlierSession",
    "PresetCall",
    "preset_argv",
    "preset_env",
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
"""Each CLI's own key, base URL and account variables (its config folder variable is
set to the lane's own copy)."""
_PASS_ENV: dict[Preset, tuple[str, ...]] = {
    "claude": (),
    "codex": ("OPENAI_API_KEY",),
}
"""Variables the wall withholds from trees (tether's own secrets) that the CLI needs."""


_FOLDER_ENV: dict[Preset, str] = {"claude": "CLAUDE_CONFIG_DIR", "codex": "CODEX_HOME"}
"""The variable that names the CLI's config folder."""
CALLS_LIMIT = 16 << 20
"""Bytes of a call record tether reads (some 250,000 calls); a larger one is unread."""


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
    unreadable: str | None = None
    """Why the record could not be read (the calls are unknown); None when it was."""


def read_calls(lane: Path, record: str | PurePath) -> CallsSeen:
    """Read the hook's call record (`pre ID TOOL`, `deny ID`, `post ID` lines).

    `record` is relative to the lane (`lane`, a folder tether made): the record is
    read as data (S16), following no link, only if it is a regular file of at most
    `CALLS_LIMIT` bytes; anything else is `unreadable`, with what was found. A record
    not made yet is an empty one.
    """
    try:
        text = read_beneath(lane, record, CALLS_LIMIT).decode("utf-8", "replace")
    except FileNotFoundError:
        return CallsSeen()
    except OSError as exc:
        return CallsSeen(unreadable=f"{record}: {exc.strerror or exc}")
    started, denied, in_flight = tally_calls(text)
    return CallsSeen(started=started, denied=denied, in_flight=in_flight)


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
    settings: Path | None,
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
            assert settings is not None, "a Claude Code stage has its settings file"
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
        if name in _KEEP or name.startswith(prefixes) or name.startswith(PREFIX)
    }
    env.update(stage_env(run=run, lane=lane, item=item, calls=str(calls)))
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


def agent_dir(log: Path, lane: str) -> Path:
    """A lane's `.agent` folder, beside its log: its settings and its CLI folder."""
    return log.parent / f"{lane}.agent"


@final
@attrs.frozen
class EarlierSession:
    """The session a take-over's stage resumes, and where its CLI kept it."""

    id: str
    folder: Path
    """The CLI folder of the lane that ran it (`cli_folder`)."""

    @classmethod
    def of(cls, lane: LaneRow, session: str, preset: Preset) -> EarlierSession:
        """The session `session` the agent of `lane` ran, in that lane's CLI folder."""
        where = agent_dir(lane_log(lane.run, lane.id), lane.id)
        return cls(session, cli_folder(where, preset))


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
    resume: EarlierSession | None = None
    """A session to resume (a take-over)."""
    grace: float = 2.0
    """Seconds between SIGTERM and SIGKILL when tether ends the agent."""
    environ: Mapping[str, str] = attrs.field(factory=lambda: dict(os.environ))
    _ended_by_tether: bool = False
    _session: str | None = None
    _pending: str = ""
    _notes: list[str] = attrs.Factory(list)
    """Lines for the lane log about what tether found and did before the CLI starts."""
    _unreadable: str | None = None
    """Why the call record could not be read while a stop stood (the first reason)."""

    @property
    def calls_record(self) -> PurePath:
        """The hook's call record of this stage, relative to the lane."""
        slug = re.sub(r"[^A-Za-z0-9._-]", "_", self.stage.name)
        return PurePath(".tether", f"calls-{self.lane}-{slug}")

    @property
    def calls_file(self) -> Path:
        """The hook's call record of this stage (the path the hook is given)."""
        return self.cwd / self.calls_record

    def _prepare_lane(self) -> None:
        """Make `.tether/`, its `.gitignore` and an empty call record in the lane.

        The lane is the agent's to write: each is made below a descriptor of the lane,
        and whatever was planted at their names is replaced, never followed (S16). One
        that cannot be made is noted; the stage runs (its calls then unknown).
        """
        with dir_beneath(self.cwd) as lane:
            try:
                fd, replaced = own_dir_at(lane, ".tether")
            except OSError as exc:
                self._notes.append(f".tether could not be made: {exc.strerror or exc}")
                return
            try:
                if replaced is not None:
                    self._notes.append(f".tether was {replaced}: replaced by a folder")
                # Git ignores the folder (its own `*`): never committed, never on the branch.
                for name, data in (
                    (".gitignore", b"*\n"),
                    (self.calls_record.name, b""),
                ):
                    try:
                        write_beneath(fd, name, data, mode=0o644)
                    except OSError as exc:
                        self._notes.append(
                            f".tether/{name} could not be made: {exc.strerror or exc}"
                        )
            finally:
                os.close(fd)

    def _prepare(self) -> tuple[Path | None, Path]:
        """The lane's `.tether/`, its CLI folder, and this stage's Claude settings.

        The settings file is a Claude Code stage's only (Codex takes its hooks on its
        command line); None for Codex.
        """
        assert self.stage.preset is not None
        self._prepare_lane()
        own = agent_dir(self.log, self.lane)
        folder, notes = make_cli_folder(self.stage.preset, self.environ, own)
        self._notes += notes
        if self.stage.preset != "claude":
            return None, folder
        settings = own / f"claude-settings-{self.calls_record.name[6:]}.json"
        settings.write_text(
            json.dumps(claude_settings(hook_command()), indent=2), encoding="utf-8"
        )
        return settings, folder

    def _read_calls(self) -> CallsSeen:
        seen = read_calls(self.cwd, self.calls_record)
        if seen.unreadable is not None and self._unreadable is None:
            self._unreadable = seen.unreadable
        return seen

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
            # A record that cannot be read shows no call in flight: the agent is
            # ended as one between calls, so the stop keeps its bound.
            if self._read_calls().in_flight:
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
        settings, folder = self._prepare()
        resume: str | None = None
        if self.resume is not None:
            why = carry_session(
                self.stage.preset, self.resume.id, self.resume.folder, folder, self.cwd
            )
            if why is None:
                resume = self.resume.id
            else:
                # Not kept, or not a session file tether copies: the stage starts over.
                self._notes.append(f"{why}; the stage starts over with its brief")
                self.resume = None
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
        # The lane's own copy, never the person's folder (S16).
        env[_FOLDER_ENV[self.stage.preset]] = str(folder)
        self.log.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with LaneLog(self.log) as sink:

            def on_output(text: str) -> None:
                sink.write(text)
                self._seen(text)

            started = "resumes session " + resume if resume else "starts"
            sink.write(
                "".join(f"tether: {note}\n" for note in self._notes)
                + f"tether: {self.stage.preset} stage {self.stage.name} {started}: "
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
                                # S15: the lane, and the CLI's folder (its sessions,
                                # settings, caches): the lane's copy (S16).
                                writable=[
                                    folder,
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
            seen = self._read_calls()
            notes = ""
            if self._unreadable is not None:
                notes += (
                    f"\ntether: the call record could not be read ({self._unreadable}):"
                    " the agent's calls are unknown"
                )
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
                count = (
                    "an unknown number of tool calls"
                    if self._unreadable is not None
                    else f"{seen.started} tool call{'' if seen.started == 1 else 's'}"
                )
                notes += f"\ntether: stopped at the person's stop after {count}"
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
