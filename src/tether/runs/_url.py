"""Store URLs as errors and the ledger may show them: never with their password."""

from __future__ import annotations

import re

__all__ = ("has_password", "redact")

_QUERY_PASSWORD = re.compile(r"([?&]password=)[^&]*", re.IGNORECASE)


def _split(url: str) -> tuple[str, str, str, str]:
    """(scheme with `://`, user part with its `@` or "", the rest up to `?`, query)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    else:
        scheme += sep
    place, mark, query = rest.partition("?")
    # The user part ends at the last `@` before the query: a password may hold `@` or `/`.
    user, at, host = place.rpartition("@")
    return scheme, user + at, host, mark + query


def has_password(url: str) -> bool:
    """Whether `url` carries a password (in its user part or its query)."""
    _scheme, user, _host, query = _split(url)
    return ":" in user or bool(_QUERY_PASSWORD.search(query))


def redact(url: str) -> str:
    """`url` with its password (in the user part or the query) replaced by `***`."""
    scheme, user, host, query = _split(url)
    if ":" in user:
        user = user.split(":", 1)[0] + ":***@"
    return scheme + user + host + _QUERY_PASSWORD.sub(r"\1***", query)
