"""Store URLs never show their password; a run is alive from its first row; runs
recorded with the bare host name are judged by their process here."""

from __future__ import annotations

import os
import socket

import pytest

from tether.errors import UsageError
from tether.runs._liveness import process_alive, process_start
from tether.runs._open import open_store
from tether.runs._takeover import _leases_expired
from tether.runs._url import has_password, redact
from tether.runs._values import RunRow, RunState


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
    assert redact(url) == shown
    assert has_password(url) == ("***" in shown)


def test_an_unknown_scheme_is_refused_without_its_password() -> None:
    with pytest.raises(UsageError) as refused:
        open_store("mysql://u:s3cret@h/db")
    assert "s3cret" not in str(refused.value)
    assert "u:***@h/db" in str(refused.value)


def test_a_password_libpq_cannot_read_is_not_quoted_back() -> None:
    pytest.importorskip("psycopg", reason="the PostgreSQL store needs psycopg")
    with pytest.raises(UsageError) as refused:
        open_store("postgresql://u:Hunter%zz2@127.0.0.1:1/db")
    assert "Hunter" not in str(refused.value)
    assert "not a valid PostgreSQL URL" in str(refused.value)


def _run(expires: float | None) -> RunRow:
    return RunRow(
        id="run_x",
        state=RunState.RUNNING,
        host="elsewhere/1",
        pid=1,
        pid_start=0.0,
        started_at=0.0,
        plan="plan.toml",
        repo=".",
        expires=expires,
    )


class _NoClaims:
    def claims(self, run: str) -> list[object]:
        return []


def test_a_run_is_judged_by_its_own_lease_before_any_claim() -> None:
    store = _NoClaims()
    assert not _leases_expired(store, _run(160.0), now=100.0)  # type: ignore[arg-type]
    assert _leases_expired(store, _run(99.0), now=100.0)  # type: ignore[arg-type]


def test_a_run_recorded_with_the_bare_host_name_is_judged_by_its_process_here() -> None:
    me = f"{socket.gethostname()}/some-machine"
    mine = process_alive(socket.gethostname(), os.getpid(), process_start(), here_id=me)
    assert mine is True
    assert process_alive("other", os.getpid(), process_start(), here_id=me) is None
