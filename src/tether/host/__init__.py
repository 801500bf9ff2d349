"""The tool host: runs tool calls, owns permissions, admission and process trees.

A lazy face: each name is imported on first use, so that a module of the host (the
process spawner `tether.runs` runs git through) loads without the whole host, and a
`tether` command that never runs a tool does not pay for its import.
"""

from __future__ import annotations

from .._lazy import lazy_exports as _lazy_exports

TYPE_CHECKING = False  # spelled as the other faces spell it
if TYPE_CHECKING:
    from ._contain import CommandOutcome as CommandOutcome
    from ._contain import Containment as Containment
    from ._contain import containment as containment
    from ._proctree import run_command as run_command
    from ._protocol import AbortSource as AbortSource
    from ._protocol import Approver as Approver
    from ._protocol import ElicitationAnswer as ElicitationAnswer
    from ._protocol import ElicitationRequest as ElicitationRequest
    from ._protocol import Elicitor as Elicitor
    from ._protocol import PermissionRequest as PermissionRequest
    from ._rules import PermissionRules as PermissionRules
    from ._tool import FunctionTool as FunctionTool
    from ._tool import StopClass as StopClass
    from ._tool import Tool as Tool
    from ._tool import ToolContext as ToolContext
    from ._tool import tool as tool
    from .tools._beneath import path_resolution as path_resolution

__all__, __getattr__, __dir__ = _lazy_exports(
    __name__,
    {
        "._contain": ("CommandOutcome", "Containment", "containment"),
        "._proctree": ("run_command",),
        "._protocol": (
            "AbortSource",
            "Approver",
            "ElicitationAnswer",
            "ElicitationRequest",
            "Elicitor",
            "PermissionRequest",
        ),
        "._rules": ("PermissionRules",),
        "._tool": ("FunctionTool", "StopClass", "Tool", "ToolContext", "tool"),
        ".tools._beneath": ("path_resolution",),
    },
)
