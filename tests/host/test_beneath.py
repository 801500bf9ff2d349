"""Read, Write and Edit resolve paths beneath the workspace: links inside work, links out
and link swaps do not (S15), with `openat2` and with the `O_NOFOLLOW` walk alike."""

from __future__ import annotations

import ctypes
import os
import threading
from typing import TYPE_CHECKING

import pytest
from tests.host.support import make_ctx

from tether.errors import ToolFailed
from tether.host.tools import _beneath
from tether.host.tools.edit import Edit, edit_text
from tether.host.tools.read import Read
from tether.host.tools.write import Write, write_text

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


pytestmark = pytest.mark.slow


@pytest.fixture(params=["openat2", "walk"])
def kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test runs with the kernel's `openat2` and with the fallback walk."""
    chosen: str = request.param
    if chosen == "openat2" and _beneath.resolver_kind() != "openat2":
        pytest.skip("this kernel has no openat2")
    monkeypatch.setattr(_beneath, "resolver_kind", lambda: chosen)
    return chosen


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the workspace holding a file no tool may change."""
    out = tmp_path / "outside"
    out.mkdir()
    (out / "f.txt").write_bytes(b"secret\n")
    return out


async def write(workspace: Path, file_path: str, content: str) -> str:
    return await Write().run(
        make_ctx(workspace), {"file_path": file_path, "content": content}
    )


async def edit(workspace: Path, file_path: str, old: str, new: str) -> str:
    args = {"file_path": file_path, "old_string": old, "new_string": new}
    return await Edit().run(make_ctx(workspace), args)


async def read(workspace: Path, file_path: str) -> str:
    return await Read().run(make_ctx(workspace), {"file_path": file_path})


@pytest.mark.anyio
async def test_links_that_stay_inside_are_followed(workspace: Path, kind: str) -> None:
    """Tether choice: relative and absolute links pointing inside the workspace stay
    usable for Read, Write (parents made through a linked directory) and Edit."""
    (workspace / "real").mkdir()
    (workspace / "real/a.txt").write_text("one\n")
    (workspace / "rel").symlink_to("real")
    (workspace / "abs").symlink_to(workspace / "real")
    (workspace / "real/up").symlink_to("../real/a.txt")
    assert await read(workspace, "rel/a.txt") == "     1\tone"
    assert await read(workspace, "abs/up") == "     1\tone"
    await write(workspace, "abs/new/deep.txt", "x")
    assert (workspace / "real/new/deep.txt").read_text() == "x"
    await edit(workspace, "rel/up", "one", "two")
    assert (workspace / "real/a.txt").read_text() == "two\n"
    assert (workspace / "real/up").is_symlink()


@pytest.mark.anyio
@pytest.mark.parametrize("via", ["link/f.txt", "alink/f.txt", "../outside/f.txt"])
async def test_paths_leading_out_are_refused_and_change_nothing(
    workspace: Path, outside: Path, kind: str, via: str
) -> None:
    """S15: a path inside the workspace that leads out through a link (relative or
    absolute) or `..` is refused by Read, Write and Edit; the file outside is unchanged."""
    (workspace / "link").symlink_to("../outside")
    (workspace / "alink").symlink_to(outside)
    for call in (
        read(workspace, via),
        write(workspace, via, "pwned"),
        edit(workspace, via, "secret", "pwned"),
        write(workspace, str(workspace / via), "pwned"),
    ):
        with pytest.raises(ToolFailed, match="leads outside the workspace"):
            await call
    assert (outside / "f.txt").read_bytes() == b"secret\n"
    assert os.listdir(outside) == ["f.txt"]


@pytest.mark.anyio
async def test_a_leaf_link_out_is_refused_too(
    workspace: Path, outside: Path, kind: str
) -> None:
    """S15: a file that is itself a link to outside is not replaced through the link."""
    (workspace / "f.txt").symlink_to(outside / "f.txt")
    with pytest.raises(ToolFailed, match="leads outside the workspace"):
        await write(workspace, "f.txt", "pwned")
    assert (outside / "f.txt").read_bytes() == b"secret\n"


@pytest.mark.anyio
async def test_absolute_paths_outside_are_reached_as_written(
    workspace: Path, outside: Path, kind: str
) -> None:
    """Tether choice: an absolute path outside the workspace (which permission rules
    judge on their own) is read and written as before, links followed as usual."""
    (outside / "via").symlink_to(outside / "f.txt")
    assert await read(workspace, str(outside / "via")) == "     1\tsecret"
    await write(workspace, str(outside / "sub/new.txt"), "ok")
    assert (outside / "sub/new.txt").read_text() == "ok"


@pytest.mark.anyio
async def test_a_dangling_link_inside_is_written_at_its_target(
    workspace: Path, kind: str
) -> None:
    """A link inside pointing at a missing file inside: Write creates the target."""
    (workspace / "link.txt").symlink_to("made.txt")
    await write(workspace, "link.txt", "new")
    assert (workspace / "made.txt").read_text() == "new"
    assert (workspace / "link.txt").is_symlink()


_RENAME_EXCHANGE = 2


def _flip(directory: Path, target: Path, stop: threading.Event) -> int:
    """Swap `directory` with a symlink to `target`, atomically, until told to stop.

    `renameat2(RENAME_EXCHANGE)` trades the two names in one step, so `directory` is
    never missing: every look-up finds either the directory or the link.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    link = directory.with_name(directory.name + ".link")
    link.symlink_to(target)
    a, b = os.fsencode(directory), os.fsencode(link)
    flips = 0
    while not stop.is_set():
        if libc.renameat2(-100, a, -100, b, _RENAME_EXCHANGE) != 0:
            raise OSError(ctypes.get_errno(), "renameat2")
        flips += 1
    return flips


def test_a_link_swapped_in_never_redirects_a_write_edit_or_read(
    workspace: Path, tmp_path: Path, kind: str
) -> None:
    """S15 regression: while a thread flips `src/d` between a directory and a link to a
    folder outside, thousands of Writes, Edits and Reads land inside or fail; not one
    write reaches outside, and the file outside stays byte-identical."""
    outside = tmp_path / "config"
    outside.mkdir()
    secret = b"OUTSIDE ONLY\n"
    (outside / "f.txt").write_bytes(secret)
    d = workspace / "src/d"
    d.mkdir(parents=True)
    stop = threading.Event()
    flips: list[int] = []
    flipper = threading.Thread(target=lambda: flips.append(_flip(d, outside, stop)))
    flipper.start()
    counts = {"written": 0, "edited": 0, "read": 0, "refused": 0, "read outside": 0}
    path = workspace / "src/d/f.txt"
    try:
        for n in range(1500):
            text = f"inside {n}\n"
            for name, act in (
                ("written", lambda: write_text(workspace, path, text)),  # noqa: B023
                ("edited", lambda: edit_text(workspace, path, "inside", "in", False)),
                ("edited", lambda: edit_text(workspace, path, "ONLY", "x", False)),
            ):
                try:
                    act()
                    counts[name] += 1
                except ToolFailed:
                    counts["refused"] += 1
            try:
                fd = Read()._open(workspace, path)
            except ToolFailed:
                counts["refused"] += 1
                continue
            with os.fdopen(fd, "rb") as f:
                got = f.read()
            counts["read"] += 1
            # Only the file outside ever holds "OUTSIDE".
            counts["read outside"] += b"OUTSIDE" in got
    finally:
        stop.set()
        flipper.join()
    print(f"{kind}: {flips} flips, {counts}")
    assert flips, "the swapping thread failed"
    assert flips[0] > 100, "the swap did not race the calls"
    assert counts["written"] > 0
    assert counts["edited"] > 0
    assert (outside / "f.txt").read_bytes() == secret
    assert sorted(p.name for p in outside.iterdir()) == ["f.txt"]
    assert counts["read outside"] == 0


@pytest.fixture
def no_openat2(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The system call reports ENOSYS, as on kernels before 5.6."""
    _beneath.resolver_kind.cache_clear()

    def missing(*_args: object) -> int:
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(_beneath, "_openat2", missing)
    yield
    _beneath.resolver_kind.cache_clear()


def test_without_openat2_the_walk_is_in_force(no_openat2: None) -> None:
    """Where `openat2` is missing, tether says the walk is in force."""
    assert _beneath.resolver_kind() == "walk"
