"""Fresh ids for sessions, turns and calls; an id is never drawn twice.

An id is a prefix, 48 random bits drawn once per process, and a counter: unique within
the process by the counter, across processes by the random part, and cheap enough for
the per-call path (no system call per id).
"""

from __future__ import annotations

import itertools
import os
import secrets

__all__ = ("new_id",)

_PROCESS = secrets.token_hex(6)
_COUNTER = itertools.count(1)


def _redraw() -> None:
    # A forked child must not repeat its parent's ids.
    global _PROCESS, _COUNTER
    _PROCESS = secrets.token_hex(6)
    _COUNTER = itertools.count(1)


os.register_at_fork(after_in_child=_redraw)


def new_id(prefix: str) -> str:
    """Return a fresh id such as `call_3f9a0c1b2d4e-1a`."""
    return f"{prefix}_{_PROCESS}-{next(_COUNTER):x}"
