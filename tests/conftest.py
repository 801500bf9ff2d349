"""Shared fixtures: the anyio backend, an isolated tether home per test, the rule marker."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

if TYPE_CHECKING:
    from pathlib import Path

# Hypothesis's per-example deadline (200 ms) is a wall-clock bound that a loaded machine
# breaks at random; what a property bounds in time, its test asserts itself.
settings.register_profile("tether", deadline=None)
settings.load_profile("tether")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def tether_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Give every test an account-like home of its own (TETHER_HOME)."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("TETHER_HOME", str(home))
    for name in ("CLAUDECODE", "CODEX_SANDBOX", "TETHER_AGENT", "TETHER_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    return home


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    for item in items:
        if item.get_closest_marker("root") and os.geteuid() != 0:
            item.add_marker(
                pytest.mark.skip(reason="needs root to chown files to other uids")
            )
