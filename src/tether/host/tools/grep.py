"""The Grep tool: ripgrep as a child process, killed and reaped on a stop (S14).

The `rg` binary comes from the `ripgrep` wheel (found through the package's installed
files, never from `PATH`). A stop or cancellation SIGKILLs it and waits, under a bounded
shield, until it is reaped, so no search outlives its call. Grep honours `.gitignore`
files (inside or outside a git work tree), searches hidden files and skips `.git`. It
does not decide whether a path may be searched.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import sysconfig
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, final

import anyio
import anyio.abc
import anyio.lowlevel
import anyio.to_thread
import attrs
import pydantic

from ..._threads import builtin_threads
from ...errors import ErrorCode, ToolFailed
from .._spawn import DEVNULL, start_process
from .._tool import StopClass, Tool, ToolContext, TypedTool
from ._paths import run_stoppable

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..._config import Config

__all__ = ("Grep", "rg_path", "tools")

REAP_BOUND: Final = 1.0
"""Seconds the shielded wait for a killed `rg` may take; SIGKILL makes it milliseconds."""
_STDERR_KEEP: Final = 8192

OutputMode = Literal["content", "files_with_matches", "count"]
"""What Grep returns: matching lines, the matching files, or a count per file."""


@cache
def rg_path() -> str:
    """Return the path of the `rg` binary installed by the `ripgrep` wheel.

    Raises:
        ToolFailed: the `ripgrep` package is not installed in this environment.
    """
    names = {"rg", "rg.exe"}
    try:
        dist = importlib.metadata.distribution("ripgrep")
    except importlib.metadata.PackageNotFoundError:
        dist = None
    if dist is not None:
        for file in dist.files or ():
            if file.name in names:
                located = Path(str(dist.locate_file(file))).resolve()
                if os.access(located, os.X_OK):
                    return str(located)
    scripts = Path(sysconfig.get_path("scripts"))
    for name in names:
        if os.access(scripts / name, os.X_OK):
            return str(scripts / name)
    raise ToolFailed("ripgrep is not installed: install the `ripgrep` package")


class GrepInput(pydantic.BaseModel):
    """Input of Grep; the short options keep their familiar names as aliases."""

    model_config = pydantic.ConfigDict(
        extra="forbid", validate_by_name=True, validate_by_alias=True
    )

    pattern: str = pydantic.Field(description="A regular expression (Rust syntax).")
    path: str | None = pydantic.Field(
        default=None, description="File or directory to search; default: the workspace."
    )
    glob: str | None = pydantic.Field(
        default=None, description="Only files whose path matches this glob (`*.py`)."
    )
    type: str | None = pydantic.Field(
        default=None,
        description="Only files of this ripgrep type (`py`, `rust`, `js`).",
    )
    case_insensitive: bool = pydantic.Field(
        default=False, alias="-i", description="Match without regard to case."
    )
    line_numbers: bool = pydantic.Field(
        default=True, alias="-n", description="Show line numbers (content mode)."
    )
    after: int | None = pydantic.Field(
        default=None, alias="-A", ge=0, description="Lines after each match (content)."
    )
    before: int | None = pydantic.Field(
        default=None, alias="-B", ge=0, description="Lines before each match (content)."
    )
    context: int | None = pydantic.Field(
        default=None, alias="-C", ge=0, description="Lines around each match (content)."
    )
    output_mode: OutputMode = pydantic.Field(
        default="files_with_matches",
        description="`content`: matching lines; `files_with_matches`: file paths; "
        "`count`: matches per file.",
    )
    head_limit: int | None = pydantic.Field(
        default=None, ge=1, description="Return only the first N lines or entries."
    )
    multiline: bool = pydantic.Field(
        default=False, description="Let `.` and patterns span lines (`rg -U`)."
    )


def build_argv(inp: GrepInput, rg: str) -> list[str]:
    """Return the `rg` command line for an input."""
    argv = [
        rg,
        "--no-config",
        "--color=never",
        "--no-heading",
        "--with-filename",
        "--hidden",
        "--no-require-git",
        "--glob=!.git",
        "--max-columns=500",
        "--max-columns-preview",
    ]
    match inp.output_mode:
        case "files_with_matches":
            argv.append("--files-with-matches")
        case "count":
            argv.append("--count")
        case "content":
            argv.append("--line-number" if inp.line_numbers else "--no-line-number")
            for flag, value in (
                ("-A", inp.after),
                ("-B", inp.before),
                ("-C", inp.context),
            ):
                if value is not None:
                    argv += [flag, str(value)]
    if inp.case_insensitive:
        argv.append("--ignore-case")
    if inp.multiline:
        argv += ["--multiline", "--multiline-dotall"]
    if inp.type:
        argv += ["--type", inp.type]
    if inp.glob:
        argv += ["--glob", inp.glob]
    argv += ["--regexp", inp.pattern]
    if inp.path:
        argv += ["--", inp.path]
    return argv


@final
class Grep(TypedTool):
    """Search file contents with ripgrep."""

    input_model: type[pydantic.BaseModel] = GrepInput

    name = "Grep"
    stop_class = StopClass.READ_ONLY
    subject_field: str | None = "path"
    description = (
        "Search file contents with ripgrep (Rust regex syntax). Filter files with `glob` "
        "or `type`; `output_mode` is `files_with_matches` (default), `content` (with "
        "`-n`, `-A`, `-B`, `-C`) or `count`; `head_limit` keeps the first N entries; "
        "`-i` ignores case; `multiline` lets matches span lines. Honours .gitignore."
    )

    def __init__(
        self, *, max_output_bytes: int = 100_000, timeout: float = 120.0
    ) -> None:
        """Make the tool.

        Args:
            max_output_bytes: bound on the output kept; the search ends once it is hit.
            timeout: seconds a search may take before it is killed (`TOOL_TIMEOUT`).
        """
        self.max_output_bytes = max_output_bytes
        self.timeout = timeout

    async def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> str:
        """Run `rg`; a stop kills it and returns only once it is reaped.

        Raises:
            ToolFailed: `rg` could not start, reported an error, or timed out.
        """
        inp = GrepInput.model_validate(dict(args))
        argv = build_argv(inp, rg_path())
        limit = inp.head_limit if inp.output_mode == "content" else None
        try:
            with anyio.fail_after(self.timeout):
                code, out, err, cut = await run_stoppable(
                    ctx, lambda: self._search(ctx, argv, limit)
                )
        except TimeoutError:
            raise ToolFailed(
                f"Grep ran past its time limit of {self.timeout:g} s and was killed",
                code=ErrorCode.TOOL_TIMEOUT,
            ) from None
        if code == 2 and not out:
            raise ToolFailed(f"Grep failed: {err.strip() or 'rg exited with status 2'}")
        return self._render(inp, out, cut)

    async def _search(
        self, ctx: ToolContext, argv: list[str], limit: int | None
    ) -> tuple[int, str, str, bool]:
        """Run `rg` and collect its output; kill and reap it on every way out."""
        read_end, write_end = os.pipe()
        try:
            process = start_process(
                argv,
                stdin=DEVNULL,
                stdout=write_end,
                cwd=ctx.workspace,
                # No new session: rg starts no children, so killing its pid is enough,
                # and with scheduler autogroups a session of its own would get a
                # smaller CPU share on a busy machine.
            )
        except BaseException as exc:
            os.close(read_end)
            if isinstance(exc, OSError):
                raise ToolFailed(f"Grep could not start rg: {exc.strerror}") from None
            raise
        finally:
            os.close(write_end)
        rg = _Rg(process)
        err = bytearray()
        collecting = False
        try:
            ctx.progress(f"Grep: searching (rg pid {process.pid})")
            collecting = True  # from here the reader owns (and closes) `read_end`
            out, cut = await self._collect(rg, read_end, limit, err)
            code = await process.wait()
        finally:
            if not collecting:
                os.close(read_end)
            # S14: the search must not outlive its call; kill, then reap (bounded).
            with anyio.move_on_after(REAP_BOUND, shield=True):
                if process.returncode is None:
                    rg.kill()
                await process.aclose()
        text = out.decode("utf-8", errors="replace")
        return code, text, err.decode("utf-8", errors="replace"), cut

    async def _collect(
        self, rg: _Rg, fd: int, limit: int | None, err: bytearray
    ) -> tuple[bytes, bool]:
        """Read rg's output in a worker thread (which owns and closes `fd`).

        The first few KiB of rg's stderr go into `err`. The reader is never abandoned: on cancellation the sibling task kills rg, the
        pipe reaches its end and the reader returns, so no thread outlives the call.
        Reading in a thread rather than through the event loop keeps the cost per
        chunk that of a plain blocking read (docs/benchmarks: Grep speed).
        """
        async with anyio.create_task_group() as tg:
            tg.start_soon(rg.kill_when_cancelled)
            tg.start_soon(_drain, rg.process.stderr, err)
            out, cut = await anyio.to_thread.run_sync(
                _read_output,
                fd,
                limit,
                self.max_output_bytes,
                abandon_on_cancel=False,
                limiter=builtin_threads(),
            )
            if cut:
                rg.kill()  # enough output: the rest of the search is waste
            rg.finished = True
            rg.done.set()  # the watcher returns; stderr is drained to its end
        # A stop that killed rg must surface here, not pass for a short result: the
        # thread returned normally, and nothing after this point is sure to yield.
        await anyio.lowlevel.checkpoint_if_cancelled()
        return out, cut

    def _render(self, inp: GrepInput, out: str, cut: bool) -> str:
        lines = out.splitlines()
        if inp.output_mode != "content":
            lines.sort()
        limit = inp.head_limit
        shown = lines if limit is None else lines[:limit]
        if not shown:
            return "No matches found."
        body = "\n".join(shown)
        match inp.output_mode:
            case "files_with_matches":
                head = f"Found {len(lines)} file{'s' if len(lines) != 1 else ''}"
                if len(shown) < len(lines):
                    head += f" (showing {len(shown)})"
                text = f"{head}\n{body}"
            case "count":
                total = sum(_count(line) for line in shown)
                text = f"{body}\n[{total} matching lines in {len(shown)} files]"
            case "content":
                text = body
        if cut or (limit is not None and len(lines) > limit):
            text += "\n[output cut at the head limit or size bound; narrow the search]"
        return text


def _count(line: str) -> int:
    value = line.rpartition(":")[2]
    return int(value) if value.isdigit() else 0


@attrs.define
class _Rg:
    """A running rg and whether it was killed (a second SIGKILL could race the reaper)."""

    process: anyio.abc.Process
    killed: bool = False
    finished: bool = False
    """Set once its output was read to the end: a kill now would be needless."""
    done: anyio.Event = attrs.field(factory=anyio.Event)

    def kill(self) -> None:
        if not self.killed and self.process.returncode is None:
            self.killed = True
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()

    async def kill_when_cancelled(self) -> None:
        """Wait until the output is read; killed on the way out unless it was."""
        try:
            await self.done.wait()
        finally:
            if not self.finished:
                self.kill()


async def _drain(stream: anyio.abc.ByteReceiveStream | None, into: bytearray) -> None:
    if stream is None:
        return
    async for chunk in stream:
        if len(into) < _STDERR_KEEP:
            into += chunk[: _STDERR_KEEP - len(into)]


def _read_output(fd: int, limit: int | None, max_bytes: int) -> tuple[bytes, bool]:
    """Read a pipe to its end, or until `limit` lines or `max_bytes`; close it."""
    out = bytearray()
    lines = 0
    try:
        while chunk := os.read(fd, 1 << 20):
            out += chunk
            if limit is not None:
                lines += chunk.count(b"\n")
                if lines >= limit:
                    return bytes(out), True
            if len(out) > max_bytes:
                return bytes(out), True
        return bytes(out), False
    finally:
        os.close(fd)


def tools(config: Config) -> list[Tool]:
    """Return the Grep tool."""
    del config
    return [Grep()]
