"""Configuration as a newcomer meets it: a named file must exist, a mistyped table or key is
named with the nearest known one, no file says where it looked, a bad TETHER_GRACE names
the variable and breaks only what needs it; `tether config path / show` (spec 04)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest
from tests.cli._run import tether

from tether import Runtime
from tether.config import load_config
from tether.errors import UsageError

if TYPE_CHECKING:
    from pathlib import Path


def _write_config(home: Path, text: str) -> Path:
    file = home / "config" / "config.toml"
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(text, encoding="utf-8")
    return file


def test_config_path_prints_where_the_file_is(tether_home: Path) -> None:
    """`tether config path` prints the account's file even before it exists."""
    proc = tether("config", "path")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{tether_home / 'config' / 'config.toml'}\n"
    data = json.loads(tether("config", "path", "--json").stdout)
    assert data == {
        "path": str(tether_home / "config" / "config.toml"),
        "exists": False,
        "from": None,
    }


def test_with_no_config_show_says_which_path_was_looked_at(tether_home: Path) -> None:
    """No file: the defaults, and the path that was tried."""
    proc = tether("config", "show")
    assert proc.returncode == 0, proc.stderr
    expected = f"No config file at {tether_home / 'config' / 'config.toml'}"
    assert proc.stdout.splitlines()[0] == f"{expected}; the defaults are in force."
    assert "  grace = 10.0" in proc.stdout.splitlines()


def test_config_show_lists_the_file_and_overrides(tether_home: Path) -> None:
    """The file's settings, and which TETHER_* variables override them."""
    file = _write_config(tether_home, 'grace = 4\n[permissions]\nallow = ["Read"]\n')
    proc = tether("config", "show", "--json", env={"TETHER_ABORT_BOUND": "2"})
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["path"] == str(file)
    assert data["exists"] is True
    assert data["overrides"] == ["TETHER_ABORT_BOUND"]
    assert data["settings"]["grace"] == 4
    assert data["settings"]["abort_bound"] == 2
    assert data["settings"]["permissions"]["allow"] == ["Read"]


def test_tether_config_naming_a_missing_file_is_an_error(
    tmp_path: Path, tether_home: Path
) -> None:
    """TETHER_CONFIG=/no/such/file is refused, naming the variable and the fix — not the
    defaults in silence."""
    missing = tmp_path / "nope.toml"
    proc = tether("config", "show", env={"TETHER_CONFIG": str(missing)})
    assert proc.returncode == 2
    assert proc.stderr == (
        f"tether: TETHER_CONFIG names {missing}, which does not exist; create it, "
        f"or unset TETHER_CONFIG to use {tether_home / 'config' / 'config.toml'}\n"
    )


def test_a_misspelt_table_names_the_nearest_known_one(tether_home: Path) -> None:
    """`[permisions]` is an error that says `permissions`."""
    file = _write_config(tether_home, '[permisions]\nallow = ["Read"]\n')
    proc = tether("permissions")
    assert proc.returncode == 2
    assert proc.stderr == (
        f"tether: {file}: unknown setting [permisions]; did you mean permissions?\n"
    )


def test_a_misspelt_key_names_the_nearest_known_one(tether_home: Path) -> None:
    """`permissions.alow` is an error that says `allow`."""
    file = _write_config(tether_home, '[permissions]\nalow = ["Read"]\n')
    with pytest.raises(UsageError) as caught:
        load_config()
    assert str(caught.value) == (
        f"{file}: unknown key permissions.alow; did you mean allow?"
    )


def test_a_setting_of_the_wrong_type_is_named(tether_home: Path) -> None:
    """`grace = "soon"` names the setting; `mcp_read_only_hint = 1` is not a bool."""
    _write_config(tether_home, 'grace = "soon"\n')
    with pytest.raises(UsageError, match=r"grace has the wrong type \('soon'\)"):
        load_config()
    _write_config(tether_home, "mcp_read_only_hint = 1\n")
    with pytest.raises(UsageError, match="mcp_read_only_hint has the wrong type"):
        load_config()


def test_the_model_tables_system_is_a_string(tether_home: Path) -> None:
    """`[model] system` is the sessions' system message; anything but text is named."""
    _write_config(tether_home, '[model]\nsystem = "Be brief."\n')
    assert load_config().model_system == "Be brief."
    file = _write_config(tether_home, "[model]\nsystem = 3\n")
    with pytest.raises(UsageError) as caught:
        load_config()
    assert str(caught.value) == f"{file}: model.system must be a string"


def test_a_bad_tether_grace_names_the_variable_and_spares_other_commands(
    tmp_path: Path,
) -> None:
    """TETHER_GRACE=soon: `tether permissions` still works; what needs the grace window
    (a Runtime, `config show`) fails naming TETHER_GRACE."""
    env = {"TETHER_GRACE": "soon"}
    assert tether("permissions", "--json", env=env).returncode == 0
    shown = tether("config", "show", env=env)
    assert shown.returncode == 1
    assert "tether: TETHER_GRACE must be a number of seconds, not 'soon'" in (
        shown.stderr
    )
    assert "grace = (invalid: TETHER_GRACE" in shown.stdout


def test_a_runtime_with_a_bad_tether_grace_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runtime needs the grace window: it refuses, naming the variable; given a grace
    of its own, it does not read the variable."""
    monkeypatch.setenv("TETHER_GRACE", "-1")
    with pytest.raises(UsageError, match=r"^TETHER_GRACE must be more than 0 seconds"):
        Runtime(workspace=tmp_path, tools=[])
    Runtime(workspace=tmp_path, tools=[], grace=1.0)


def test_permissions_without_config_names_the_path_it_looked_at(
    tether_home: Path,
) -> None:
    """`tether permissions` with no file says where the file would be."""
    proc = tether("permissions")
    assert proc.returncode == 0, proc.stderr
    where = tether_home / "config" / "config.toml"
    assert proc.stdout.splitlines()[0] == f"No config file at {where}: defaults only"
