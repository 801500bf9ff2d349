"""The account's tether config: where it lives, what it says, and `TETHER_*` overrides.

One TOML file per account. `TETHER_HOME` (when set) roots both config and state, which is
how tests give each case an account-like home of its own. This module only reads; the
setup record of the recorded stop is `tether.stop`'s own file.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

import attrs
import platformdirs

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


def paths() -> Paths:
    """Return the account's tether paths, honouring `TETHER_HOME`."""
    home = os.environ.get(TetherEnv.HOME)
    if home:
        root = Path(home)
        return Paths(config_dir=root / "config", state_dir=root / "state")
    return Paths(
        config_dir=platformdirs.user_config_path("tether"),
        state_dir=platformdirs.user_state_path("tether"),
    )


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
    grace: float = 10.0
    """PROCESS grace window, seconds."""
    abort_bound: float = 1.0
    """Bound on `Session.abort()`, seconds."""
    image_command: str | None = None
    """GenerateImages command template with `{prompt}` and `{out}`; None: built-in."""
    model_url: str | None = None
    """OpenAI-compatible endpoint base URL (`url` in the `[model]` table)."""
    model: str | None = None
    """The model `tether chat` uses when none is given (`name` in the `[model]` table),
    such as `openai:gpt-4o` or `scripted:moves.jsonl`."""
    store_url: str | None = None
    """Claims and ledger store: SQLite path or PostgreSQL URL."""
    source: Path | None = None
    """The file these settings came from, if any."""


def _strings(table: dict[str, Any], key: str, where: Path) -> tuple[str, ...]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"{where}: permissions.{key} must be a list of strings")
    return tuple(value)


def _float(raw: object, name: str) -> float:
    try:
        value = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise UsageError(f"{name} must be a number of seconds, not {raw!r}") from None
    if value <= 0:
        raise UsageError(f"{name} must be more than 0 seconds, not {raw!r}")
    return value


def load_config(path: Path | None = None) -> Config:
    """Read the config file (missing file: defaults) and apply `TETHER_*` overrides.

    Raises:
        UsageError: the file is not valid TOML or a setting has the wrong type; the
            message names the file and the setting.
    """
    file = path if path is not None else paths().config_file
    data: dict[str, Any] = {}
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        file_found: Path | None = None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{file} is not valid TOML: {exc}") from None
    else:
        file_found = file
    perms = data.get("permissions", {})
    if not isinstance(perms, dict):
        raise UsageError(f"{file}: [permissions] must be a table")
    servers = data.get("mcpServers", data.get("mcp_servers", {}))
    if not isinstance(servers, dict):
        raise UsageError(f"{file}: mcpServers must be a table of servers")
    model = data.get("model", {})
    if not isinstance(model, dict):
        raise UsageError(f"{file}: [model] must be a table with url and name")
    env = os.environ
    return Config(
        allow=_strings(perms, "allow", file),
        ask=_strings(perms, "ask", file),
        deny=_strings(perms, "deny", file),
        mcp_servers=servers,
        mcp_read_only_hint=bool(data.get("mcp_read_only_hint", False)),
        grace=_float(env.get(TetherEnv.GRACE, data.get("grace", 10.0)), "grace"),
        abort_bound=_float(
            env.get(TetherEnv.ABORT_BOUND, data.get("abort_bound", 1.0)), "abort_bound"
        ),
        image_command=env.get(TetherEnv.IMAGE_COMMAND, data.get("image_command")),
        model_url=env.get(TetherEnv.MODEL_URL, model.get("url", data.get("model_url"))),
        model=model.get("name"),
        store_url=env.get(TetherEnv.STORE_URL, data.get("store_url")),
        source=file_found,
    )
