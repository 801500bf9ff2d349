"""Fixtures of the run tests: the store backends (one contract suite for all)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest
from tests.clocks import Clock
from tests.machine import missing

from tether.runs import Store
from tether.runs._sqlite import SqliteStore

from . import pg

if TYPE_CHECKING:
    from pathlib import Path

StoreFactory = Callable[[], Store]
"""Opens one more connection to the same store (a second run, another machine)."""


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """A real PostgreSQL server for the session: its admin URL (see `tests/runs/pg.py`).

    Skipped with the reason when the machine has none, except in CI, which must run it.
    """
    try:
        with pg.server() as url:
            yield url
    except pg.Missing as exc:
        missing("the PostgreSQL store tests", str(exc))


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    """The URL of a fresh, empty database on the session's server."""
    with pg.fresh_database(pg_server, f"t_{os.urandom(6).hex()}") as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
def store_factory(
    request: pytest.FixtureRequest, tmp_path: Path, clock: Clock
) -> Iterator[StoreFactory]:
    """Open connections to one fresh store of the backend under test."""
    opened: list[Store] = []
    if request.param == "postgres":
        from tether.runs._postgres import PostgresStore

        url = request.getfixturevalue("pg_url")

        def factory() -> Store:
            store = PostgresStore.open(url, clock=clock)
            opened.append(store)
            return store

    else:
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
