"""The guard: refuses an agent's tool call that would set, lift or tamper with a stop.

Two parts, one floor. The one shell model (`parse_script`, the wrapper table) splits a
command the way Bash would; the permission rules (`tether.host.PermissionRules`) read
commands through it too, so one command is never split two ways. The judgment (`StopGuard`,
`guard_tool_call`, and `Judge`, the same judgment without attrs, `typing` or
`pathlib` for a process whose start counts, such as the per-call hook) answers one tool
call against the protected paths.

Boundary: the guard is given the protected paths (`tether.stop.protected_paths()`
finds them), runs nothing, and holds against an agent acting by mistake; against one
acting on purpose only an operating-system account boundary binds (spec 02, "The
guard"). It imports nothing of the stop or the host: both floors above it use it.
Names are imported on first use (the hook imports this face for `Judge` alone).
"""

from __future__ import annotations

from .._lazy import lazy_exports as _lazy_exports

TYPE_CHECKING = False  # `typing` is not imported: the per-call hook starts here
if TYPE_CHECKING:
    from ._guard import GuardVerdict as GuardVerdict
    from ._guard import StopGuard as StopGuard
    from ._guard import guard_tool_call as guard_tool_call
    from ._judge import Judge as Judge
    from ._programs import SHELL_KEYWORDS as SHELL_KEYWORDS
    from ._programs import WRAPPERS as WRAPPERS
    from ._shell import Redirect as Redirect
    from ._shell import Script as Script
    from ._shell import ShellSyntaxError as ShellSyntaxError
    from ._shell import ShellTooComplex as ShellTooComplex
    from ._shell import SimpleCommand as SimpleCommand
    from ._shell import parse_script as parse_script

__all__, __getattr__, __dir__ = _lazy_exports(
    __name__,
    {
        "._guard": ("GuardVerdict", "StopGuard", "guard_tool_call"),
        "._judge": ("Judge",),
        "._programs": ("SHELL_KEYWORDS", "WRAPPERS"),
        "._shell": (
            "Redirect",
            "Script",
            "ShellSyntaxError",
            "ShellTooComplex",
            "SimpleCommand",
            "parse_script",
        ),
    },
)
