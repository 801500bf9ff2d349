"""Fixtures of the stop tests."""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING

import pytest
from tests import accounts
from tests.accounts import searchable_dir

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

    `tether setup --system` runs the installed tether as each bound account.
    """
    with searchable_dir("tether-install-") as base:
        python = accounts.everyones_python(base)
        monkeypatch.setattr(sys, "executable", str(python))
        yield python
