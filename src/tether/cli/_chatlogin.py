"""The first `tether chat` offers the person to authorise an MCP server that needs it.

When the chat's runtime starts a streamable-HTTP server that refuses tether for want of
authorisation (no tokens, or tokens it refused and the SDK could not refresh), the
chat asks on one line, before the first turn: `Authorise now? [Y/n]`. Yes runs the
login of `tether mcp login NAME` (`_mcplogin.login_named`: the URL printed, the redirect
taken on a loopback port or the URL pasted here), and the server is connected at once;
no, or Ctrl-C while the login waits, and the chat goes on without it, the runtime's note
naming `tether mcp login NAME`.

The keys are read as the chat reads them during a turn (prompt_toolkit's input in raw
mode): a Ctrl-C is a key here, never a signal. This module only asks; which servers
are offered is `McpTools`' (`host/_mcpperson.py`); whether the chat offers at all is
`offers_login()` (a terminal on both ends, not `--no-login`, not in an agent session).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectSendStream
    from prompt_toolkit.input import Input
    from rich.console import Console

    from .._config import Config

__all__ = ("LoginOffer", "offers_login")

_YES = ("y", "Y", "\r", "\n")
_NO = ("n", "N")


class LoginOffer:
    """The chat's `Authoriser`: asks the person, logs in, says what came of it."""

    def __init__(
        self, console: Console, keys: Input, config: Config, *, timeout: float = 300.0
    ) -> None:
        self.console = console
        self.keys = keys
        self.config = config
        self.timeout = timeout
        """How long a login waits for the person, in seconds."""
        self._lock: anyio.Lock | None = None
        self._question: tuple[anyio.Event, list[bool]] | None = None
        """The Y/n on the screen, while it waits: set with the answer."""
        self._login: tuple[anyio.Event, list[str], MemoryObjectSendStream[str]] | None
        self._login = None
        """While a login waits: its skip, the line being typed, where lines go."""

    async def __call__(self, server: str, url: str) -> bool:
        """Ask whether to authorise `server` at `url`; log in if so. True: authorised."""
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:  # servers refused together are asked one by one
            with self.keys.raw_mode(), self.keys.attach(self._on_keys):
                if not await self._ask(server, url):
                    return False
                return await self._log_in(server)

    def _print(self, text: str, style: str = "", end: str = "\n") -> None:
        from .._term import visible

        # Not wrapped by rich: a URL stays one line to copy (the terminal wraps it).
        self.console.print(
            visible(text),
            style=style,
            end=end,
            markup=False,
            highlight=False,
            soft_wrap=True,
        )

    async def _ask(self, server: str, url: str) -> bool:
        answered, choice = anyio.Event(), list[bool]()
        self._question = (answered, choice)
        self._print(
            f"MCP server {server!r} ({url}) needs authorisation. Authorise now? [Y/n] ",
            "bold magenta",
            end="",
        )
        try:
            await answered.wait()
        finally:
            self._question = None
        self._print("yes" if choice[0] else "no", "magenta")
        return choice[0]

    async def _log_in(self, server: str) -> bool:
        from ..errors import TetherError
        from ..host._mcplogin import login_named
        from ._mcpauth import login_line, url_shower

        skip = anyio.Event()
        send, receive = anyio.create_memory_object_stream[str](math.inf)
        shown = url_shower(server, self._print)

        def show(text: str) -> None:
            shown(text)
            if text.startswith(("http://", "https://")):
                self._print(f"(Ctrl-C: go on without MCP server {server!r})", "dim")

        self._login = (skip, [], send)
        try:
            with send, receive:
                result = await login_named(
                    self.config,
                    server,
                    show=show,
                    pasted=receive.receive,
                    timeout=self.timeout,
                    skip=skip,
                )
        except TetherError as exc:
            if skip.is_set():
                self._print(
                    f"login skipped: the chat goes on without MCP server {server!r}",
                    "yellow",
                )
            else:
                self._print(str(exc), "red")
            return False
        finally:
            self._login = None
        self._print(login_line(result), "green")
        return True

    def _on_keys(self) -> None:
        """Read the keys typed while the offer is on the screen (raw mode)."""
        from prompt_toolkit.keys import Keys

        for key in self.keys.read_keys() + self.keys.flush_keys():
            if self._question is not None:
                answered, choice = self._question
                stop = key.key in (Keys.ControlC, Keys.Escape)
                if stop or key.data in _YES + _NO:
                    self._question = None
                    choice.append(not stop and key.data in _YES)
                    answered.set()
            elif self._login is not None:
                self._type(key.key, key.data)

    def _type(self, key: object, data: str) -> None:
        """One key while the login waits: Ctrl-C skips; a line pasted is sent at Enter."""
        from prompt_toolkit.keys import Keys

        assert self._login is not None
        skip, line, send = self._login
        out = self.console.file
        if key in (Keys.ControlC, Keys.Escape):
            skip.set()
            return
        if key in (Keys.ControlM, Keys.ControlJ):
            out.write("\n")
            if line:  # an empty line would end the login's reading
                send.send_nowait("".join(line))
                line.clear()
        elif key in (Keys.ControlH, Keys.Backspace):
            if line:
                line.pop()
                out.write("\b \b")
        elif key == Keys.BracketedPaste or data.isprintable():
            line.append(data)
            out.write(data)
        out.flush()


def offers_login(*, no_login: bool, output_is_terminal: bool) -> bool:
    """Whether `tether chat` offers to authorise the servers that need it.

    Authorising a server is the person's act: only at a terminal (stdin is one, or the
    chat is refused; the output must be too, or no one may read the question), not with
    `--no-login`, and never inside an agent session.
    """
    from ._mcpauth import agent_marker

    return not no_login and output_is_terminal and agent_marker() is None
