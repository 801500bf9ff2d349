"""The GenerateImages tool: the built-in renderer, a configured command, stops (S13)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import anyio
import pytest
from PIL import Image

from tether._config import Config
from tether.errors import ErrorCode, InvalidInput, ToolFailed, UsageError
from tether.host._tool import StopClass, ToolContext
from tether.host.tools.generate_images import GenerateImages, fill, tools
from tether.testing import alive, announce, tree_pids, tree_procs


def _ctx(workspace: Path, chunks: list[str], call_id: str = "call/1") -> ToolContext:
    return ToolContext(
        call_id=call_id,
        session_id="s-1",
        workspace=workspace,
        on_progress=chunks.append,
    )


@pytest.mark.anyio
async def test_builtin_command_renders_pngs_into_the_workspace(workspace: Path) -> None:
    """With no config, the built-in command writes real PNGs under images/ (no network)."""
    (tool,) = tools(Config())
    chunks: list[str] = []
    with anyio.fail_after(20):
        result = await tool.run(
            _ctx(workspace, chunks), tool.validate({"prompt": "a red fox", "count": 2})
        )
    assert result.splitlines() == ["images/call_1-1.png", "images/call_1-2.png"]
    for line in result.splitlines():
        with Image.open(workspace / line) as image:
            assert image.format == "PNG"
            assert image.size == (512, 512)


@pytest.mark.anyio
async def test_configured_command_gets_the_prompt_shell_quoted(workspace: Path) -> None:
    """A configured template gets `{prompt}` and `{out}` quoted: a prompt adds no words."""
    template = 'printf %s {prompt} > {out}; echo "agent=$TETHER_AGENT"'
    (tool,) = tools(Config(image_command=template))
    prompt = "x'; touch pwned; echo '$(id)"
    chunks: list[str] = []
    with anyio.fail_after(10):
        result = await tool.run(
            _ctx(workspace, chunks, "c2"), {"prompt": prompt, "count": 1}
        )
    assert result == "images/c2-1.png"
    assert (workspace / "images" / "c2-1.png").read_text() == prompt
    assert not (workspace / "pwned").exists()
    assert "agent=1" in "".join(chunks)


@pytest.mark.anyio
async def test_a_failing_or_silent_command_fails_with_its_output(
    workspace: Path,
) -> None:
    """A nonzero exit, or an exit 0 with no file, fails with TOOL_FAILED and the output."""
    failing = GenerateImages(command="echo model-down; exit 4 # {out}")
    with pytest.raises(ToolFailed) as caught:
        await failing.run(_ctx(workspace, []), {"prompt": "p", "count": 1})
    assert caught.value.code is ErrorCode.TOOL_FAILED
    assert "[exit code 4]" in caught.value.message
    assert "model-down" in caught.value.message
    silent = GenerateImages(command="true {out}")
    with pytest.raises(ToolFailed, match="wrote no file"):
        await silent.run(_ctx(workspace, []), {"prompt": "p", "count": 1})


@pytest.mark.anyio
async def test_a_slow_command_times_out_with_tool_timeout(workspace: Path) -> None:
    """An image command past its timeout is killed and fails with TOOL_TIMEOUT."""
    slow = GenerateImages(command="sleep 300 # {out}", timeout=0.3)
    with pytest.raises(ToolFailed) as caught, anyio.fail_after(10):
        await slow.run(_ctx(workspace, []), {"prompt": "p", "count": 1})
    assert caught.value.code is ErrorCode.TOOL_TIMEOUT


@pytest.mark.rule("S13")
@pytest.mark.anyio
async def test_s13_stopping_generate_images_reclaims_the_command_tree(
    workspace: Path,
) -> None:
    """S13: a stopped image command that ignores SIGTERM is killed with its escaped child."""
    say = announce()
    inner = shlex.quote(f"{say}; exec sleep 300")
    template = f"trap '' TERM; setsid sh -c {inner} & {say}; exec sleep 300 # {{out}}"
    tool = GenerateImages(command=template)
    chunks: list[str] = []
    up = anyio.Event()

    def progress(text: str) -> None:
        chunks.append(text)
        if len(tree_pids("".join(chunks))) == 2:
            up.set()

    ctx = ToolContext(
        call_id="c3", session_id="s", workspace=workspace, on_progress=progress
    )
    scope = anyio.CancelScope()
    done = anyio.Event()

    async def call() -> None:
        with scope:
            await tool.run(ctx, {"prompt": "p", "count": 2})
        done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        with anyio.fail_after(10):
            await up.wait()
        procs = tree_procs("".join(chunks))
        ctx.cancelled.set()
        with anyio.move_on_after(0.3):
            await done.wait()
        scope.cancel()
        with anyio.fail_after(10):
            await done.wait()
    assert scope.cancelled_caught
    assert alive(procs) == []


@pytest.mark.anyio
async def test_a_stop_returns_the_images_finished_before_it(workspace: Path) -> None:
    """A stop between images returns the files written so far (the runtime reports TOOL_ABORTED)."""
    python = shlex.quote(sys.executable)
    template = (
        f'{python} -c \'import sys; open(sys.argv[1], "w").write("png")\' {{out}}'
    )
    tool = GenerateImages(command=template)
    ctx = _ctx(workspace, [], "c4")
    ctx.cancelled.set()
    with anyio.fail_after(10):
        result = await tool.run(ctx, {"prompt": "p", "count": 3})
    assert result.startswith("stopped; images written before the stop:")


def test_templates_need_out_and_input_is_validated() -> None:
    """A template without `{out}` is a usage error; count is bounded; fill quotes both."""
    with pytest.raises(UsageError):
        GenerateImages(command="draw {prompt}")
    tool = GenerateImages()
    assert tool.stop_class is StopClass.PROCESS
    with pytest.raises(InvalidInput) as caught:
        tool.validate({"prompt": "p", "count": 9})
    assert caught.value.path == "count"
    assert fill("x {prompt} {out}", out=Path("/o p")) == "x \"$TETHER_PROMPT\" '/o p'"


@pytest.mark.anyio
async def test_a_prompt_inside_double_quotes_of_the_template_is_still_no_code(
    workspace: Path,
) -> None:
    """Regression: `"{prompt}"` in a template cannot turn a prompt into shell code."""
    template = 'printf %s "--prompt {prompt}" > {out}'
    (tool,) = tools(Config(image_command=template))
    prompt = "$(touch pwned) `touch pwned2`"
    with anyio.fail_after(10):
        await tool.run(_ctx(workspace, [], "c9"), {"prompt": prompt, "count": 1})
    assert not (workspace / "pwned").exists()
    assert not (workspace / "pwned2").exists()
    # Inside quotes the prompt is split into words (it is already quoted: put `{prompt}`
    # outside quotes), but it stays text.
    assert "$(touch" in (workspace / "images" / "c9-1.png").read_text()
