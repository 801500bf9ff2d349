"""Grep: ripgrep's options, .gitignore, and an `rg` that is gone once stopped (S14)."""

from __future__ import annotations

import os
import random
import re
import statistics
import subprocess
import sysconfig
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import psutil
import pytest

from tether import Runtime, ToolAborted
from tether._config import Config
from tether.errors import ErrorCode, InvalidInput, ToolFailed
from tether.host import StopClass, ToolContext
from tether.host.tools import grep as grep_module
from tether.host.tools.grep import Grep, rg_path
from tether.runtime._values import ToolProgress

if TYPE_CHECKING:
    from tether.runtime._runtime import HostKind

SLOW_PATTERN = "[a-z ]*a[a-z ]{32}[0-9]{7}"
"""A regex without a literal to skip by, whose automaton thrashes: rg takes seconds."""
WORDS = ["alpha", "beta", "gamma", "delta", "tether", "stop", "read", "grep", "omega"]


def make_ctx(workspace: Path, **kwargs: Any) -> ToolContext:
    return ToolContext(
        call_id="call-1", session_id="session-1", workspace=workspace, **kwargs
    )


def write_large_tree(
    root: Path, *, dirs: int = 20, files: int = 10, lines: int = 1000
) -> None:
    """Write `dirs * files * lines` lines of varied words (200k by default) under `root`."""
    rng = random.Random(14)
    for d in range(dirs):
        directory = root / f"d{d:02}"
        directory.mkdir(parents=True)
        for f in range(files):
            words = rng.choices(WORDS, k=lines * 10)
            text = "".join(
                " ".join(words[n * 10 : n * 10 + 10]) + f" {n}\n" for n in range(lines)
            )
            (directory / f"f{f:02}.txt").write_text(text, encoding="utf-8")


@pytest.fixture(scope="module")
def large_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """About 200k lines in 200 files (16 MB): a slow pattern keeps rg busy for seconds."""
    root = tmp_path_factory.mktemp("grep-tree")
    write_large_tree(root)
    return root


@pytest.fixture
def small_tree(workspace: Path) -> Path:
    files = {
        "src/app.py": "def Main():\n    return helper()\n\n# main ends\n",
        "src/helper.py": "def helper():\n    return 42\n",
        "src/web.ts": "export const main = 1;\n",
        "README.md": "The main entry is src/app.py\n",
        "build/gen.py": "def main(): pass\n",
        ".git/config": "main = yes\n",
        ".github/ci.yml": "main: true\n",
    }
    for name, text in files.items():
        path = workspace / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    (workspace / ".gitignore").write_text("build/\n", encoding="utf-8")
    return workspace


async def grep(workspace: Path, tool: Grep | None = None, /, **args: Any) -> str:
    # Positional-only `tool`, so that `**{"-i": True}` can only be the tool's input.
    tool = tool or Grep()
    return await tool.run(make_ctx(workspace), tool.validate(args))


def test_tools_returns_grep_as_a_read_only_tool() -> None:
    """`tools(config)` gives Grep, class READ_ONLY, matched by `path`."""
    (tool,) = grep_module.tools(Config())
    assert (tool.name, tool.stop_class, tool.subject_field) == (
        "Grep",
        StopClass.READ_ONLY,
        "path",
    )


def test_rg_comes_from_the_ripgrep_wheel() -> None:
    """The binary is the wheel's own `rg` 14.1.0 in this environment, not one on PATH."""
    path = Path(rg_path())
    assert path.parent == Path(sysconfig.get_path("scripts")).resolve()
    version = subprocess.run(
        [path, "--version"], capture_output=True, text=True, check=True
    )
    assert version.stdout.startswith("ripgrep 14.1.0")


def test_grep_schema_uses_the_familiar_short_option_names() -> None:
    """`-i`, `-n`, `-A`, `-B`, `-C` are the input's names, and bad values name the field."""
    tool = Grep()
    props = tool.input_schema()["properties"]
    assert {"-i", "-n", "-A", "-B", "-C", "output_mode", "head_limit"} <= set(props)
    assert tool.validate({"pattern": "x", "-i": True})["case_insensitive"] is True
    with pytest.raises(InvalidInput) as info:
        tool.validate({"pattern": "x", "-A": -1})
    assert info.value.path == "-A"
    with pytest.raises(InvalidInput):
        tool.validate({"pattern": "x", "output_mode": "lines"})


@pytest.mark.anyio
async def test_grep_lists_matching_files_by_default(small_tree: Path) -> None:
    """The default mode lists files with a match, sorted, after a count line."""
    out = await grep(small_tree, pattern="main")
    assert out.splitlines() == [
        "Found 4 files",
        ".github/ci.yml",
        "README.md",
        "src/app.py",
        "src/web.ts",
    ]


@pytest.mark.anyio
async def test_grep_respects_gitignore_and_skips_dot_git(small_tree: Path) -> None:
    """Ignored `build/` and the `.git` directory are never searched (no git repo needed)."""
    out = await grep(small_tree, pattern="main")
    assert "build/gen.py" not in out
    assert ".git/config" not in out


@pytest.mark.anyio
async def test_grep_content_mode_with_line_numbers_and_ignore_case(
    small_tree: Path,
) -> None:
    """Content mode shows `path:line:text`; `-i` matches regardless of case."""
    out = await grep(
        small_tree, pattern="main", path="src/app.py", output_mode="content"
    )
    assert out == "src/app.py:4:# main ends"
    out = await grep(
        small_tree,
        pattern="main",
        path="src/app.py",
        output_mode="content",
        **{"-i": True},
    )
    assert out.splitlines() == ["src/app.py:1:def Main():", "src/app.py:4:# main ends"]


@pytest.mark.anyio
async def test_grep_context_lines(small_tree: Path) -> None:
    """`-A`, `-B` and `-C` add context lines marked with `-`."""
    args: dict[str, Any] = {
        "pattern": "return 42",
        "path": "src",
        "output_mode": "content",
    }
    assert (await grep(small_tree, **args, **{"-B": 1})).splitlines() == [
        "src/helper.py-1-def helper():",
        "src/helper.py:2:    return 42",
    ]
    after = await grep(small_tree, **{**args, "pattern": "def helper"}, **{"-A": 1})
    assert after.splitlines()[-1] == "src/helper.py-2-    return 42"
    around = await grep(
        small_tree, **{**args, "path": "src/app.py", "pattern": "helper"}, **{"-C": 1}
    )
    assert len(around.splitlines()) == 3


@pytest.mark.anyio
async def test_grep_without_line_numbers(small_tree: Path) -> None:
    """`-n: false` drops line numbers in content mode."""
    out = await grep(
        small_tree, pattern="42", path="src", output_mode="content", **{"-n": False}
    )
    assert out == "src/helper.py:    return 42"


@pytest.mark.anyio
async def test_grep_count_mode(small_tree: Path) -> None:
    """Count mode gives matching lines per file and a total."""
    out = await grep(small_tree, pattern="return|def", path="src", output_mode="count")
    assert out.splitlines() == [
        "src/app.py:2",
        "src/helper.py:2",
        "[4 matching lines in 2 files]",
    ]


@pytest.mark.anyio
async def test_grep_glob_and_type_filters(small_tree: Path) -> None:
    """`glob` and `type` narrow the files searched."""
    assert (await grep(small_tree, pattern="main", glob="*.ts")).splitlines()[1:] == [
        "src/web.ts"
    ]
    assert (await grep(small_tree, pattern="main", type="py")).splitlines()[1:] == [
        "src/app.py"
    ]


@pytest.mark.anyio
async def test_grep_head_limit_keeps_the_first_entries(small_tree: Path) -> None:
    """`head_limit` keeps the first N entries and says the output was cut."""
    out = await grep(small_tree, pattern="main", head_limit=2)
    lines = out.splitlines()
    assert lines[:3] == ["Found 4 files (showing 2)", ".github/ci.yml", "README.md"]
    assert lines[-1].startswith("[output cut")


@pytest.mark.anyio
async def test_grep_multiline_matches_across_lines(small_tree: Path) -> None:
    """`multiline` lets a pattern span a newline."""
    out = await grep(
        small_tree,
        pattern=r"def helper\(\):\n\s+return",
        output_mode="content",
        multiline=True,
    )
    assert out.splitlines() == [
        "src/helper.py:1:def helper():",
        "src/helper.py:2:    return 42",
    ]
    with pytest.raises(ToolFailed, match="multiline"):
        await grep(small_tree, pattern=r"helper\(\):\n\s+return")


@pytest.mark.anyio
async def test_grep_no_match_is_an_answer(small_tree: Path) -> None:
    """No match is reported in words, not as a failure."""
    assert await grep(small_tree, pattern="zebra") == "No matches found."


@pytest.mark.anyio
async def test_grep_bad_regex_fails_with_rg_message(small_tree: Path) -> None:
    """An invalid regex fails with rg's own explanation."""
    with pytest.raises(ToolFailed, match="regex parse error"):
        await grep(small_tree, pattern="(unclosed")


@pytest.mark.anyio
async def test_grep_pattern_starting_with_a_dash_is_a_pattern(small_tree: Path) -> None:
    """A pattern like `-x` is searched for, never taken as an option."""
    (small_tree / "dash.txt").write_text("a -x flag\n", encoding="utf-8")
    assert (await grep(small_tree, pattern="-x")).splitlines()[1:] == ["dash.txt"]


@pytest.mark.anyio
async def test_grep_output_bound_ends_the_search_early(large_tree: Path) -> None:
    """Past the output bound rg is killed and the output says it was cut."""
    tool = Grep(max_output_bytes=10_000)
    with anyio.fail_after(10):
        out = await grep(large_tree, tool, pattern="tether", output_mode="content")
    assert len(out) < 80_000
    assert out.endswith("narrow the search]")


async def grep_and_stop(
    workspace: Path, *, flag_only: bool = False
) -> tuple[float, int, BaseException | None]:
    """Start a slow search, stop it while rg runs; return (time to the call's end, pid)."""
    seen = anyio.Event()
    pids: list[int] = []

    def on_progress(text: str) -> None:
        if found := re.search(r"rg pid (\d+)", text):
            pids.append(int(found.group(1)))
            seen.set()

    ctx = make_ctx(workspace, on_progress=on_progress)
    scope = anyio.CancelScope()
    outcome: dict[str, Any] = {}

    async def call() -> None:
        with scope:
            try:
                await Grep().run(ctx, {"pattern": SLOW_PATTERN})
            except ToolAborted as exc:
                outcome["error"] = exc
        outcome["end"] = time.perf_counter()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await seen.wait()
            assert psutil.Process(pids[0]).status() != psutil.STATUS_ZOMBIE
            t0 = time.perf_counter()
            ctx.cancelled.set()
            if not flag_only:
                scope.cancel()  # what the host does to a READ_ONLY call on a stop
    return outcome["end"] - t0, pids[0], outcome.get("error")


@pytest.mark.rule("S14")
@pytest.mark.anyio
async def test_s14_grep_rg_is_killed_and_reaped_within_100ms_of_a_stop(
    large_tree: Path,
) -> None:
    """A stopped Grep on a 200k-line tree returns within 100 ms with its rg pid gone."""
    times = []
    for _ in range(5):
        elapsed, pid, _error = await grep_and_stop(large_tree)
        assert not psutil.pid_exists(pid)  # killed and reaped, not a zombie
        times.append(elapsed)
    assert statistics.median(times) <= 0.1, times
    assert max(times) <= 1.0, times


@pytest.mark.rule("S14")
@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_s14_grep_cancel_flag_alone_kills_rg(large_tree: Path) -> None:
    """Setting only `ctx.cancelled` kills rg too, and the call ends ToolAborted."""
    elapsed, pid, error = await grep_and_stop(large_tree, flag_only=True)
    assert isinstance(error, ToolAborted)
    assert not psutil.pid_exists(pid)
    assert elapsed <= 1.0


@pytest.mark.anyio
async def test_grep_time_limit_kills_rg_and_reports_a_timeout(large_tree: Path) -> None:
    """A search past the tool's time limit ends TOOL_TIMEOUT and leaves no rg behind."""
    before = {p.pid for p in psutil.Process().children()}
    with anyio.fail_after(10), pytest.raises(ToolFailed) as info:
        await grep(large_tree, Grep(timeout=0.3), pattern=SLOW_PATTERN)
    assert info.value.code is ErrorCode.TOOL_TIMEOUT
    left = [p for p in psutil.Process().children() if p.pid not in before]
    assert [p for p in left if p.name() == "rg"] == []


@pytest.mark.rule("S14")
@pytest.mark.anyio
@pytest.mark.parametrize("host", ["inprocess", "stdio"])
async def test_s14_session_abort_kills_a_running_grep(
    large_tree: Path, host: HostKind
) -> None:
    """Through the runtime, `Session.abort()` ends the Grep call and its rg dies soon after.

    The stop guard of spec 02 is switched off: it is not what this test is about.
    """
    async with Runtime(
        workspace=large_tree, tools=[Grep()], host=host, abort_bound=1.0, guard=False
    ) as runtime:
        session = runtime.session()
        outcome: dict[str, Any] = {}
        with runtime.subscribe() as events, anyio.fail_after(20):
            async with session.turn() as turn, anyio.create_task_group() as tg:

                async def call() -> None:
                    try:
                        await turn.call("Grep", {"pattern": SLOW_PATTERN})
                    except ToolAborted as exc:
                        outcome["error"] = exc

                tg.start_soon(call)
                pid = 0
                async for event in events:
                    if isinstance(event, ToolProgress) and "rg pid" in event.text:
                        pid = int(event.text.rsplit(" ", 1)[1].rstrip(")"))
                        break
                # A pidfd turns readable when rg exits, without polling and without
                # reaping someone else's child.
                pidfd = os.pidfd_open(pid)
                try:
                    report = await session.abort()
                    t0 = time.perf_counter()
                    with anyio.fail_after(5):
                        await anyio.wait_readable(pidfd)
                    exited_after = time.perf_counter() - t0
                finally:
                    os.close(pidfd)
            assert isinstance(outcome.get("error"), ToolAborted)
            assert report.elapsed <= 1.0
            assert exited_after <= 1.0


@pytest.mark.anyio
async def test_a_progress_sink_that_raises_leaves_no_rg_and_no_descriptor(
    workspace: Path,
) -> None:
    """Regression: the first progress report came before rg was in the reaping block,
    so a sink that raised left rg running and its pipes and pidfd open."""
    (workspace / "a.txt").write_text("needle\n", encoding="utf-8")

    def broken(text: str) -> None:
        raise RuntimeError("the sink is gone")

    ctx = ToolContext(
        call_id="c", session_id="s", workspace=workspace, on_progress=broken
    )
    before = set(os.listdir("/proc/self/fd"))
    children = {p.pid for p in psutil.Process().children()}
    for _ in range(5):
        with pytest.raises(RuntimeError, match="the sink is gone"):
            await Grep().run(ctx, Grep().validate({"pattern": "needle"}))
    assert set(os.listdir("/proc/self/fd")) <= before
    assert {p.pid for p in psutil.Process().children()} <= children
