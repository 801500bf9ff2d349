"""Terminal output shared by every command: one rich console that honours `NO_COLOR`.

`NO_COLOR` (https://no-color.org) set to anything turns off all styling — colour, bold,
underline — since rich's own `NO_COLOR` support drops colour but keeps the rest. A closed
pipe surfaces as `BrokenPipeError` for the CLI's `main()` to treat once, instead of
rich's own exit. `visible` makes what another program printed safe for a terminal.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ("plain", "rich_console", "visible")


def plain() -> bool:
    """Whether styling is turned off (`NO_COLOR` set to a non-empty value)."""
    return bool(os.environ.get("NO_COLOR"))


def rich_console(file: TextIO | None = None) -> Console:
    """Return a rich console for `file` (stdout by default) that honours `NO_COLOR`."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            raise BrokenPipeError

    return _Console(
        file=file, highlight=False, color_system=None if plain() else "auto"
    )


_SGR = re.compile(r"\x1b\[[0-9;:]*m")
"""A colour or style sequence: dropped from what is shown."""
_UNSEEN = re.compile(r"\r\n|[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _picture(found: re.Match[str]) -> str:
    char = found.group()
    if char == "\r\n":
        return "\n"
    code = ord(char)
    if code == 0x1B:
        return "␛"
    if code < 0x20:
        return chr(0x2400 + code)  # ␀ … ␟
    if code == 0x7F:
        return "␡"
    return "␛" + chr(code - 0x40)  # a C1 control is ESC and a letter: ␛[ for CSI


def visible(text: str) -> str:
    """`text` with no control sequence left in it: each shown as text instead.

    What another program printed reaches the person's terminal through this (spec 01
    S16): colours (SGR) are dropped, every other escape shows its ESC as `␛` and the
    rest as text (`␛]52;c;…` for a clipboard write), other control characters as
    their pictures (`␇`, `␍`, `␈`; a C1 control as `␛` and its letter). Printable
    text, tabs and line ends (CR LF too) stay as they are.
    """
    return _UNSEEN.sub(_picture, _SGR.sub("", text))
