"""Write and Edit: atomic replacement, modes kept, refused edits; `is_inside` for the broker."""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING

import pytest

from tether._config import Config
from tether.errors import ToolFailed
from tether.host import StopClass, ToolContext
from tether.host.tools import edit as edit_module
from tether.host.tools import write as write_module
from tether.host.tools._paths import is_inside
from tether.host.tools.edit import Edit
from tether.host.tools.write import Write

if TYPE_CHECKING:
    from pathlib import Path


def make_ctx(workspace: Path) -> ToolContext:
    return ToolContext(call_id="call-1", session_id="session-1", workspace=workspace)


async def write(workspace: Path, file_path: str, content: str) -> str:
    return await Write().run(
        make_ctx(workspace), {"file_path": file_path, "content": content}
    )


async def edit(workspace: Path, file_path: str, old: str, new: str, **kw: bool) -> str:
    args = {"file_path": file_path, "old_string": old, "new_string": new, **kw}
    return await Edit().run(make_ctx(workspace), args)


def leftovers(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize(
    ("module", "name"), [(write_module, "Write"), (edit_module, "Edit")]
)
def test_tools_returns_a_mutating_tool(module: object, name: str) -> None:
    """`tools(config)` gives Write and Edit as MUTATING tools matched by `file_path`."""
    (tool,) = module.tools(Config())  # type: ignore[attr-defined]
    assert (tool.name, tool.stop_class, tool.subject_field) == (
        name,
        StopClass.MUTATING,
        "file_path",
    )


@pytest.mark.anyio
async def test_write_creates_the_file_and_its_parents(workspace: Path) -> None:
    """A new file is created with its parent directories and the usual mode."""
    out = await write(workspace, "a/b/new.txt", "héllo\n")
    path = workspace / "a/b/new.txt"
    assert path.read_text(encoding="utf-8") == "héllo\n"
    assert out == f"Created {path} (7 bytes)."
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask


@pytest.mark.anyio
@pytest.mark.parametrize("mode", [0o600, 0o755, 0o640])
async def test_write_replaces_atomically_and_keeps_the_mode(
    workspace: Path, mode: int
) -> None:
    """Replacing a file keeps its mode, swaps the inode whole and leaves no temp file."""
    path = workspace / "run.sh"
    path.write_text("old\n")
    path.chmod(mode)
    with path.open(encoding="utf-8") as before:  # a reader holding the old file
        out = await write(workspace, "run.sh", "new\n")
        assert before.read() == "old\n"
    assert out.startswith("Replaced ")
    assert path.read_text() == "new\n"
    assert stat.S_IMODE(path.stat().st_mode) == mode
    assert leftovers(workspace) == []


@pytest.mark.anyio
async def test_write_through_a_symlink_replaces_the_target(workspace: Path) -> None:
    """Writing to a symlink replaces the file it points to and keeps the link."""
    (workspace / "real.txt").write_text("old")
    (workspace / "link.txt").symlink_to("real.txt")
    await write(workspace, "link.txt", "new")
    assert (workspace / "link.txt").is_symlink()
    assert (workspace / "real.txt").read_text() == "new"


@pytest.mark.anyio
async def test_write_onto_a_directory_fails_and_changes_nothing(
    workspace: Path,
) -> None:
    """A directory in the way fails the call; nothing is created beside it."""
    (workspace / "dir").mkdir()
    with pytest.raises(ToolFailed, match="not a regular file"):
        await write(workspace, "dir", "x")
    assert leftovers(workspace) == []


@pytest.mark.root
@pytest.mark.anyio
async def test_write_as_root_keeps_the_owner_of_a_replaced_file(
    workspace: Path,
) -> None:
    """A file of another account keeps its owner after root replaces it."""
    path = workspace / "theirs.txt"
    path.write_text("old")
    os.chown(path, 4242, 4242)
    await write(workspace, "theirs.txt", "new")
    st = path.stat()
    assert (st.st_uid, st.st_gid) == (4242, 4242)


@pytest.mark.anyio
async def test_edit_replaces_a_unique_match(workspace: Path) -> None:
    """A unique `old_string` is replaced and the rest of the file is unchanged."""
    (workspace / "m.py").write_text("a = 1\nb = 2\n")
    out = await edit(workspace, "m.py", "b = 2", "b = 3")
    assert (workspace / "m.py").read_text() == "a = 1\nb = 3\n"
    assert out == f"Replaced 1 occurrence in {workspace / 'm.py'}."


@pytest.mark.anyio
async def test_edit_refuses_an_ambiguous_match(workspace: Path) -> None:
    """Several matches without `replace_all` are refused and the file is untouched."""
    (workspace / "m.py").write_text("x = 0\nx = 0\n")
    with pytest.raises(ToolFailed, match=r"occurs 2 times.*replace_all"):
        await edit(workspace, "m.py", "x = 0", "x = 1")
    assert (workspace / "m.py").read_text() == "x = 0\nx = 0\n"


@pytest.mark.anyio
async def test_edit_replace_all_replaces_every_match(workspace: Path) -> None:
    """`replace_all` replaces every occurrence and says how many."""
    (workspace / "m.py").write_text("x = 0\nx = 0\n")
    out = await edit(workspace, "m.py", "x = 0", "x = 1", replace_all=True)
    assert (workspace / "m.py").read_text() == "x = 1\nx = 1\n"
    assert out.startswith("Replaced 2 occurrences")


@pytest.mark.anyio
async def test_edit_refuses_a_missing_match(workspace: Path) -> None:
    """An `old_string` that is not in the file is refused with advice."""
    (workspace / "m.py").write_text("a = 1\n")
    with pytest.raises(ToolFailed, match="not found"):
        await edit(workspace, "m.py", "a = 2", "a = 3")


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("old", "new", "message"),
    [("", "x", "old_string is empty"), ("same", "same", "are the same")],
)
async def test_edit_refuses_edits_that_change_nothing_or_everything(
    workspace: Path, old: str, new: str, message: str
) -> None:
    """An empty `old_string` or a no-op edit is refused."""
    (workspace / "m.py").write_text("same\n")
    with pytest.raises(ToolFailed, match=message):
        await edit(workspace, "m.py", old, new)


@pytest.mark.anyio
async def test_edit_of_a_missing_file_fails(workspace: Path) -> None:
    """A missing file fails with a pointer to Write."""
    with pytest.raises(ToolFailed, match="does not exist; use Write"):
        await edit(workspace, "nope.py", "a", "b")


@pytest.mark.anyio
async def test_edit_keeps_bytes_that_are_not_utf8(workspace: Path) -> None:
    """Bytes outside UTF-8 elsewhere in the file survive an edit unchanged."""
    (workspace / "l1.txt").write_bytes(b"caf\xe9\nkey = old\n")
    await edit(workspace, "l1.txt", "old", "new")
    assert (workspace / "l1.txt").read_bytes() == b"caf\xe9\nkey = new\n"


@pytest.mark.anyio
async def test_edit_keeps_the_mode(workspace: Path) -> None:
    """An edited executable stays executable."""
    path = workspace / "run.sh"
    path.write_text("echo old\n")
    path.chmod(0o755)
    await edit(workspace, "run.sh", "old", "new")
    assert stat.S_IMODE(path.stat().st_mode) == 0o755
    assert leftovers(workspace) == []


def test_is_inside_resolves_dots_and_symlinks(workspace: Path, tmp_path: Path) -> None:
    """`is_inside` judges the real location: `..` and symlinks out are outside."""
    (workspace / "src").mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (workspace / "escape").symlink_to(outside)
    assert is_inside(workspace, "src/new_file.py")
    assert is_inside(workspace, workspace / "src")
    assert is_inside(workspace, workspace)
    assert is_inside(workspace, "src/../src/x")
    assert not is_inside(workspace, "../outside/x")
    assert not is_inside(workspace, "escape/x")
    assert not is_inside(workspace, "/etc/passwd")
    assert not is_inside(workspace, str(workspace) + "-sibling/x")


def test_is_inside_follows_a_symlinked_workspace(tmp_path: Path) -> None:
    """A workspace reached through a symlink still contains its own files."""
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "ws-link").symlink_to(real)
    assert is_inside(tmp_path / "ws-link", real / "a.txt")
    assert is_inside(tmp_path / "ws-link", "a.txt")


@pytest.mark.anyio
async def test_edit_refuses_a_fifo_or_device_at_once(workspace: Path) -> None:
    """Bad input (regression): Edit on a FIFO or a device fails at once with a clear error
    instead of blocking (a stop would wait on a MUTATING call forever)."""
    import anyio

    fifo = workspace / "pipe.txt"
    os.mkfifo(fifo)
    ctx = ToolContext(call_id="c", session_id="s", workspace=workspace)
    for target in (str(fifo), "/dev/zero"):
        with anyio.fail_after(5), pytest.raises(ToolFailed, match="not a regular file"):
            await Edit().run(
                ctx,
                {
                    "file_path": target,
                    "old_string": "a",
                    "new_string": "b",
                    "replace_all": False,
                },
            )
