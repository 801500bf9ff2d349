"""`tether chat` with an OpenAI-compatible model: the local stub server answers it, on a
real pseudo-terminal (the server runs in a thread of its own, the chat in a child)."""

from __future__ import annotations

import datetime
import re
import shlex
from contextlib import contextmanager
from typing import TYPE_CHECKING

import anyio.from_thread
import pytest
from tests.cli._pty import Pty

from tether.testing import ModelServer, Reply, error_reply, text_reply

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from pathlib import Path

pytestmark = pytest.mark.slow


MODEL = "openai:stub"


@contextmanager
def serving(replies: Sequence[Reply]) -> Iterator[ModelServer]:
    """A `ModelServer` on its own event loop in a thread, for a child to reach."""
    with (
        anyio.from_thread.start_blocking_portal() as portal,
        portal.wrap_async_context_manager(ModelServer.open(replies)) as server,
    ):
        yield server


@pytest.fixture(autouse=True)
def _endpoint_only_from_the_test(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TETHER_MODEL_URL", "TETHER_MODEL_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def _env(server: ModelServer) -> dict[str, str]:
    return {"TETHER_MODEL_URL": server.url, "TETHER_MODEL_KEY": "local"}


def _one_turn(
    args: list[str], cwd: Path, server: ModelServer, answer: str
) -> tuple[str, str]:
    """Run chat, send one line, wait for `answer`, exit; return the screen and raw."""
    pty = Pty(["chat", "--model", MODEL, *args], cwd, env=_env(server))
    try:
        pty.expect("you:")
        pty.send("hi\r")
        pty.expect(answer)
        pty.expect("you:")
        pty.send("\x04")
        screen = pty.expect("bye: resume with ")
        assert pty.wait() == 0
    finally:
        pty.close()
    return screen, pty.raw.decode(errors="replace")


def test_chat_shows_it_waits_for_the_model_and_each_retry_then_clears_it(
    tmp_path: Path,
) -> None:
    """A request whose endpoint is busy does not leave the screen blank
    while the retries ran. A status line says the model is waited for, then names the
    retry and why; it is cleared from the screen when the answer starts."""
    replies = [error_reply(503, "busy", retry_after_ms=20), text_reply("Hello late.")]
    with serving(replies) as server:
        screen, raw = _one_turn([], tmp_path, server, "Hello late.")
    assert "waiting for the model…" in screen
    retry = "waiting for the model: the endpoint answered 503 Service Unavailable;"
    assert f"{retry} retry 1 of 2" in screen
    # On the terminal the status line is taken back (cursor up, clear) before the answer.
    shown = raw.index("retry 1 of 2")
    cleared = raw.index("\x1b[1F\x1b[J", shown)
    assert cleared < raw.index("Hello late.", shown)
    assert len(server.requests) == 2


def _config(tether_home: Path, text: str) -> None:
    config = tether_home / "config" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(text, encoding="utf-8")


@pytest.mark.parametrize("source", ["default", "option", "config", "none"])
def test_the_request_carries_the_system_message(
    source: str, tmp_path: Path, tether_home: Path
) -> None:
    """Requests carry a system message. With none given it names the
    workspace and the date; `--system` wins over `system` in the config's `[model]`
    table; `--system ""` sends none. The resume hint repeats a `--system` given (the
    transcript does not keep the system message)."""
    workspace = tmp_path / "work"
    workspace.mkdir()
    args = ["--workspace", str(workspace)]
    if source == "option":
        _config(tether_home, '[model]\nsystem = "From the config."\n')
        args += ["--system", "Answer in one sentence."]
    elif source == "config":
        _config(tether_home, '[model]\nsystem = "From the config."\n')
    elif source == "none":
        args += ["--system", ""]
    with serving([text_reply("Fine.")]) as server:
        screen, _ = _one_turn(args, tmp_path, server, "Fine.")
    (request,) = server.requests
    # The resume hint repeats a system message given on the command line.
    (hint,) = re.findall(r"bye: resume with (tether chat .*)", screen)
    expected = ["--model", MODEL]
    if "--system" in args:
        expected += ["--system", args[args.index("--system") + 1]]
    assert shlex.split(hint)[4:] == expected
    messages = request["messages"]
    if source == "none":
        assert messages == [{"role": "user", "content": "hi"}]
        return
    assert messages[1:] == [{"role": "user", "content": "hi"}]
    assert messages[0]["role"] == "system"
    system = messages[0]["content"]
    if source == "default":
        today = datetime.date.today()
        assert system == (
            f"You work in the directory {workspace}: the tools' relative paths start"
            f" there. Today is {today:%A}, {today.isoformat()}."
        )
    else:
        given = {"option": "Answer in one sentence.", "config": "From the config."}
        assert system == given[source]


def test_the_resume_hint_resumes_with_its_model_and_no_config_file(
    tmp_path: Path, tether_home: Path
) -> None:
    """The exit line's hint keeps the `--model` in use, or
    without a config file it could not resume. Run as printed (the endpoint in the
    environment), it continues the session: the next request carries the first turn."""
    replies = [text_reply("First answer."), text_reply("Second answer.")]
    with serving(replies) as server:
        screen, _ = _one_turn([], tmp_path, server, "First answer.")
        assert not (tether_home / "config" / "config.toml").exists()
        hint = re.findall(r"bye: resume with (tether chat .*)", screen)[-1].strip()
        argv = shlex.split(hint)
        assert argv[:3] == ["tether", "chat", "--resume"]
        assert argv[4:] == ["--model", MODEL]
        pty = Pty(argv[1:], tmp_path, env=_env(server))
        try:
            pty.expect(f"session {argv[3]}")
            pty.expect("resumed: 2 messages, the last ones:")
            pty.expect("you:")
            pty.send("again\r")
            pty.expect("Second answer.")
            pty.expect("you:")
            pty.send("\x04")
            assert pty.wait() == 0
        finally:
            pty.close()
    turns = [m for m in server.requests[1]["messages"] if m["role"] != "system"]
    assert turns == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "First answer."},
        {"role": "user", "content": "again"},
    ]
