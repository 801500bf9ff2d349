"""The `tether` command: `main()` and the click group `cli`.

`tether guard --claude-hook` runs before every tool call of an agent, so `main()` judges
that one command line without importing click or any command (spec 05: the hook costs at
most 3x a bare interpreter's start); every other command line goes to the click
application. Exit codes: 0 ok, 1 failure, 2 refused or usage; errors are one line that
says what to do.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # `typing` is not imported: the per-call hook starts here
if TYPE_CHECKING:
    from ._app import cli as cli

__all__ = ("cli", "main")

_HOOK_ARGV = ["guard", "--claude-hook"]
"""The command line that hook settings run (`tether guard --print-hook-config`)."""


def main() -> None:
    """Run the `tether` command, mapping tether errors to one line and an exit code."""
    if sys.argv[1:] == _HOOK_ARGV:
        from ._hook import run_claude_hook

        run_claude_hook()
    from ._app import main as run_app

    run_app()


def __getattr__(name: str) -> object:
    if name == "cli":
        from ._app import cli

        return cli
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
