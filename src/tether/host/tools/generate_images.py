"""The GenerateImages tool: a configured image command run as a process tree (PROCESS).

`image_command` in the config (or `TETHER_IMAGE_COMMAND`) is a shell command template
with `{prompt}` and `{out}`; both are replaced shell-quoted, so a prompt can never add
words to the command. Each image is one run of the command, through the same process
machinery as Bash (the same containment, SIGTERM on a stop, SIGKILL of the whole tree
when the grace window closes), with the workspace as working directory. Files land in the
workspace as `images/<call id>-<n>.png`; the result lists their paths.

With no `image_command`, a built-in command renders the prompt's text into a PNG with
Pillow: no network, no model. This module does not talk to any image service itself.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, final

import anyio
import anyio.to_thread
import pydantic

from ... import _extras
from ..._env import TetherEnv
from ..._threads import builtin_threads
from ...errors import ErrorCode, ToolFailed, UsageError
from .._proctree import run_command
from .._tool import StopClass, Tool, ToolContext, TypedTool
from .bash import agent_env, describe_exit, lost_supervisor_message

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..._config import Config

__all__ = ("BUILTIN_COMMAND", "GenerateImages", "tools")

BUILTIN_COMMAND = (
    f"{shlex.quote(sys.executable)} "
    f"{shlex.quote(str(Path(__file__).with_name('_render_png.py')))} "
    "--out {out} {prompt}"
)
"""The command used when no `image_command` is configured (Pillow, offline)."""
DEFAULT_TIMEOUT = 300.0
"""Seconds one image command may run."""
OUTPUT_LIMIT = 10_000
"""Bytes of the command's output kept for error messages."""
IMAGES_DIR = "images"
"""Folder of the workspace the images land in."""

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


class GenerateImagesInput(pydantic.BaseModel):
    """Input of the GenerateImages tool."""

    model_config = pydantic.ConfigDict(extra="forbid")

    prompt: str = pydantic.Field(min_length=1, description="What the image shows.")
    count: int = pydantic.Field(
        default=1, ge=1, le=4, description="How many images to make (1 to 4)."
    )


PROMPT_VARIABLE = TetherEnv.PROMPT
"""The environment variable that carries the prompt to the image command."""


def fill(template: str, *, out: Path) -> str:
    """Return `template` with `{prompt}` and `{out}` replaced.

    `{prompt}` becomes `"$TETHER_PROMPT"`: the prompt travels in the environment, never
    in the command text, so no quoting context of the template (even `"{prompt}"`) can
    turn it into shell code. `{out}` is a path tether chose, shell-quoted.
    """
    return template.replace("{prompt}", f'"${PROMPT_VARIABLE}"').replace(
        "{out}", shlex.quote(str(out))
    )


@final
class GenerateImages(TypedTool):
    """Make images with the configured command; files land in the workspace."""

    input_model: type[pydantic.BaseModel] = GenerateImagesInput

    name = "GenerateImages"
    stop_class = StopClass.PROCESS
    subject_field: str | None = "prompt"
    description = (
        "Generate images from a text prompt. The files are saved in the workspace "
        "under images/ and their paths are returned."
    )

    def __init__(
        self, *, command: str | None = None, timeout: float = DEFAULT_TIMEOUT
    ) -> None:
        """Use `command` (a template with `{prompt}` and `{out}`) or the built-in one.

        Raises:
            UsageError: the template lacks `{out}`, so no file could be found.
        """
        template = command or BUILTIN_COMMAND
        if "{out}" not in template:
            raise UsageError(
                "image_command must contain {out}, the file the image is written to"
            )
        self.command = template
        self.timeout = timeout

    async def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> str:
        """Run the command once per image and return the paths written.

        On a stop, returns the images finished so far and the output collected.

        Raises:
            ToolFailed: the command could not start or failed, wrote no file
                (`TOOL_FAILED`), or ran past its timeout (`TOOL_TIMEOUT`).
        """
        folder = ctx.workspace / IMAGES_DIR
        await anyio.to_thread.run_sync(_make_folder, folder, limiter=builtin_threads())
        stem = _UNSAFE.sub("_", ctx.call_id)
        written: list[str] = []
        for n in range(1, args["count"] + 1):
            out = folder / f"{stem}-{n}.png"
            command = fill(self.command, out=out)
            try:
                outcome = await run_command(
                    ["bash", "-c", command],
                    cwd=ctx.workspace,
                    env={**agent_env(), PROMPT_VARIABLE: args["prompt"]},
                    stop=ctx.cancelled,
                    on_output=ctx.progress,
                    timeout=self.timeout,
                    limit=OUTPUT_LIMIT,
                )
            except OSError as exc:
                raise ToolFailed(f"the image command could not start: {exc}") from None
            if outcome.supervisor_lost and not outcome.stopped:
                raise ToolFailed(lost_supervisor_message(outcome))
            if outcome.stopped:
                done = "\n".join(written) or "(none)"
                return f"stopped; images written before the stop:\n{done}\n{outcome.output}"
            if outcome.timed_out:
                raise ToolFailed(
                    f"the image command timed out after {self.timeout:g} s and was "
                    f"killed\n{outcome.output}",
                    code=ErrorCode.TOOL_TIMEOUT,
                )
            if outcome.returncode != 0:
                raise ToolFailed(
                    f"the image command failed {describe_exit(outcome.returncode)}\n"
                    f"{outcome.output}"
                )
            size = await anyio.to_thread.run_sync(_size, out, limiter=builtin_threads())
            if not size:
                raise ToolFailed(
                    f"the image command wrote no file at {IMAGES_DIR}/{out.name}\n"
                    f"{outcome.output}"
                )
            written.append(f"{IMAGES_DIR}/{out.name}")
        return "\n".join(written)


def _make_folder(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)


def _size(path: Path) -> int:
    """The file's size; 0 when there is none."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def unavailable(config: Config) -> str | None:
    """Why GenerateImages cannot be offered with `config`, or None if it can."""
    if config.image_command is None and not _extras.installed("images"):
        return _extras.missing(
            "images", "GenerateImages' built-in renderer (or set image_command)"
        )
    return None


def tools(config: Config) -> list[Tool]:
    """Return the GenerateImages tool using `config.image_command` (None: built-in).

    None where it has no renderer (`unavailable()` says why).
    """
    if unavailable(config) is not None:
        return []
    return [GenerateImages(command=config.image_command)]
