"""Store URLs never show their password: not in a message, not in a refusal."""

from __future__ import annotations

import pytest

from tether.errors import UsageError
from tether.runs._open import open_store
from tether.runs._url import has_password, redact


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:s3cret@h/db", "postgresql://u:***@h/db"),
        ("postgresql://u:se/cret@h:5432/db", "postgresql://u:***@h:5432/db"),
        ("postgresql://u:se@cr@et@h/db", "postgresql://u:***@h/db"),
        (
            "postgresql://h/db?user=u&password=s3cret",
            "postgresql://h/db?user=u&password=***",
        ),
        ("postgresql://u@h/db", "postgresql://u@h/db"),
    ],
)
def test_redact_hides_every_form_of_password(url: str, shown: str) -> None:
    """In the user part, with `/` or `@` inside it, or as a query parameter."""
    assert redact(url) == shown
    assert has_password(url) == ("***" in shown)


def test_an_unknown_scheme_is_refused_without_its_password() -> None:
    """The refusal quotes the URL, its password masked."""
    with pytest.raises(UsageError) as refused:
        open_store("mysql://u:s3cret@h/db")
    assert "s3cret" not in str(refused.value)
    assert "u:***@h/db" in str(refused.value)


def test_a_password_libpq_cannot_read_is_not_quoted_back() -> None:
    """A URL the driver cannot parse is refused without any part of the password."""
    pytest.importorskip("psycopg", reason="the PostgreSQL store needs psycopg")
    with pytest.raises(UsageError) as refused:
        open_store("postgresql://u:Hunter%zz2@127.0.0.1:1/db")
    assert "Hunter" not in str(refused.value)
    assert "not a valid PostgreSQL URL" in str(refused.value)
