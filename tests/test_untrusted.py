"""S16's primitives: a file or folder a tree could have written is judged before it is used."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from tether._untrusted import read_beneath, write_beneath

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
