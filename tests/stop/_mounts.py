"""Real mounts for the reader's tests: a FUSE mount that never answers, a small FUSE
file system served by `_fusefs.py`, both torn down whatever happens."""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from tests.machine import missing

if TYPE_CHECKING:
    from collections.abc import Iterator

_libc = ctypes.CDLL(None, use_errno=True)
_MS_NOSUID = 2
_MS_NODEV = 4
_MNT_DETACH = 2
_FUSEFS = Path(__file__).with_name("_fusefs.py")


def _mounted(point: Path) -> bool:
    with open("/proc/self/mountinfo", encoding="utf-8") as table:
        return any(line.split(" ")[4] == str(point) for line in table)


@contextlib.contextmanager
def hung_mount(point: Path) -> Iterator[Path]:
    """Mount a FUSE file system at `point` whose daemon never answers.

    The kernel's end of the connection is held open and never read: every system call
    that reaches the mount waits. Leaving the block closes it, which aborts the
    connection (waiting calls fail with ENOTCONN), then detaches the mount.
    """
    point.mkdir(exist_ok=True)
    try:
        fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
    except OSError as exc:
        pytest.skip(f"needs /dev/fuse to mount a FUSE file system ({exc.strerror})")
    options = f"fd={fd},rootmode=40000,user_id=0,group_id=0,allow_other".encode()
    if _libc.mount(
        b"tetherhang", str(point).encode(), b"fuse.tetherhang",
        _MS_NOSUID | _MS_NODEV, options,
    ) != 0:  # fmt: skip
        err = ctypes.get_errno()
        os.close(fd)
        pytest.skip(f"needs CAP_SYS_ADMIN to mount FUSE ({os.strerror(err)})")
    try:
        yield point
    finally:
        os.close(fd)
        _libc.umount2(str(point).encode(), _MNT_DETACH)


@contextlib.contextmanager
def fuse_fs(point: Path, mode: str, person: int) -> Iterator[Path]:
    """Serve `_fusefs.py MODE` at `point` (libfuse3 and mfusepy) until the block ends."""
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as exc:
        missing(
            "the FUSE tests",
            "needs libfuse3 and mfusepy to serve a FUSE file system: "
            f"apt-get install fuse3 libfuse3-3 ({exc})",
        )
    point.mkdir(exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, str(_FUSEFS), mode, str(point), str(person)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 10)
        if not ready or proc.stdout.readline() != b"mounted\n":
            proc.kill()
            err = proc.stderr.read().decode() if proc.stderr else ""
            pytest.skip(f"cannot serve a FUSE file system here: {err.strip()}")
        assert _mounted(point)
        yield point
    finally:
        _libc.umount2(str(point).encode(), _MNT_DETACH)
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        for stream in (proc.stdout, proc.stderr):
            if stream:
                stream.close()
