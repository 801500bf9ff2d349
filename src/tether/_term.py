"""Terminal output shared by every command: one rich console that honours `NO_COLOR`.

`NO_COLOR` (https://no-color.org) set to anything turns off all styling — colour, bold,
underline — since rich's own `NO_COLOR` support drops colour but keeps the rest. A closed
pipe surfaces as `BrokenPipeError` for the CLI's `main()` to treat once, instead of
rich's own exit.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ("plain", "rich_console")


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
