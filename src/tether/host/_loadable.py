"""Whether the stdio host, a separate Python process, can load the tools it is given.

The stdio host loads each tool by import (`module:name`). A tool defined in the script
being run lives in `__main__`, which the host process cannot import, and a module found
only through the script's own folder is not on the host's path either. Both would fail
late, as a lost host; this module refuses them when the runtime starts. It does not
start a process: it reasons about the paths the host process will have.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ._tool import Tool

__all__ = ("check_stdio_loadable",)


def check_stdio_loadable(tools: Sequence[Tool]) -> None:
    """Refuse tools that `tether host --stdio` could not import by module path.

    Raises:
        UsageError: one line naming the first such tool and what to do.
    """
    from ._stdio import tool_ref  # the host's own module, loaded only for stdio

    for tool in tools:
        ref = tool_ref(tool)
        module, _, attr = ref.partition(":")
        if module == "builtin":
            continue
        if module == "__main__":
            raise UsageError(
                f"tool {tool.name} is defined in the script being run (__main__), which "
                "the stdio host cannot import; move it into a module of its own (say "
                f"{attr.lower()}.py next to the script, run from that folder) and import "
                'it from there, or use host="inprocess"'
            )
        root = _import_root(module)
        if root is not None and not _on_host_path(root):
            raise UsageError(
                f"tool {tool.name} comes from {root}, which the stdio host cannot "
                f"import from its working directory {Path.cwd()}; run from {root} or "
                f"add it to PYTHONPATH"
            )


def _import_root(module: str) -> Path | None:
    """The folder a module's top-level package was imported from, if it is a file."""
    top = sys.modules.get(module.partition(".")[0])
    file = getattr(top, "__file__", None)
    if top is None or file is None:
        return None
    path = Path(file).resolve().parent
    # A package's __init__ sits one folder below the folder on the path.
    return path.parent if hasattr(top, "__path__") else path


def _on_host_path(root: Path) -> bool:
    """Whether `root` is on the path of a `python -m tether` started here.

    The host has the working directory, `PYTHONPATH` and the installation's own folders;
    it does not have the folder of the script being run (`sys.path[0]`) unless that is
    the working directory.
    """
    entries = [str(Path.cwd()), *sys.path[1:], *sysconfig.get_paths().values()]
    entries += os.environ.get("PYTHONPATH", "").split(os.pathsep)
    return root in {Path(p).resolve() for p in entries if p}
