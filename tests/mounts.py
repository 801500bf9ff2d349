"""Real file systems mounted for a test (root only): `mounted()` mounts and unmounts."""

from __future__ import annotations

import subprocess
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator
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
