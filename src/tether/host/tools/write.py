"""The Write tool: replace or create a whole file, atomically (MUTATING).

Write never leaves a half-written file: it writes a temp file beside the target,
fsyncs it and renames it over the target, all relative to a descriptor of the target's
directory resolved beneath the workspace (S15), so no link swapped meanwhile redirects
it. Once started it is not abandoned by a stop
(the runtime waits for its real result). It does not decide whether a path may be
written: the permission broker does, with `_paths.is_inside()` for workspace rules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, final

import anyio.to_thread
import pydantic

from ..._threads import builtin_threads
from ...errors import ToolFailed
from .._tool import StopClass, Tool, ToolContext, TypedTool
from ._paths import PathEscapes, escape_message, replace_file, resolve

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from ..._config import Config

__all__ = ("Write", "tools")


class WriteInput(pydantic.BaseModel):
    """Input of Write."""

    model_config = pydantic.ConfigDict(extra="forbid")

    file_path: str = pydantic.Field(
        description="The file to write; a relative path is taken from the workspace."
    )
    content: str = pydantic.Field(description="The whole new content of the file.")


def write_text(workspace: Path, path: Path, content: str) -> str:
    """Write `content` (UTF-8) to `path` atomically, creating parent directories.

    A path inside `workspace` is resolved once, beneath it (S15).

    Raises:
        ToolFailed: the file or a parent directory cannot be written, or the path
            leads outside the workspace.
    """
    data = content.encode("utf-8", errors="surrogateescape")
    try:
        existed = replace_file(workspace, path, data)
    except PathEscapes:
        raise ToolFailed(escape_message(path)) from None
    except IsADirectoryError:
        raise ToolFailed(f"{path} exists and is not a regular file") from None
    except OSError as exc:
        raise ToolFailed(
            f"{path} could not be written: {exc.strerror or exc}"
        ) from None
    verb = "Replaced" if existed else "Created"
    return f"{verb} {path} ({len(data)} bytes)."


@final
class Write(TypedTool):
    """Write a whole file, atomically."""

    input_model: type[pydantic.BaseModel] = WriteInput

    name = "Write"
    stop_class = StopClass.MUTATING
    subject_field: str | None = "file_path"
    description = (
        "Write a file with the given content, replacing it if it exists. The write is "
        "atomic (readers see the old file or the new one) and keeps an existing file's "
        "mode. Parent directories are created. Prefer Edit for changing part of a file."
    )

    async def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> str:
        """Write the file in a worker thread and wait for it, whatever happens.

        Raises:
            ToolFailed: the file could not be written; it is left as it was.
        """
        inp = WriteInput.model_validate(dict(args))
        path = resolve(ctx.workspace, inp.file_path)
        # MUTATING: the write is never abandoned; its real result is the call's result.
        return await anyio.to_thread.run_sync(
            write_text,
            ctx.workspace,
            path,
            inp.content,
            abandon_on_cancel=False,
            limiter=builtin_threads(),
        )


def tools(config: Config) -> list[Tool]:
    """Return the Write tool."""
    del config
    return [Write()]
