"""`store_url`: `TETHER_STORE` names the store; the 0.1.0 `TETHER_STORE_URL` still works, said to be deprecated."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether.runs import store_url
from tether.runs._open import _store_url_deprecated

if TYPE_CHECKING:
    from pathlib import Path

    import pytest


def test_tether_store_names_the_store_before_the_plans(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Spec 03: `--store`, else `TETHER_STORE`, else the plan's `store`; nothing is said."""
    monkeypatch.setenv("TETHER_STORE", str(tmp_path / "env.sqlite3"))
    assert store_url(None, str(tmp_path / "plan.sqlite3")) == str(
        tmp_path / "env.sqlite3"
    )
    assert store_url("/opt.sqlite3", "/plan.sqlite3") == "/opt.sqlite3"
    assert capsys.readouterr().err == ""


def test_the_released_store_url_variable_is_honoured_with_one_line_saying_what_to_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tether choice: 0.1.0's README listed `TETHER_STORE_URL` as the config's
    `store_url` override, so it keeps that place (below the plan's `store`) and one line
    per process says to set `TETHER_STORE` instead."""
    _store_url_deprecated.cache_clear()
    monkeypatch.setenv("TETHER_STORE_URL", str(tmp_path / "old.sqlite3"))
    assert store_url() == str(tmp_path / "old.sqlite3")
    assert store_url(None, "/plan.sqlite3") == "/plan.sqlite3"
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "tether: TETHER_STORE_URL is deprecated and will be removed; "
        "set TETHER_STORE instead (it wins over the plan's store)"
    ]
