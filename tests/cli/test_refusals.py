"""Refusals of `tether chat` and `tether acp` at their start, through real processes:
one line that says what to do, and exit code 2 (spec 04, README: 2 refused or usage).

Chat without any model is pinned in `test_chat_pty.py`; acp without one serves and
says so on `session/new` (`tests/acp`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from tests.cli._run import tether

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _no_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TETHER_MODEL_URL", "TETHER_MODEL_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["chat", "--model", "bogus"],
            "tether: unknown model 'bogus': use scripted:<file> or openai:<model>",
        ),
        (["chat", "--model", "openai:gpt-4o"], "tether: no model endpoint: set "),
        (
            ["chat", "--model", "scripted:missing.jsonl"],
            "tether: cannot read script missing.jsonl: No such file or directory",
        ),
        (["acp", "--tool", "nowhere:Tool"], "tether: cannot load tool nowhere:Tool"),
    ],
    ids=["chat-unknown", "chat-no-endpoint", "chat-no-script", "acp"],
)
def test_a_refusal_at_start_exits_2_with_one_line(
    args: list[str], line: str, tmp_path: Path
) -> None:
    """A model chat cannot build exits 2, as the same refusal does elsewhere: each
    start refusal exits 2 with its one line."""
    done = tether(*args, cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    (said,) = done.stderr.splitlines()
    assert said.startswith(line)


@pytest.mark.parametrize("command", ["chat", "acp"])
def test_an_unreadable_config_is_the_same_refusal_in_chat_and_acp(
    command: str, tether_home: Path, tmp_path: Path
) -> None:
    """A config file that is not TOML refuses both commands alike: exit 2, one line
    naming the file."""
    config = Path(tether("config", "path").stdout.strip())
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("[model\n", encoding="utf-8")
    done = tether(
        command,
        "--model",
        "scripted:moves.jsonl",
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2, done.stderr
    (said,) = done.stderr.splitlines()
    assert said.startswith(f"tether: {config} is not valid TOML")
