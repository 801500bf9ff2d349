"""The Glob tool: files matching a pattern, newest first, stoppable while it walks (S14).

Glob walks with `os.scandir` in a worker thread that checks for a stop every few hundred
entries, skips `.git`, honours `.gitignore` files (git's precedence) and does not follow
symlinked directories. It does not decide whether a path may be listed.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, final

import attrs
import pydantic

from ..._glob import compile_glob, expand_braces
from ...errors import ToolFailed
from .._tool import StopClass, Tool, ToolContext, TypedTool
from ._paths import (
    GITIGNORE,
    IgnoreRules,
    check_stop,
    progress_from_thread,
    resolve,
    run_worker,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..._config import Config

__all__ = ("Glob", "compile_glob", "tools")

SKIPPED_DIRS: Final = frozenset({".git"})
"""Directories never entered."""


class GlobInput(pydantic.BaseModel):
    """Input of Glob."""

    model_config = pydantic.ConfigDict(extra="forbid")

    pattern: str = pydantic.Field(
        min_length=1,
        description="A glob such as `**/*.py` or `src/**/*.{ts,tsx}`, relative to `path`.",
    )
    path: str | None = pydantic.Field(
        default=None,
        description="The directory to search in; default: the workspace.",
    )


def _max_depth(pattern: str) -> int | None:
    """Deepest directory level a pattern can match in, or None when `**` is in it."""
    depth = 0
    for expanded in expand_braces(pattern):
        parts = [p for p in expanded.strip("/").split("/") if p not in ("", ".")]
        if "**" in parts:
            return None
        depth = max(depth, len(parts))
    return depth


_MAGIC = re.compile(r"[*?\[{]")


def _split_base(root: Path, pattern: str) -> tuple[Path, str]:
    """Move the pattern's leading literal directories (or an absolute start) into the root."""
    parts = pattern.split("/")
    base = Path("/") if pattern.startswith("/") else root
    while len(parts) > 1 and not _MAGIC.search(parts[0]):
        if parts[0] not in ("", "."):
            base = base / parts[0]
        parts.pop(0)
    return base, "/".join(parts)


@attrs.frozen
class _Found:
    matches: tuple[tuple[float, str], ...]
    scanned: int


@final
class Glob(TypedTool):
    """Find files by name pattern; newest first."""

    input_model: type[pydantic.BaseModel] = GlobInput

    name = "Glob"
    stop_class = StopClass.READ_ONLY
    subject_field: str | None = "path"
    description = (
        "Find files whose path matches a glob pattern (`**/*.py`, `src/**/*.{ts,tsx}`), "
        "searched under `path` (default: the workspace). Files ignored by .gitignore and "
        "the .git directory are skipped. Returns absolute paths, most recently modified "
        "first."
    )

    def __init__(
        self,
        *,
        max_results: int = 100,
        check_every: int = 256,
        progress_every: int = 10_000,
    ) -> None:
        """Make the tool.

        Args:
            max_results: paths listed at most; the rest are counted.
            check_every: directory entries looked at between two checks for a stop.
            progress_every: entries between two progress reports.
        """
        self.max_results = max_results
        self.check_every = check_every
        self.progress_every = progress_every

    async def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> str:
        """Walk the tree in a worker thread that a stop ends within a few entries.

        Raises:
            ToolFailed: `path` is not a directory.
        """
        inp = GlobInput.model_validate(dict(args))
        root, pattern = _split_base(resolve(ctx.workspace, inp.path), inp.pattern)
        if not root.is_dir():
            raise ToolFailed(f"{root} is not a directory")
        found = await run_worker(ctx, lambda: self._walk(ctx, root, pattern))
        if not found.matches:
            return f"No files found matching {inp.pattern!r} in {root}."
        ordered = sorted(found.matches, key=lambda m: (-m[0], m[1]))
        lines = [path for _, path in ordered[: self.max_results]]
        if len(ordered) > self.max_results:
            lines.append(
                f"[{len(ordered) - self.max_results} more files match; showing the "
                f"{self.max_results} most recently modified. Narrow the pattern or path.]"
            )
        return "\n".join(lines)

    def _walk(self, ctx: ToolContext, root: Path, pattern: str) -> _Found:
        regex = compile_glob(pattern)
        max_depth = _max_depth(pattern)
        matches: list[tuple[float, str]] = []
        stack: list[tuple[str, tuple[str, ...], IgnoreRules]] = [
            (str(root), (), IgnoreRules.for_root(root))
        ]
        scanned = 0
        next_check = self.check_every
        next_report = self.progress_every
        while stack:
            directory, parts, rules = stack.pop()
            try:
                with os.scandir(directory) as it:
                    entries: list[os.DirEntry[str]] = []
                    for entry in it:
                        entries.append(entry)
                        scanned += 1
                        if scanned >= next_check:
                            next_check += self.check_every
                            check_stop()  # S14: a stop ends the walk here
            except OSError:
                continue  # unreadable or vanished directory: skipped, as find(1) goes on
            if any(e.name == GITIGNORE for e in entries):
                rules = rules.enter(Path(directory), parts)
            if scanned >= next_report:
                next_report = scanned + self.progress_every
                progress_from_thread(ctx, f"Glob: {scanned} entries scanned")
            for n, entry in enumerate(entries):
                if n % self.check_every == 0:
                    check_stop()
                child = (*parts, entry.name)
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                    if is_dir:
                        if entry.name in SKIPPED_DIRS or rules.ignored(
                            child, is_dir=True
                        ):
                            continue
                        if max_depth is None or len(child) < max_depth:
                            stack.append((entry.path, child, rules))
                        continue
                    if not regex.match("/".join(child)):
                        continue
                    if rules.ignored(child, is_dir=False) or not entry.is_file():
                        continue
                    matches.append((entry.stat().st_mtime, entry.path))
                except OSError:
                    continue  # vanished or dangling entry
        return _Found(tuple(matches), scanned)


def tools(config: Config) -> list[Tool]:
    """Return the Glob tool."""
    del config
    return [Glob()]
