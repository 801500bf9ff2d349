"""The Edit tool: exact string replacement in a file, atomically (MUTATING).

Edit refuses a missing match and an ambiguous one (several matches without
`replace_all`), so it never changes a place the caller did not mean. Bytes that are not
UTF-8 are carried through unchanged. Like Write it is not abandoned once started, it
reads and replaces the file through one directory descriptor resolved beneath the
workspace (S15), and it does not decide whether a path may be edited.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, final

import anyio.to_thread
import pydantic

from ..._threads import builtin_threads
from ...errors import ToolFailed
from .._tool import StopClass, Tool, ToolContext, TypedTool
from ._paths import (
    PathEscapes,
    escape_message,
    located,
    read_regular_at,
    replace_at,
    resolve,
)

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from ..._config import Config

__all__ = ("Edit", "tools")


class EditInput(pydantic.BaseModel):
    """Input of Edit."""

    model_config = pydantic.ConfigDict(extra="forbid")

    file_path: str = pydantic.Field(
        description="The file to edit; a relative path is taken from the workspace."
    )
    old_string: str = pydantic.Field(description="The exact text to replace.")
    new_string: str = pydantic.Field(description="The text to put in its place.")
    replace_all: bool = pydantic.Field(
        default=False, description="Replace every occurrence instead of exactly one."
    )


EDIT_LIMIT = 64 << 20
"""Largest file Edit reads, in bytes."""


def edit_text(
    workspace: Path, path: Path, old: str, new: str, replace_all: bool
) -> str:
    """Replace `old` by `new` in the file at `path` and write it back atomically.

    The path is resolved once (beneath `workspace` when inside it, S15); the file is
    read and replaced through that one directory descriptor.

    Raises:
        ToolFailed: the file is missing or unreadable, `old` is empty, equal to `new`,
            not found, or found more than once without `replace_all`, or the path
            leads outside the workspace.
    """
    if not old:
        raise ToolFailed("old_string is empty; use Write to create or replace a file")
    if old == new:
        raise ToolFailed("old_string and new_string are the same; nothing to change")
    try:
        with located(workspace, path) as (dir_fd, name):
            return _edit_at(dir_fd, name, path, old, new, replace_all)
    except PathEscapes:
        raise ToolFailed(escape_message(path)) from None
    except FileNotFoundError:
        raise ToolFailed(f"{path} does not exist; use Write to create it") from None
    except OSError as exc:
        raise ToolFailed(f"{path} cannot be edited: {exc.strerror or exc}") from None


def _edit_at(
    dir_fd: int, name: str, path: Path, old: str, new: str, replace_all: bool
) -> str:
    try:
        # Never blocks on a FIFO, never opens a device, never reads without a bound.
        raw = read_regular_at(dir_fd, name, EDIT_LIMIT)
    except FileNotFoundError:
        raise ToolFailed(f"{path} does not exist; use Write to create it") from None
    except OSError as exc:
        raise ToolFailed(f"{path} cannot be edited: {exc.strerror or exc}") from None
    # surrogateescape: bytes that are not UTF-8 survive the round trip unchanged.
    text = raw.decode("utf-8", errors="surrogateescape")
    count = text.count(old)
    if count == 0:
        raise ToolFailed(
            f"old_string was not found in {path}; read the file and copy the text "
            "exactly, with its whitespace"
        )
    if count > 1 and not replace_all:
        raise ToolFailed(
            f"old_string occurs {count} times in {path}; give more surrounding text to "
            "make it unique, or set replace_all to replace every occurrence"
        )
    changed = text.replace(old, new) if replace_all else text.replace(old, new, 1)
    try:
        replace_at(
            dir_fd, name, changed.encode("utf-8", errors="surrogateescape"), shown=path
        )
    except OSError as exc:
        raise ToolFailed(
            f"{path} could not be written: {exc.strerror or exc}"
        ) from None
    return f"Replaced {count if replace_all else 1} occurrence{'s' if replace_all and count > 1 else ''} in {path}."


@final
class Edit(TypedTool):
    """Replace an exact string in a file, atomically."""

    input_model: type[pydantic.BaseModel] = EditInput

    name = "Edit"
    stop_class = StopClass.MUTATING
    subject_field: str | None = "file_path"
    description = (
        "Replace an exact string in a file. `old_string` must occur exactly once unless "
        "`replace_all` is set; the file is written back atomically."
    )

    async def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> str:
        """Edit the file in a worker thread and wait for it, whatever happens.

        Raises:
            ToolFailed: the edit was refused or failed; the file is left as it was.
        """
        inp = EditInput.model_validate(dict(args))
        path = resolve(ctx.workspace, inp.file_path)
        # MUTATING: the edit is never abandoned; its real result is the call's result.
        return await anyio.to_thread.run_sync(
            edit_text,
            ctx.workspace,
            path,
            inp.old_string,
            inp.new_string,
            inp.replace_all,
            abandon_on_cancel=False,
            limiter=builtin_threads(),
        )


def tools(config: Config) -> list[Tool]:
    """Return the Edit tool."""
    del config
    return [Edit()]
