"""The chat's screen in this process: what was printed, and a wake-up on a marker."""

from __future__ import annotations

import io

import anyio

__all__ = ("Screen",)


class Screen(io.StringIO):
    """The chat's screen: what was printed, and a wake-up when `marker` shows."""

    def __init__(self) -> None:
        super().__init__()
        self.marker = ""
        self.shown = anyio.Event()

    def write(self, text: str, /) -> int:
        written = super().write(text)
        if self.marker and self.marker in self.getvalue():
            self.marker = ""
            self.shown.set()
        return written

    async def wait_for(self, marker: str) -> None:
        """Wait until `marker` is on the screen (a prompt's line is printed last)."""
        if marker in self.getvalue():
            return
        self.marker, self.shown = marker, anyio.Event()
        with anyio.fail_after(60):
            await self.shown.wait()
