"""A small FUSE file system for the reader's tests, run as its own process.

`python _fusefs.py MODE MOUNTPOINT PERSON` serves `/`, `/<PERSON>/` and `/<PERSON>/stop`
(an empty file owned by PERSON) until it is unmounted. MODE `eio` answers every flush
(the `close()` of a descriptor) with EIO; MODE `bindfs` mounts as `fuse.bindfs`, whose
daemon shows owners it makes up. It prints `mounted` once the mount is in place.
"""

from __future__ import annotations

import errno
import stat
import sys
import time

import mfusepy


class _Tree(mfusepy.Operations):
    use_ns = True

    def __init__(self, mode: str, person: int) -> None:
        self.mode = mode
        self.person = person
        self.now = time.time_ns()

    def _attrs(self, kind: int, perm: int, uid: int, size: int = 0) -> dict[str, int]:
        return {
            "st_mode": kind | perm,
            "st_uid": uid,
            "st_gid": uid,
            "st_nlink": 2 if kind == stat.S_IFDIR else 1,
            "st_size": size,
            "st_atime": self.now,
            "st_mtime": self.now,
            "st_ctime": self.now,
        }

    def init(self, path: str) -> None:
        """The kernel's first request arrived: the mount is in place; say so."""
        print("mounted", flush=True)

    def getattr(self, path: str, fh: int | None = None) -> dict[str, int]:
        person = str(self.person)
        if path == "/":
            return self._attrs(stat.S_IFDIR, 0o755, 0)
        if path == f"/{person}":
            return self._attrs(stat.S_IFDIR, 0o755, self.person)
        if path == f"/{person}/stop":
            return self._attrs(stat.S_IFREG, 0o644, self.person)
        raise mfusepy.FuseOSError(errno.ENOENT)

    def readdir(self, path: str, fh: int) -> list[str]:
        if path == "/":
            return [".", "..", str(self.person)]
        return [".", "..", "stop"]

    def open(self, path: str, flags: int) -> int:
        return 0

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return b""

    def flush(self, path: str, fh: int) -> int:
        if self.mode == "eio":
            raise mfusepy.FuseOSError(errno.EIO)
        return 0


def main() -> None:
    mode, mountpoint, person = sys.argv[1], sys.argv[2], int(sys.argv[3])
    name = "bindfs" if mode == "bindfs" else "tethertest"
    mfusepy.FUSE(
        _Tree(mode, person),
        mountpoint,
        foreground=True,
        allow_other=True,
        fsname=name,
        subtype=name,
    )


if __name__ == "__main__":
    main()
