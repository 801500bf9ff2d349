"""Real file systems mounted for a test (root only): `mounted()` mounts and unmounts."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def mounted(where: Path, kind: str = "tmpfs", options: str = "") -> Iterator[Path]:
    """Make `where`, mount a fresh `kind` there for the block, then unmount it."""
    where.mkdir(exist_ok=True)
    extra = ["-o", options] if options else []
    subprocess.run(["mount", "-t", kind, *extra, kind, str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)
