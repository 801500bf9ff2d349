"""The tool host: runs tool calls, owns permissions, admission and process trees."""

from __future__ import annotations

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
from .tools._beneath import resolver_kind as path_resolution

__all__ = (
    "AbortSource",
    "Approver",
    "CommandOutcome",
    "Containment",
    "ElicitationAnswer",
    "ElicitationRequest",
    "Elicitor",
    "FunctionTool",
    "PermissionRequest",
    "PermissionRules",
    "StopClass",
    "Tool",
    "ToolContext",
    "containment",
    "path_resolution",
    "run_command",
    "tool",
)
