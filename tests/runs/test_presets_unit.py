"""The presets' pieces without a CLI: plan fields, environment, call record, limits."""

from __future__ import annotations

import os
import stat
import textwrap
from typing import TYPE_CHECKING

import pytest

from tether.runs import PlanError, load_plan
from tether.runs._agents import AgentOutcome, usage_reset
from tether.runs._cli_folder import carry_session, claude_project
from tether.runs._presets import (
    CallsSeen,
    hook_command,
    preset_argv,
    preset_env,
    read_calls,
)

if TYPE_CHECKING:
    from pathlib import Path


def _plan(tmp_path: Path, stage: str) -> Path:
    path = tmp_path / "plan.toml"
    text = f'repo = "."\n\n[[stage]]\nname = "s"\n{textwrap.dedent(stage)}\n'
    path.write_text(text, encoding="utf-8")
    return path


def _fake_cli(tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    cli = bin_dir / name
    cli.write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
    cli.chmod(cli.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


@pytest.mark.parametrize("preset", ["claude", "codex"])
def test_a_preset_stage_reads_its_args_command_and_stop_wait(
    tmp_path: Path, preset: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`agent = "claude"` / `"codex"` with `args`, `command`, `stop_wait` (spec 03
    "Presets"); the CLI's usage-limit message is the default `usage_limit`."""
    _fake_cli(tmp_path, f"my-{preset}", monkeypatch)
    plan = load_plan(
        _plan(
            tmp_path,
            f"""\
            agent = "{preset}"
            command = "my-{preset}"
            args = ["--model", "m", "{{item}}"]
            stop_wait = 3
            """,
        )
    )
    (stage,) = plan.stages
    assert stage.preset == preset
    assert stage.agent == (f"my-{preset}", "--model", "m", "{item}")
    assert stage.args == ("--model", "m", "{item}")
    assert stage.stop_wait == 3.0
    assert stage.usage_limit is not None


def test_a_preset_whose_cli_is_not_on_path_is_refused_at_load_in_one_line(
    tmp_path: Path,
) -> None:
    """Spec 03: a stage whose agent is not found is refused before any run starts; the
    line names the field and says how to install the CLI."""
    with pytest.raises(PlanError) as caught:
        load_plan(_plan(tmp_path, 'agent = "codex"\ncommand = "no-such-codex-cli"'))
    text = str(caught.value)
    assert "\n" not in text
    assert "stage[0].command" in text
    assert "npm install -g @openai/codex" in text


@pytest.mark.parametrize(
    ("stage", "field"),
    [
        ('agent = ["true"]\nstop_wait = 3', "stop_wait"),
        ('agent = ["true"]\nargs = ["x"]', "args"),
        ('agent = "claude"\nargs = "x"', "args"),
        ('agent = "claude"\ncommand = ""', "command"),
        ('agent = "claude"\ncommand = "true"\nstop_wait = 0', "stop_wait"),
        ('agent = "gemini"', "agent"),
    ],
)
def test_preset_fields_are_checked(tmp_path: Path, stage: str, field: str) -> None:
    """Preset fields on a command-line stage, or of the wrong type, name their field."""
    with pytest.raises(PlanError, match=rf"stage\[0\]\.{field}"):
        load_plan(_plan(tmp_path, stage))


def test_a_preset_passes_only_what_its_cli_needs(tmp_path: Path) -> None:
    """Spec 03: only the environment the CLI needs: where things are, its own key and
    URL variables, tether's own and the agent markers; never another CLI's key."""
    environ = {
        "PATH": "/bin",
        "HOME": "/home/p",
        "ANTHROPIC_API_KEY": "a",
        "ANTHROPIC_BASE_URL": "http://x",
        "OPENAI_API_KEY": "o",
        "CODEX_HOME": "/c",
        "AWS_SECRET_ACCESS_KEY": "s",
        "GITHUB_TOKEN": "g",
        "TETHER_HOME": "/t",
    }
    calls = tmp_path / "calls"
    claude = preset_env("claude", environ, run="r", lane="l", item="i", calls=calls)
    assert set(claude) == {
        "PATH",
        "HOME",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "AWS_SECRET_ACCESS_KEY",
        "TETHER_HOME",
        "TETHER_AGENT",
        "TETHER_RUN",
        "TETHER_LANE",
        "TETHER_ITEM",
        "TETHER_CALLS",
    }
    codex = preset_env("codex", environ, run="r", lane="l", item="i", calls=calls)
    assert "OPENAI_API_KEY" in codex
    assert "CODEX_HOME" in codex
    assert "ANTHROPIC_API_KEY" not in codex
    assert "GITHUB_TOKEN" not in codex
    assert (codex["TETHER_AGENT"], codex["TETHER_CALLS"]) == ("1", str(calls))


def test_the_call_record_tells_a_call_in_flight_from_none(tmp_path: Path) -> None:
    """`pre` without its `post` is a call in flight; refusals start nothing."""
    record = tmp_path / "calls"
    assert read_calls(tmp_path, "calls") == CallsSeen()
    record.write_text("pre a Bash\npre b Read\npost a\ndeny c\n", encoding="utf-8")
    assert read_calls(tmp_path, "calls") == CallsSeen(
        started=2, denied=1, in_flight=frozenset({"b"})
    )
    with record.open("a", encoding="utf-8") as sink:
        sink.write("post b\n")
    assert not read_calls(tmp_path, "calls").in_flight


def test_the_hook_ignores_sigterm_so_a_stop_never_turns_it_into_a_pass() -> None:
    """A tether choice: both CLIs run a call whose hook failed, so the hook command
    ignores SIGTERM (the signal that ends an agent's tree) from its shell on."""
    assert hook_command().startswith("trap '' TERM; exec ")
    assert hook_command().endswith(" -m tether guard --claude-hook")


@pytest.mark.parametrize("preset", ["claude", "codex"])
def test_a_preset_runs_unattended_and_its_prompt_comes_last(
    tmp_path: Path, preset: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No permission prompt can wait (Claude Code `dontAsk`, Codex approvals never),
    the JSON event stream is asked for, the resume goes where the CLI reads it, and a
    brief that looks like an option stays the prompt (after `--`)."""
    _fake_cli(tmp_path, preset, monkeypatch)
    (stage,) = load_plan(_plan(tmp_path, f'agent = "{preset}"')).stages
    argv = preset_argv(
        stage,
        prompt="--help",
        settings=tmp_path / "s.json",
        hook="h",
        resume="sess",
        args=("--x",),
    )
    assert argv[-2:] == ["--", "--help"]
    if preset == "claude":
        assert argv[:2] == ["claude", "-p"]
        for flag in ("stream-json", "--verbose", "dontAsk", str(tmp_path / "s.json")):
            assert flag in argv
        assert argv[-4:-2] == ["--resume", "sess"]
    else:
        assert argv[:3] == ["codex", "exec", "--json"]
        assert 'approval_policy="never"' in argv
        assert any(a.startswith("hooks.PreToolUse=") for a in argv)
        assert any(a.startswith("hooks.PostToolUse=") for a in argv)
        assert argv[-4:-2] == ["resume", "sess"]
    assert "--x" in argv


@pytest.mark.parametrize(
    ("preset", "tail", "reset"),
    [
        ("claude", "Claude AI usage limit reached|1900000000", 1900000000.0),
        ("claude", "You've hit your limit · resets 3pm", None),
        ("codex", '{"type":"error","message":"You\'ve hit your usage limit."}', None),
    ],
)
def test_a_presets_usage_limit_message_makes_its_lane_wait(
    tmp_path: Path,
    preset: str,
    tail: str,
    reset: float | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Spec 03 "Usage windows": the CLI's own usage-limit message is recognised
    without a plan pattern; a reset time in it is the end of the wait."""
    _fake_cli(tmp_path, preset, monkeypatch)
    (stage,) = load_plan(_plan(tmp_path, f'agent = "{preset}"')).stages
    outcome = AgentOutcome(exit_status=1, log_tail=tail)
    expected = reset if reset is not None else 100.0 + stage.usage_wait
    assert usage_reset(stage, outcome, 100.0) == expected
    fine = AgentOutcome(exit_status=1, log_tail="some other failure")
    assert usage_reset(stage, fine, 100.0) is None


def test_a_claude_session_is_made_resumable_from_the_new_lane(tmp_path: Path) -> None:
    """Claude Code looks for a session only under its working directory's project
    folder; the take-over's lane has a new one, so the session file is copied from the
    previous lane's CLI folder into the new lane's, there."""
    previous = tmp_path / "old.agent" / "claude"
    old = previous / "projects" / "-old-lane"
    old.mkdir(parents=True)
    (old / "s1.jsonl").write_text("{}\n", encoding="utf-8")
    lane = tmp_path / "new" / "lane_1"
    lane.mkdir(parents=True)
    folder = tmp_path / "new.agent" / "claude"
    folder.mkdir(parents=True)
    assert carry_session("claude", "s1", previous, folder, lane) is None
    key = "".join(c if c.isalnum() else "-" for c in os.path.realpath(lane))
    assert key == claude_project(lane)
    assert (folder / "projects" / key / "s1.jsonl").read_text() == "{}\n"
    gone = carry_session("claude", "gone", previous, folder, lane)
    assert gone is not None
    assert "session gone is not kept in" in gone
    odd = carry_session("claude", "../x", previous, folder, lane)
    assert odd is not None
    assert "not one the CLI makes" in odd


def test_a_codex_session_keeps_its_dated_path_in_the_new_lanes_folder(
    tmp_path: Path,
) -> None:
    previous = tmp_path / "old.agent" / "codex"
    day = previous / "sessions" / "2026" / "01" / "02"
    day.mkdir(parents=True)
    name = "rollout-2026-01-02T03-04-05-0199-abc.jsonl"
    (day / name).write_text("{}\n", encoding="utf-8")
    folder = tmp_path / "new.agent" / "codex"
    folder.mkdir(parents=True)
    assert carry_session("codex", "0199-abc", previous, folder, tmp_path) is None
    assert (folder / "sessions" / "2026" / "01" / "02" / name).is_file()
