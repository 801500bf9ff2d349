"""Fixtures of the stop tests."""

from __future__ import annotations

import subprocess
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@pytest.fixture
def mounted() -> Iterator[list[Path]]:
    """Mount points a test made, unmounted after it (lazily: a run may hold them)."""
    points: list[Path] = []
    yield points
    for point in reversed(points):
        subprocess.run(["umount", "-l", str(point)], check=False)


@pytest.fixture
def everyones_python(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An install of tether every account can run, made `sys.executable`.

    `tether setup --system` runs the installed tether as each bound account; this
    machine's interpreter may sit under a folder only root enters (a pyenv in /root).
    Then a venv of the system's python3 (same version) in a root-owned 0755 folder,
    seeing this checkout and its packages through a `.pth` file, stands in for it.
    """
    import os
    import shutil
    import sys
    import sysconfig
    import tempfile
    from pathlib import Path

    base = Path(tempfile.mkdtemp(prefix="tether-install-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        system = Path("/usr/bin/python3")
        version = subprocess.run(
            [str(system), "-c", "import sys; print(sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        if version != str(sys.version_info[:2]):
            pytest.skip(f"no system python3 of this version ({version or 'none'})")
        subprocess.run(
            [str(system), "-m", "venv", "--without-pip", str(base / "inst")],
            check=True,
        )
        site = (
            base
            / "inst"
            / "lib"
            / f"python{sys.version_info[0]}.{sys.version_info[1]}"
            / "site-packages"
        )
        source = Path(__file__).resolve().parents[2] / "src"
        (site / "tether-checkout.pth").write_text(
            f"{source}\n{sysconfig.get_paths()['purelib']}\n{sysconfig.get_paths()['platlib']}\n"
        )
        python = base / "inst" / "bin" / "python3"
        monkeypatch.setattr(sys, "executable", str(python))
        yield python
    finally:
        shutil.rmtree(base, ignore_errors=True)
