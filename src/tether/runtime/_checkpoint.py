"""A SQLite ledger's checkpoints, off the writer's thread.

SQLite copies a WAL file's pages into the database file (a checkpoint) by itself once
the WAL holds 1,000 pages, in the connection whose commit crossed that line: the
ledger's writer, on the runtime's event loop, in the middle of a call's row (and so of
a cancel's answer). Under `synchronous=NORMAL` a checkpoint syncs the WAL and the
database file to disk, 10-35 ms on a loaded 2-core machine, once every 190 calls or so.
The writer's connection turns that off (`wal_autocheckpoint=0`) and a `Checkpointer`
runs the same PASSIVE checkpoint every `every` row writes in a thread of its own, on a
connection of its own. What is durable does not change: a committed row is in the WAL
either way; only the thread that waits for the disk does.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ("CHECKPOINT_EVERY", "Checkpointer", "checkpoint")

CHECKPOINT_EVERY = 150
"""Row writes between two checkpoints: about 1 MB of WAL (SQLite's own line is 4 MB)."""

_log = logging.getLogger("tether.ledger")


class Checkpointer:
    """Checkpoints a ledger file's WAL in a thread, every `every` row writes.

    One checkpoint at a time: writes counted while one runs wait for the next.
    """

    def __init__(self, path: Path, *, every: int = CHECKPOINT_EVERY) -> None:
        self.path = path
        self.every = every
        self._writes = 0
        self._thread: threading.Thread | None = None

    def wrote(self) -> None:
        """One row was written: start a checkpoint if it is time and none runs."""
        self._writes += 1
        if self._writes < self.every:
            return
        if self._thread is not None and self._thread.is_alive():
            return  # the one under way takes these pages too, or the next does
        self._writes = 0
        self._thread = threading.Thread(
            target=checkpoint,
            args=(self.path,),
            name="tether-ledger-checkpoint",
            daemon=True,
        )
        self._thread.start()

    def close(self, timeout: float = 5.0) -> None:
        """Wait (at most `timeout` seconds) for a checkpoint under way."""
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)


def checkpoint(path: Path) -> None:
    """One PASSIVE checkpoint of the file's WAL, on a connection of its own.

    It waits for no reader or writer; a failure is logged and the next one tries again
    (the WAL grows meanwhile, and the writer's close checkpoints it too).
    """
    try:
        db = sqlite3.connect(path, timeout=1.0)
        try:
            db.execute("PRAGMA wal_checkpoint(PASSIVE)")
        finally:
            db.close()
    except sqlite3.Error as exc:
        _log.warning("tether: the ledger %s was not checkpointed: %s", path, exc)
