"""Fresh ids for sessions, turns and calls; an id is never drawn twice."""

from __future__ import annotations

import secrets

__all__ = ("new_id",)


def new_id(prefix: str) -> str:
    """Return a fresh id such as `call_3f9a0c1b2d4e5f60` (64 random bits)."""
    return f"{prefix}_{secrets.token_hex(8)}"
