"""The account's tether config: where it lives, what it says, and `TETHER_*` overrides.

One TOML file per account. `TETHER_HOME` (when set) roots both config and state, which is
how tests give each case an account-like home of its own. This module only reads; the
setup record of the recorded stop is `tether.stop`'s own file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import attrs

from ._dirs import config_dir, state_dir
from ._env import TetherEnv
from .errors import UsageError

__all__ = ("Config", "Paths", "load_config", "paths")


@attrs.frozen
class Paths:
    """Where the account's tether files live."""

    config_dir: Path
    """Holds `config.toml`."""
    state_dir: Path
    """Holds ledgers, the own-store stop, run state."""

    @property
    def config_file(self) -> Path:
        """The config file (`TETHER_CONFIG` overrides it)."""
        override = os.environ.get(TetherEnv.CONFIG)
        return Path(override) if override else self.config_dir / "config.toml"

    @property
    def board_dir(self) -> Path:
        """Holds `tether board`'s token (0700; masked in every walled tree)."""
        return self.state_dir / "board"

    @property
    def mcp_auth_dir(self) -> Path:
        """Holds MCP servers' OAuth tokens (0700; masked in every walled tree)."""
        return self.state_dir / "mcp-auth"


def paths() -> Paths:
    """Return the account's tether paths, honouring `TETHER_HOME`."""
    return Paths(config_dir=Path(config_dir()), state_dir=Path(state_dir()))


# Every setting the config file may hold, in one place: a new setting is one entry here.
# A table maps to the keys it allows (None: any keys, e.g. one table per MCP server).
TABLES: dict[str, frozenset[str] | None] = {
    "permissions": frozenset({"allow", "ask", "deny"}),
    "mcpServers": None,
    "mcp_servers": None,
    "model": frozenset({"url", "name", "system"}),
}
"""The config file's tables and the keys each allows."""
SETTINGS: dict[str, type | tuple[type, ...]] = {
    "mcp_read_only_hint": bool,
    "grace": (int, float),
    "abort_bound": (int, float),
    "image_command": str,
    "model_url": str,
    "store_url": str,
}
"""The config file's top-level settings and the TOML types each takes."""


@attrs.frozen(kw_only=True)
class Config:
    """The account's settings, after `TETHER_*` overrides."""

    allow: tuple[str, ...] = ()
    """Permission rules that allow a call (`Bash(git status:*)`, `Read`)."""
    ask: tuple[str, ...] = ()
    """Permission rules that make the approver decide."""
    deny: tuple[str, ...] = ()
    """Permission rules that refuse a call; deny wins over ask and allow."""
    mcp_servers: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    """MCP servers in the usual `mcpServers` shape."""
    mcp_read_only_hint: bool = False
    """Treat MCP tools annotated `readOnlyHint` as READ_ONLY (abandoned on stop)."""
    _grace: float = attrs.field(default=10.0, alias="grace")
    _abort_bound: float = attrs.field(default=1.0, alias="abort_bound")
    image_command: str | None = None
    """GenerateImages command template with `{prompt}` and `{out}`; None: built-in."""
    model_url: str | None = None
    """OpenAI-compatible endpoint base URL (`url` in the `[model]` table)."""
    model: str | None = None
    """The model `tether chat` uses when none is given (`name` in the `[model]` table),
    such as `openai:gpt-4o` or `scripted:moves.jsonl`."""
    model_system: str | None = None
    """The system message of `tether chat` and `tether acp` sessions (`system` in the
    `[model]` table); None: one naming the workspace and the date."""
    store_url: str | None = None
    """Claims and ledger store: SQLite path or PostgreSQL URL."""
    source: Path | None = None
    """The file these settings came from, if any."""
    looked_at: Path | None = None
    """The file that was looked for (it may not exist: then the defaults are in force)."""
    invalid: dict[str, str] = attrs.field(factory=dict)
    """Settings an environment variable made unusable, with the error. They fail only
    when used, so a bad `TETHER_GRACE` does not break a command that needs no grace."""

    @property
    def grace(self) -> float:
        """PROCESS grace window, seconds.

        Raises:
            UsageError: `TETHER_GRACE` is not a positive number.
        """
        return self._valid("grace", self._grace)

    @property
    def abort_bound(self) -> float:
        """Bound on `Session.abort()`, seconds.

        Raises:
            UsageError: `TETHER_ABORT_BOUND` is not a positive number.
        """
        return self._valid("abort_bound", self._abort_bound)

    def _valid(self, name: str, value: float) -> float:
        if name in self.invalid:
            raise UsageError(self.invalid[name])
        return value


def _strings(table: dict[str, Any], key: str, where: Path) -> tuple[str, ...]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"{where}: permissions.{key} must be a list of strings")
    return tuple(value)


def _seconds(raw: object, name: str) -> float:
    try:
        value = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise UsageError(f"{name} must be a number of seconds, not {raw!r}") from None
    if value <= 0:
        raise UsageError(f"{name} must be more than 0 seconds, not {raw!r}")
    return value


def _nearest(word: str, known: list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else f"; known: {', '.join(known)}"


def check_keys(data: dict[str, Any], file: Path) -> None:
    """Refuse a table or key the config does not know, naming the nearest known one.

    Raises:
        UsageError: an unknown or mistyped table or setting.
    """
    known = sorted([*TABLES, *SETTINGS])
    for key, value in data.items():
        if key in SETTINGS:
            expected = SETTINGS[key]
            if not isinstance(value, expected) or (
                isinstance(value, bool) and expected is not bool
            ):
                raise UsageError(f"{file}: {key} has the wrong type ({value!r})")
            continue
        if key not in TABLES:
            shown = f"[{key}]" if isinstance(value, dict) else key
            raise UsageError(f"{file}: unknown setting {shown}{_nearest(key, known)}")
        if not isinstance(value, dict):
            raise UsageError(f"{file}: [{key}] must be a table")
        allowed = TABLES[key]
        if allowed is None:
            continue
        for sub in value:
            if sub not in allowed:
                raise UsageError(
                    f"{file}: unknown key {key}.{sub}{_nearest(sub, sorted(allowed))}"
                )


def _read(file: Path, *, must_exist: str | None) -> dict[str, Any] | None:
    """The file's TOML, or None when it does not exist and need not."""
    import tomllib  # here, not above: `paths()` is on the per-tool-call hook path

    try:
        return tomllib.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        if must_exist is not None:
            raise UsageError(must_exist) from None
        return None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{file} is not valid TOML: {exc}") from None
    except OSError as exc:
        raise UsageError(f"cannot read {file}: {exc.strerror}") from None


def load_config(path: Path | None = None) -> Config:
    """Read the config file and apply `TETHER_*` overrides.

    With no `path`, the account's file (`paths().config_file`); when it does not exist
    the defaults are in force and `looked_at` says which path was tried. A `path` given
    here, or by `TETHER_CONFIG`, must exist.

    Raises:
        UsageError: the file is missing though named, is not valid TOML, holds an unknown
            table or key (the message names the nearest known one) or a setting of the
            wrong type; the message names the file and the setting.
    """
    file = path if path is not None else paths().config_file
    named = os.environ.get(TetherEnv.CONFIG)
    must_exist = None
    if path is not None:
        must_exist = f"config file {file} does not exist"
    elif named:
        must_exist = (
            f"{TetherEnv.CONFIG} names {file}, which does not exist; create it, or "
            f"unset {TetherEnv.CONFIG} to use {paths().config_dir / 'config.toml'}"
        )
    data = _read(file, must_exist=must_exist)
    file_found = None if data is None else file
    data = data or {}
    check_keys(data, file)
    perms = data.get("permissions", {})
    servers = data.get("mcpServers", data.get("mcp_servers", {}))
    model = data.get("model", {})
    system = model.get("system")
    if system is not None and not isinstance(system, str):
        raise UsageError(f"{file}: model.system must be a string")
    env = os.environ
    invalid: dict[str, str] = {}
    timing: dict[str, float] = {}
    for name, var, default in (
        ("grace", TetherEnv.GRACE, 10.0),
        ("abort_bound", TetherEnv.ABORT_BOUND, 1.0),
    ):
        timing[name] = _seconds(data.get(name, default), f"{file}: {name}")
        if var in env:
            try:
                timing[name] = _seconds(env[var], var)
            except UsageError as exc:
                invalid[name] = str(exc)
    return Config(
        allow=_strings(perms, "allow", file),
        ask=_strings(perms, "ask", file),
        deny=_strings(perms, "deny", file),
        mcp_servers=servers,
        mcp_read_only_hint=bool(data.get("mcp_read_only_hint", False)),
        grace=timing["grace"],
        abort_bound=timing["abort_bound"],
        image_command=env.get(TetherEnv.IMAGE_COMMAND, data.get("image_command")),
        model_url=env.get(TetherEnv.MODEL_URL, model.get("url", data.get("model_url"))),
        model=model.get("name"),
        model_system=system,
        store_url=env.get(TetherEnv.STORE_URL, data.get("store_url")),
        source=file_found,
        looked_at=file,
        invalid=invalid,
    )
