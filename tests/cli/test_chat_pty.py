"""`tether chat` as a person uses it: through a real pseudo-terminal, keys and all."""

from __future__ import annotations

import re
import subprocess
import time
from typing import TYPE_CHECKING

import pytest
from tests.cli._pty import Pty
from tests.cli._run import tether

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow


SCRIPT = "\n".join(
    [
        '{"tether_script": 1}',
        '{"text": "Hello from the script."}',
        '{"text": "Running it.", "tool_calls": [{"id": "c1", "name": "Bash",'
        ' "input": {"command": "echo begun; sleep 30"}}]}',
        '{"text": "Understood, stopped."}',
    ]
)


@pytest.fixture
def chat_dir(tmp_path: Path) -> Path:
    (tmp_path / "moves.jsonl").write_text(SCRIPT + "\n")
    return tmp_path


@pytest.mark.rule("chat-stop")
@pytest.mark.parametrize("stop_key", ["\x1b", "\x03"], ids=["esc", "ctrl-c"])
def test_chat_a_turn_a_stop_the_report_and_an_exit(
    chat_dir: Path, stop_key: str
) -> None:
    """A turn answers; a Bash call is allowed once, then Esc (or Ctrl-C) stops it: the
    report shows what it waits for and that the turn settled; Ctrl-D exits (code 0)."""
    pty = Pty(["chat", "--model", "scripted:moves.jsonl"], chat_dir)
    try:
        pty.expect("Ctrl-D exits")
        pty.expect("you:")
        pty.send("hi\r")
        pty.expect("Hello from the script.")
        pty.expect("you:")
        pty.send("run it\r")
        pty.expect("Bash: echo begun; sleep 30  (process)")
        pty.expect("[n] deny")
        pty.send("y")
        pty.expect("begun")
        pty.send(stop_key)
        pty.expect("stopping")
        pty.expect("stopping: waiting for Bash to finish (process: terminating")
        pty.expect("TOOL_ABORTED: stopped while running")
        pty.expect("stopped: the turn has settled")
        pty.expect("you:")
        pty.send("\x04")
        pty.expect("bye: resume with tether chat --resume session")
        assert pty.wait() == 0
    finally:
        pty.close()


def test_chat_refuses_without_a_model_in_one_line(tmp_path: Path) -> None:
    """No --model and none configured: exit 2 with one line that says what to pass."""
    done = tether("chat", cwd=tmp_path, timeout=30)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "tether: no model: pass --model openai:<model> or --model scripted:<file>,"
        " or set name in the [model] table of the config file"
    ]


def test_chat_ctrl_c_at_the_empty_prompt_exits_and_resume_continues(
    chat_dir: Path,
) -> None:
    """Ctrl-C at an empty prompt exits (code 0) with the session id; `--resume` with that
    id continues the session from the account's ledger."""
    pty = Pty(["chat", "--model", "scripted:moves.jsonl"], chat_dir)
    try:
        pty.expect("you:")
        pty.send("hi\r")
        pty.expect("Hello from the script.")
        pty.expect("you:")
        pty.send("\x03")
        screen = pty.expect("bye: resume with tether chat --resume ")
        assert pty.wait() == 0
    finally:
        pty.close()
    session_id = re.findall(r"--resume (session_\S+)", screen)[-1]
    pty = Pty(
        ["chat", "--model", "scripted:moves.jsonl", "--resume", session_id], chat_dir
    )
    try:
        pty.expect(f"session {session_id}")
        pty.expect("resumed: 2 messages, the last ones:")
        pty.expect("you: hi")
        pty.expect("agent: Hello from the script.")
        pty.expect("you:")
        pty.send("\x04")
        assert pty.wait() == 0
    finally:
        pty.close()
    pty = Pty(
        ["chat", "--model", "scripted:moves.jsonl", "--resume", "session_nope"],
        chat_dir,
    )
    try:
        pty.expect("tether: no session session_nope in the ledger")
        assert pty.wait() == 2
    finally:
        pty.close()


def test_chat_refuses_without_a_terminal(chat_dir: Path) -> None:
    """Without a terminal on stdin, chat refuses (exit 2, one line) and names the ways
    programs drive sessions."""
    done = tether(
        "chat",
        "--model",
        "scripted:moves.jsonl",
        cwd=chat_dir,
        stdin=subprocess.DEVNULL,
        timeout=30,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "tether: tether chat needs a terminal on stdin; programs drive sessions"
        " with tether acp or the Agent API"
    ]


TWO_CALLS = "\n".join(
    [
        '{"tether_script": 1}',
        '{"text": "Two at once.", "tool_calls": [{"id": "c1", "name": "Bash",'
        ' "input": {"command": "echo first-ran"}}, {"id": "c2", "name": "Bash",'
        ' "input": {"command": "echo second-ran"}}]}',
        '{"text": "Both done."}',
    ]
)


@pytest.mark.rule("chat-stop")
def test_chat_asks_two_permission_prompts_one_after_the_other(tmp_path: Path) -> None:
    """One model message asks for two calls that both need permission: the prompts come
    one at a time, each key answers its own prompt, both calls run, the turn ends."""
    (tmp_path / "two.jsonl").write_text(TWO_CALLS + "\n")
    pty = Pty(["chat", "--model", "scripted:two.jsonl"], tmp_path)
    try:
        pty.expect("you:")
        pty.send("go\r")
        pty.expect("? allow Bash: echo first-ran")
        pty.expect("[n] deny")
        pty.send("y")
        # The key answers the first prompt; only then is the second one asked.
        pty.expect("  once")
        pty.expect("? allow Bash: echo second-ran")
        pty.expect("[n] deny")
        pty.send("y")
        pty.expect("  once")
        pty.expect("first-ran")
        pty.expect("Both done.", timeout=20)
        pty.expect("you:")
        assert "second-ran" in pty.text
        pty.send("\x04")
        assert pty.wait() == 0
    finally:
        pty.close()


STUBBORN = "\n".join(
    [
        '{"tether_script": 1}',
        '{"text": "Running it.", "tool_calls": [{"id": "c1", "name": "Bash",'
        ' "input": {"command": "trap \'\' TERM; echo begun; echo more; sleep 60"}}]}',
        '{"text": "Understood, stopped."}',
    ]
)


@pytest.mark.rule("chat-stop")
@pytest.mark.parametrize("stop_key", ["\x1b", "\x03"], ids=["esc", "ctrl-c"])
def test_chat_second_press_kills_a_command_that_ignores_the_stop_at_once(
    tmp_path: Path, stop_key: str
) -> None:
    """A command ignores SIGTERM: after the first press the countdown of its grace
    window moves; a second press kills its tree at once (the turn settles within a
    second, though the window is 30 s), and the end line says what it had printed."""
    (tmp_path / "stubborn.jsonl").write_text(STUBBORN + "\n")
    pty = Pty(
        ["chat", "--model", "scripted:stubborn.jsonl"],
        tmp_path,
        env={"TETHER_GRACE": "30"},
    )
    try:
        pty.expect("you:")
        pty.send("go\r")
        pty.expect("[n] deny")
        pty.send("y")
        pty.expect("more")
        pty.send(stop_key)
        pty.expect("(process: terminating, at most 30 s left)")
        pty.expect("Esc or Ctrl-C again kills now")
        pty.expect("(process: terminating, at most 28 s left)", timeout=10)
        pressed = time.monotonic()
        pty.send(stop_key)
        pty.expect("killing now")
        screen = pty.expect("stopped: the turn has settled", timeout=10)
        took = time.monotonic() - pressed
        assert took < 1.0, f"settled {took:.2f} s after the second press"
        # The end line (wrapped at the screen's width) says what the call printed.
        end = " ".join(screen[screen.rindex("✗ Bash") :].split())
        assert "Output so far: 2 lines, the last: more stopped: the turn" in end, end
        pty.expect("you:")
        pty.send("\x04")
        assert pty.wait() == 0
    finally:
        pty.close()


LINES = "\n".join(
    [
        '{"tether_script": 1}',
        '{"text": "Counting.", "tool_calls": [{"id": "c1", "name": "Bash",'
        ' "input": {"command": "seq 1 200"}}]}',
        '{"text": "Counted."}',
    ]
)


def test_chat_shows_twenty_output_lines_and_counts_the_rest(tmp_path: Path) -> None:
    """A call printing 200 lines shows the first 20 and `… 180 more lines`; the exit
    line's resume hint carries the model in use (resuming needs one)."""
    (tmp_path / "lines.jsonl").write_text(LINES + "\n")
    pty = Pty(["chat", "--model", "scripted:lines.jsonl"], tmp_path)
    try:
        pty.expect("you:")
        pty.send("count\r")
        pty.expect("[n] deny")
        pty.send("y")
        pty.expect("│ 20\n")
        screen = pty.expect("│ … 180 more lines")
        pty.expect("✓ Bash: succeeded")
        pty.expect("Counted.")
        assert "│ 21\n" not in screen
        pty.expect("you:")
        pty.send("\x04")
        screen = pty.expect(" --model scripted:lines.jsonl")
        assert re.search(
            r"bye: resume with tether chat --resume session_\S+ --model scripted:",
            screen,
        )
        assert pty.wait() == 0
    finally:
        pty.close()
