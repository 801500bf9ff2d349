"""Accounts as people know them: `alice (uid 1002)`, or `uid 1002` when none is named.

Messages that tell someone to act as another account (lift a stop, run setup) name it
the way that person logs in; the uid stays beside the name, since two systems may name
one uid differently and a message read on another machine must still point at one
account.
"""

from __future__ import annotations

import pwd

__all__ = ("who",)


def who(uid: int) -> str:
    """`name (uid N)` when the account database names `uid`, else `uid N`."""
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (KeyError, OverflowError):
        return f"uid {uid}"
