"""`tether chat` on a real pseudo-terminal: a child read until an expected text shows."""

from __future__ import annotations

import errno
import fcntl
import os
import re
import select
import struct
import subprocess
import termios
import time
from typing import TYPE_CHECKING

from tests.cli._run import TETHER

if TYPE_CHECKING:
    from pathlib import Path

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")


class Pty:
    """A child on a pseudo-terminal, read until an expected text shows."""

    def __init__(
        self, args: list[str], cwd: Path, env: dict[str, str] | None = None
    ) -> None:
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        # The window's size, also where a parent's COLUMNS/LINES would override it.
        env = dict(
            os.environ,
            PROMPT_TOOLKIT_NO_CPR="1",
            TERM="xterm",
            COLUMNS="120",
            LINES="40",
            **(env or {}),
        )
        self.proc = subprocess.Popen(
            [*TETHER, *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
        os.close(slave)
        self.raw = b""
        self.seen = 0

    @property
    def text(self) -> str:
        return _ANSI.sub("", self.raw.decode(errors="replace"))

    def expect(self, needle: str, timeout: float = 20.0) -> str:
        """Wait until `needle` appears after what earlier expects consumed."""
        deadline = time.monotonic() + timeout
        while True:
            at = self.text.find(needle, self.seen)
            if at >= 0:
                self.seen = at + len(needle)
                return self.text
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{needle!r} not shown; the screen:\n{self.text}")
            ready, _, _ = select.select([self.master], [], [], min(left, 0.5))
            if ready:
                try:
                    data = os.read(self.master, 65536)
                except OSError as exc:
                    if exc.errno != errno.EIO:
                        raise
                    data = b""
                if not data:
                    raise AssertionError(f"exited before {needle!r}:\n{self.text}")
                self.raw += data

    def send(self, data: str) -> None:
        os.write(self.master, data.encode())

    def wait(self, timeout: float = 20.0) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            ready, _, _ = select.select([self.master], [], [], 0.2)
            if ready:
                try:
                    self.raw += os.read(self.master, 65536)
                except OSError:
                    break
        return self.proc.wait(timeout=max(0.1, deadline - time.monotonic()))

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)
