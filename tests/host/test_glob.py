"""Glob: patterns, .gitignore, newest first, and a walk that a stop ends (S14)."""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from tests.host.support import make_ctx, stop_tool_once_started

from tether._config import Config
from tether._threads import BUILTIN_THREADS
from tether.errors import ToolAborted, ToolFailed
from tether.host import StopClass, ToolContext
from tether.host.tools import glob as glob_module
from tether.host.tools.glob import Glob, compile_glob
from tether.host.tools.read import Read

if TYPE_CHECKING:
    from collections.abc import Iterator

TREE_DIRS = 100
TREE_FILES = 1000
"""The huge tree: 100 directories of 1000 files, about 100k entries."""


def touch(root: Path, *names: str) -> None:
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(name)


async def glob_lines(workspace: Path, **args: Any) -> list[str]:
    out = await Glob().run(make_ctx(workspace), args)
    return [line.replace(str(workspace) + "/", "") for line in out.splitlines()]


@pytest.fixture(scope="module")
def huge_tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """About 100k entries to walk; shared by the tests of this module.

    Made in memory (/dev/shm) when there is one: 100k file creations on a disk that
    other suites keep busy can take most of a minute.
    """
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        root = Path(tempfile.mkdtemp(prefix="tether-glob-", dir=shm))
    else:
        root = tmp_path_factory.mktemp("huge-tree")
    try:
        for d in range(TREE_DIRS):
            directory = root / f"d{d:03}"
            directory.mkdir()
            for f in range(TREE_FILES):
                os.close(os.open(directory / f"f{f:04}.txt", os.O_CREAT | os.O_WRONLY))
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def sparse_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 50 GiB sparse file of text lines then a hole: a Read that never ends alone."""
    path = tmp_path_factory.mktemp("sparse") / "huge.log"
    with path.open("wb") as f:
        f.write(b"a line of text\n" * 1000)
        f.truncate(50 * 1024**3)
    return path


def test_tools_returns_glob_as_a_read_only_tool() -> None:
    """`tools(config)` gives Glob, class READ_ONLY, matched by `path`."""
    (tool,) = glob_module.tools(Config())
    assert (tool.name, tool.stop_class, tool.subject_field) == (
        "Glob",
        StopClass.READ_ONLY,
        "path",
    )


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("*.py", "a.py", True),
        ("*.py", "src/a.py", False),
        ("**/*.py", "a.py", True),
        ("**/*.py", "src/deep/a.py", True),
        ("src/**/*.py", "src/a.py", True),
        ("src/**/*.py", "lib/src/a.py", False),
        ("*.{ts,tsx}", "a.tsx", True),
        ("*.{ts,tsx}", "a.js", False),
        ("{src,lib}/*.c", "lib/x.c", True),
        ("file?.txt", "file1.txt", True),
        ("file?.txt", "file10.txt", False),
        ("[ab]*.md", "b.md", True),
        ("[!ab]*.md", "b.md", False),
        ("**", "any/thing/at/all", True),
        ("a+b(c).txt", "a+b(c).txt", True),
    ],
)
def test_compile_glob_matches_like_the_familiar_tool(
    pattern: str, path: str, matches: bool
) -> None:
    """`*` stays in a segment, `**` spans directories, braces and classes work."""
    assert bool(compile_glob(pattern).match(path)) is matches


@pytest.mark.anyio
async def test_glob_finds_files_recursively_newest_first(workspace: Path) -> None:
    """Matches come back as absolute paths, most recently modified first."""
    touch(workspace, "old.py", "src/mid.py", "src/deep/new.py", "notes.md")
    for age, name in enumerate(["src/deep/new.py", "src/mid.py", "old.py"]):
        stamp = 1_700_000_000 - age * 100
        os.utime(workspace / name, (stamp, stamp))
    out = await Glob().run(make_ctx(workspace), {"pattern": "**/*.py"})
    assert out.splitlines() == [
        str(workspace / "src/deep/new.py"),
        str(workspace / "src/mid.py"),
        str(workspace / "old.py"),
    ]


@pytest.mark.anyio
async def test_glob_caps_results_and_counts_the_rest(workspace: Path) -> None:
    """Past `max_results` the rest are counted, not listed."""
    touch(workspace, *(f"f{n}.txt" for n in range(5)))
    out = await Glob(max_results=3).run(make_ctx(workspace), {"pattern": "*.txt"})
    lines = out.splitlines()
    assert len(lines) == 4
    assert lines[-1].startswith("[2 more files match; showing the 3 most recently")


@pytest.mark.anyio
async def test_glob_respects_gitignore_files_and_skips_dot_git(workspace: Path) -> None:
    """Root and nested .gitignore files apply with git's precedence; .git is skipped."""
    touch(
        workspace,
        "keep.py",
        "build/out.py",
        "debug.log",
        "logs/old.log",
        "logs/keep.log",
        "sub/secret.py",
        "sub/open.py",
        ".git/hooks/x.py",
        ".hidden/seen.py",
    )
    (workspace / ".gitignore").write_text("build/\n*.log\n", encoding="utf-8")
    (workspace / "logs/.gitignore").write_text("!keep.log\n", encoding="utf-8")
    (workspace / "sub/.gitignore").write_text("secret.py\n", encoding="utf-8")
    assert sorted(await glob_lines(workspace, pattern="**/*.py")) == [
        ".hidden/seen.py",
        "keep.py",
        "sub/open.py",
    ]
    assert await glob_lines(workspace, pattern="**/*.log") == ["logs/keep.log"]


@pytest.mark.anyio
async def test_glob_below_a_repo_root_applies_the_root_gitignore(
    workspace: Path,
) -> None:
    """Searching a subdirectory of a git work tree still honours the root's .gitignore."""
    touch(workspace, "pkg/gen/a.py", "pkg/b.py")
    (workspace / ".git").mkdir()
    (workspace / ".gitignore").write_text("pkg/gen/\n", encoding="utf-8")
    assert await glob_lines(workspace, pattern="**/*.py", path="pkg") == ["pkg/b.py"]


@pytest.mark.anyio
async def test_glob_pattern_with_literal_directories_starts_there(
    workspace: Path,
) -> None:
    """A pattern's leading literal directories narrow the walk (and still match)."""
    touch(workspace, "src/app/x.ts", "src/app/y.tsx", "other/app/z.ts")
    assert sorted(await glob_lines(workspace, pattern="src/app/*.{ts,tsx}")) == [
        "src/app/x.ts",
        "src/app/y.tsx",
    ]


@pytest.mark.anyio
async def test_glob_does_not_follow_symlinked_directories(workspace: Path) -> None:
    """A symlink loop is not walked into: each file is listed once."""
    touch(workspace, "real/a.py")
    (workspace / "real/loop").symlink_to(workspace / "real")
    assert await glob_lines(workspace, pattern="**/*.py") == ["real/a.py"]


@pytest.mark.anyio
async def test_glob_no_match_says_so(workspace: Path) -> None:
    """No match is an answer, not an error."""
    out = await Glob().run(make_ctx(workspace), {"pattern": "**/*.zig"})
    assert out.startswith("No files found matching '**/*.zig'")


@pytest.mark.anyio
async def test_glob_path_that_is_not_a_directory_fails(workspace: Path) -> None:
    """A `path` that is missing or a file fails with a clear message."""
    with pytest.raises(ToolFailed, match="is not a directory"):
        await Glob().run(make_ctx(workspace), {"pattern": "*", "path": "missing"})


@pytest.mark.rule("S14")
@pytest.mark.anyio
async def test_s14_glob_walk_ends_within_100ms_of_a_stop(huge_tree: Path) -> None:
    """A Glob walking ~100k entries ends within 100 ms of the stop (median of 5)."""
    tool = Glob(progress_every=2000)
    args = {"pattern": "**/*.py"}
    times = [(await stop_tool_once_started(tool, huge_tree, args))[0] for _ in range(5)]
    assert statistics.median(times) <= 0.1, times
    assert max(times) <= 1.0, times


@pytest.mark.rule("S14")
@pytest.mark.anyio
async def test_s14_glob_walk_ends_on_its_cancel_flag_alone(huge_tree: Path) -> None:
    """Setting only `ctx.cancelled` ends the walk too, and the call ends ToolAborted."""
    elapsed, error = await stop_tool_once_started(
        Glob(progress_every=2000), huge_tree, {"pattern": "**/*.py"}, flag_only=True
    )
    assert isinstance(error, ToolAborted)
    assert elapsed <= 1.0


@pytest.mark.anyio
async def test_glob_walks_the_whole_huge_tree(huge_tree: Path) -> None:
    """Unstopped, the walk sees every entry: the stop tests above cut a real walk."""
    out = await Glob(max_results=1).run(
        make_ctx(huge_tree), {"pattern": "**/f0999.txt"}
    )
    assert out.splitlines()[-1].startswith(f"[{TREE_DIRS - 1} more files match")


@pytest.mark.rule("S14")
@pytest.mark.anyio
async def test_s14_no_starvation_after_100_stopped_read_and_glob_calls(
    huge_tree: Path, sparse_file: Path, workspace: Path
) -> None:
    """After 100 Read/Glob calls stopped mid-work, a new call starts at once and threads
    stay bounded (no worker is left behind holding a thread or a limiter token)."""
    baseline = threading.active_count()
    read = Read(progress_every=1024 * 1024)
    glob = Glob(progress_every=500)
    # A wave fills the built-in tools' threads, so every call of it is busy at once:
    # a bigger wave would wait for whole searches to end before its last calls start.
    wave = BUILTIN_THREADS
    for _wave in range(-(-100 // wave)):
        started = [anyio.Event() for _ in range(wave)]
        contexts = [
            make_ctx(huge_tree, on_progress=lambda _t, e=event: e.set())
            for event in started
        ]
        ended = 0

        async def call(n: int, ctx: ToolContext, scope: anyio.CancelScope) -> None:
            nonlocal ended
            with scope:
                if n % 2:
                    await glob.run(ctx, {"pattern": "**/*.py"})
                else:
                    await read.run(ctx, {"file_path": str(sparse_file), "offset": 2000})
            ended += 1

        scopes = [anyio.CancelScope() for _ in range(wave)]
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for n in range(wave):
                    tg.start_soon(call, n, contexts[n], scopes[n])
                for event in started:
                    await event.wait()  # every worker of the wave is busy
                for ctx, scope in zip(contexts, scopes, strict=True):
                    ctx.cancelled.set()
                    scope.cancel()
        assert ended == wave
    (workspace / "small.txt").write_text("still here\n")
    t0 = time.perf_counter()
    with anyio.fail_after(5):
        out = await Read().run(make_ctx(workspace), {"file_path": "small.txt"})
    assert out == "     1\tstill here"
    assert time.perf_counter() - t0 <= 1.0
    assert threading.active_count() <= baseline + wave + 1


@pytest.mark.anyio
async def test_glob_ignores_a_fifo_named_gitignore(workspace: Path) -> None:
    """Bad input (regression): a FIFO where a `.gitignore` should be is skipped, never
    opened for reading, so the walk neither hangs nor leaves a blocked worker."""
    (workspace / "sub").mkdir()
    os.mkfifo(workspace / "sub" / ".gitignore")
    (workspace / "sub" / "a.py").write_text("x", encoding="utf-8")
    ctx = ToolContext(call_id="c", session_id="s", workspace=workspace)
    before = threading.active_count()
    with anyio.fail_after(5):
        out = await Glob().run(ctx, Glob().validate({"pattern": "**/*.py"}))
    assert "a.py" in out
    assert threading.active_count() <= before + 1
