"""For tests that act as other accounts: the CLI with a test's system dir, a folder every
account can search, and an interpreter every account can run."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import tether

if TYPE_CHECKING:
    from collections.abc import Iterator

LAUNCH = (
    "import sys, pathlib, tether.stop._system as s; "
    "s.SYSTEM_DIR = pathlib.Path(sys.argv.pop(1)); sys.argv[0] = 'tether'; "
    "from tether.cli import main; main()"
)
"""`python -c LAUNCH SYSTEM_DIR ARGS...` runs the CLI as `tether` with the test's system
dir in place of /etc/tether: only code run in-process can move it, never the
environment or a file."""


@contextlib.contextmanager
def searchable_dir(prefix: str) -> Iterator[Path]:
    """A root-owned 0755 directory in /tmp (pytest's own tmp dir is 0700), removed after."""
    where = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    try:
        os.chmod(where, 0o755)
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)


def everyones_python(base: Path) -> Path:
    """A venv of the system's python3 in `base` that sees this checkout and its packages.

    This machine's interpreter may sit under a folder only root enters (a pyenv in
    /root): other accounts cannot run it. Skips, with the reason, where the system has
    no python3 of this version with venv, or the checkout is closed to other accounts.
    """
    system = Path("/usr/bin/python3")
    version = subprocess.run(
        [str(system), "-c", "import sys; print(sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    if version != str(sys.version_info[:2]):
        pytest.skip(f"no system python3 of this version ({version or 'none'})")
    paths = sysconfig.get_paths()
    source = Path(tether.__file__).resolve().parents[1]
    places = (source, Path(paths["purelib"]), Path(paths["platlib"]))
    for place in places:
        for folder in (place, *place.parents):
            if not os.stat(folder).st_mode & stat.S_IXOTH:
                pytest.skip(
                    f"{folder} is closed to other accounts: they cannot run tether"
                )
    venv = base / "venv"
    made = subprocess.run(
        [str(system), "-m", "venv", "--without-pip", str(venv)],
        capture_output=True,
        check=False,
    )
    if made.returncode != 0:
        pytest.skip(f"no system python3 with venv: {made.stderr!r}")
    major, minor = sys.version_info[:2]
    site = venv / "lib" / f"python{major}.{minor}" / "site-packages"
    (site / "tether-checkout.pth").write_text(
        "".join(f"{place}\n" for place in places), encoding="utf-8"
    )
    return venv / "bin" / "python3"
