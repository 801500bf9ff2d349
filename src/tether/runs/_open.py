"""Which store a run uses, and opening it: a SQLite file or a PostgreSQL server.

The SQLite file is the embedded default. This module sits above both backends, so
that neither imports what chooses it.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .. import _extras
from .._config import load_config, paths
from .._env import TetherEnv
from ..errors import UsageError
from ._sqlite import SqliteStore
from ._url import redact

if TYPE_CHECKING:
    from ._store import Store

__all__ = ("default_store_path", "is_postgres_url", "open_store", "store_url")


def default_store_path() -> Path:
    """The embedded SQLite file, `<state dir>/runs.sqlite3`."""
    return paths().state_dir / "runs.sqlite3"


def store_url(option: str | None = None, plan_store: str | None = None) -> str:
    """Choose the store: `--store`, else `TETHER_STORE`, else the plan's, else the config's.

    Returns the embedded SQLite file's path when none names one. `TETHER_STORE_URL`
    (0.1.0 documented it as the config's `store_url`) is still honoured there, with one
    line on stderr saying to set `TETHER_STORE` instead.
    """
    if os.environ.get(TetherEnv.STORE_URL):
        _store_url_deprecated()
    for choice in (
        option,
        os.environ.get(TetherEnv.STORE),
        plan_store,
        load_config().store_url,
    ):
        if choice and choice != "sqlite":
            return choice
    return str(default_store_path())


@functools.cache
def _store_url_deprecated() -> None:
    """Say once per process that `TETHER_STORE_URL` is deprecated."""
    sys.stderr.write(
        f"tether: {TetherEnv.STORE_URL} is deprecated and will be removed; "
        f"set {TetherEnv.STORE} instead (it wins over the plan's store)\n"
    )


def is_postgres_url(url: str) -> bool:
    """Whether `url` names a PostgreSQL store (`postgresql://` or `postgres://`)."""
    return url.lower().startswith(("postgresql://", "postgres://"))


def open_store(url: str) -> Store:
    """Open the store at `url` (a SQLite file path, `sqlite:///path`, or PostgreSQL).

    Raises:
        UsageError: the URL names no backend, or is not a valid PostgreSQL URL, or
            names PostgreSQL where the `postgres` extra is not installed.
        StoreError: the file breaks the owner-only rule or cannot be opened; the
            PostgreSQL server cannot be reached, refuses the login, or keeps a newer
            schema.
    """
    if is_postgres_url(url):
        if not _extras.installed("postgres"):
            raise UsageError(_extras.missing("postgres", "a postgresql:// store"))
        from ._postgres import PostgresStore  # psycopg is loaded only when used

        return PostgresStore.open(url)
    if "://" in url and not url.startswith("sqlite://"):
        raise UsageError(
            f"store {redact(url)!r}: use a file path or a postgresql:// URL"
        )
    return SqliteStore.open(Path(url.removeprefix("sqlite://")))
