"""Fixtures of the run tests: the store backends (one contract suite for all)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tether.runs import Store
from tether.runs._sqlite import SqliteStore

StoreFactory = Callable[[], Store]
"""Opens one more connection to the same store (a second run, another machine)."""


class Clock:
    """A wall clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=["sqlite"])
def store_factory(
    request: pytest.FixtureRequest, tmp_path: Path, clock: Clock
) -> Iterator[StoreFactory]:
    """Open connections to one fresh store of the backend under test."""
    opened: list[Store] = []
    path = tmp_path / "store" / "runs.sqlite3"

    def factory() -> Store:
        store = SqliteStore.open(path, clock=clock)
        opened.append(store)
        return store

    yield factory
    for store in opened:
        store.close()


@pytest.fixture
def store(store_factory: StoreFactory) -> Store:
    return store_factory()


@pytest.fixture(autouse=True)
def _close_opened() -> Iterator[None]:
    """Every process a test started is reaped and every store closed."""
    from .support import close_opened

    yield
    close_opened()
