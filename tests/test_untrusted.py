"""S16's primitives: a file or folder a tree could have written is judged before it is used."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from tether._untrusted import (
    copy_beneath,
    list_beneath,
    own_dir_at,
    read_beneath,
    write_beneath,
)

pytestmark = pytest.mark.rule("S16")


def test_read_beneath_refuses_links_fifos_devices_and_endless_files(
    tmp_path: Path,
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "ok").write_bytes(b"data")
    secret = tmp_path / "secret"
    secret.write_bytes(b"secret")
    (tmp_path / "a" / "link").symlink_to(secret)
    (tmp_path / "hop").symlink_to(tmp_path / "a")
    os.mkfifo(tmp_path / "a" / "fifo")
    (tmp_path / "a" / "zero").symlink_to("/dev/zero")
    (tmp_path / "a" / "big").write_bytes(b"x" * 2000)

    assert read_beneath(tmp_path, "a/ok", 100) == b"data"
    cases = {
        "a/link": "a symlink",
        "a/fifo": "a FIFO",
        "a/zero": "a symlink",
        "hop/ok": "hop is a symlink, not a folder",
        "a/big": "larger than 100 bytes",
    }
    for name, why in cases.items():
        with pytest.raises(OSError, match=why):
            read_beneath(tmp_path, name, 100)
    with pytest.raises(OSError, match="not a plain relative path"):
        read_beneath(tmp_path, "../secret", 100)


def test_read_beneath_never_opens_a_device(tmp_path: Path) -> None:
    with pytest.raises(OSError, match="a character device"):
        read_beneath(Path("/dev"), "zero", 100)


def test_write_beneath_replaces_a_planted_link_and_refuses_a_linked_folder(
    tmp_path: Path,
) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"mine")
    lane = tmp_path / "lane"
    (lane / ".tether").mkdir(parents=True)
    (lane / ".tether" / "settings.json").symlink_to(victim)
    os.mkfifo(lane / ".tether" / "fifo")

    write_beneath(lane, ".tether/settings.json", b"{}")
    write_beneath(lane, ".tether/fifo", b"x")
    assert victim.read_bytes() == b"mine"
    assert (lane / ".tether" / "settings.json").read_bytes() == b"{}"
    assert not (lane / ".tether" / "settings.json").is_symlink()

    (lane / "out").symlink_to(tmp_path)
    with pytest.raises(OSError, match="out is a symlink, not a folder"):
        write_beneath(lane, "out/victim", b"gotcha")
    assert victim.read_bytes() == b"mine"
    write_beneath(lane, "new/deeper/file", b"made")
    assert (lane / "new" / "deeper" / "file").read_bytes() == b"made"


def test_a_fifo_never_blocks_a_read(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    done = threading.Event()

    def read() -> None:
        with pytest.raises(OSError, match="a FIFO"):
            read_beneath(tmp_path, "fifo", 10)
        done.set()

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    thread.join(5)
    assert done.is_set()


def test_own_dir_at_replaces_whatever_stands_at_its_name_and_keeps_a_folder(
    tmp_path: Path,
) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_bytes(b"mine")
    lane = tmp_path / "lane"
    lane.mkdir()
    fd = os.open(lane, os.O_PATH | os.O_DIRECTORY)
    try:
        for plant, said in [
            (lambda p: p.symlink_to(victim), "a symlink"),
            (lambda p: p.write_bytes(b"x"), "a regular file"),
            (os.mkfifo, "a FIFO"),
            (lambda p: p.symlink_to(p), "a symlink"),  # a loop
        ]:
            plant(lane / ".tether")
            own, replaced = own_dir_at(fd, ".tether")
            os.close(own)
            assert replaced == said
            assert (lane / ".tether").is_dir()
            assert not (lane / ".tether").is_symlink()
            os.rmdir(lane / ".tether")
        (lane / ".tether").mkdir()
        (lane / ".tether" / "inside").write_bytes(b"kept")
        own, replaced = own_dir_at(fd, ".tether")
        os.close(own)
        assert replaced is None
        assert (lane / ".tether" / "inside").read_bytes() == b"kept"
    finally:
        os.close(fd)
    assert sorted(p.name for p in victim.iterdir()) == ["keep"]


def test_list_beneath_names_kinds_without_following_and_is_bounded(
    tmp_path: Path,
) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_bytes(b"")
    (tmp_path / "d" / "l").symlink_to("/etc")
    os.mkfifo(tmp_path / "d" / "p")
    (tmp_path / "d" / "sub").mkdir()
    found = dict(list_beneath(tmp_path, "d", limit=10))
    assert found == {
        "f": stat.S_IFREG,
        "l": stat.S_IFLNK,
        "p": stat.S_IFIFO,
        "sub": stat.S_IFDIR,
    }
    with pytest.raises(OSError, match="more than 3 entries"):
        list_beneath(tmp_path, "d", limit=3)
    (tmp_path / "hop").symlink_to(tmp_path / "d")
    with pytest.raises(OSError, match="hop is a symlink, not a folder"):
        list_beneath(tmp_path, "hop", limit=10)


@pytest.mark.parametrize("owner", [0, 1000])
def test_copy_beneath_copies_a_regular_file_only_bounded_and_never_through_a_link(
    tmp_path: Path, owner: int
) -> None:
    """Files of the caller and of a second uid alike: only the kind and size count."""
    if owner and os.geteuid() != 0:
        pytest.skip("needs root to chown files to a second uid")
    src = tmp_path / "src"
    src.mkdir()
    victim = tmp_path / "victim"
    victim.write_bytes(b"mine")
    (src / "ok").write_bytes(b"session")
    (src / "link").symlink_to(victim)
    (src / "zero").symlink_to("/dev/zero")
    os.mkfifo(src / "fifo")
    with (src / "huge").open("wb") as sparse:
        sparse.truncate(1 << 30)
    (src / "hop").symlink_to(tmp_path)
    for path in [src, *src.iterdir()]:
        os.lchown(path, owner, owner)
    dst = tmp_path / "dst"
    dst.mkdir()

    assert copy_beneath(src, "ok", dst, "a/b/ok", limit=100) == 7
    assert (dst / "a" / "b" / "ok").read_bytes() == b"session"
    refused = {
        "link": "a symlink",
        "zero": "a symlink",
        "fifo": "a FIFO",
        "huge": "larger than 100 bytes",
        "hop/victim": "hop is a symlink, not a folder",
    }
    for name, why in refused.items():
        with pytest.raises(OSError, match=why):
            copy_beneath(src, name, dst, "out", limit=100)
    assert not (dst / "out").exists()
    with pytest.raises(OSError, match="a character device"):
        copy_beneath(Path("/dev"), "zero", dst, "out", limit=100)

    # A link planted at the destination is replaced; a linked folder is refused.
    (dst / "planted").symlink_to(victim)
    copy_beneath(src, "ok", dst, "planted", limit=100)
    assert victim.read_bytes() == b"mine"
    assert (dst / "planted").read_bytes() == b"session"
    (dst / "away").symlink_to(tmp_path)
    with pytest.raises(OSError, match="away is a symlink, not a folder"):
        copy_beneath(src, "ok", dst, "away/victim", limit=100)
    assert victim.read_bytes() == b"mine"
    assert sorted(p.name for p in dst.iterdir()) == ["a", "away", "planted"]
