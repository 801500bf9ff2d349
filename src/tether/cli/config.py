"""`tether config`: where the account's config file is, and what is in force."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import click

from ._output import echo_json

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ("config",)


@click.group()
def config() -> None:
    """Show the account's configuration file and the settings in force.

    The file is `$TETHER_HOME/config/config.toml` when TETHER_HOME is set, else the
    platform's config directory; TETHER_CONFIG names another file.

    \b
    Examples:
      tether config path
      tether config show
      tether config show --json | jq .settings.grace
    """


@config.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def path(as_json: bool) -> None:
    """Print where the config file is (whether or not it exists).

    \b
    Examples:
      tether config path
      $EDITOR "$(tether config path)"
    """
    from .._config import paths
    from .._env import TetherEnv

    file = paths().config_file
    if as_json:
        echo_json(
            {
                "path": str(file),
                "exists": file.exists(),
                "from": TetherEnv.CONFIG if os.environ.get(TetherEnv.CONFIG) else None,
            }
        )
        return
    click.echo(str(file))


def _settings(cfg: Any) -> dict[str, Any]:
    """The settings in force; a setting an environment variable broke shows its error."""
    out: dict[str, Any] = {
        "permissions": {"allow": cfg.allow, "ask": cfg.ask, "deny": cfg.deny},
        "mcpServers": cfg.mcp_servers,
        "mcp_read_only_hint": cfg.mcp_read_only_hint,
    }
    for name in ("grace", "abort_bound"):
        out[name] = (
            {"error": cfg.invalid[name]} if name in cfg.invalid else getattr(cfg, name)
        )
    for name in ("image_command", "model_url", "model", "model_system", "store_url"):
        out[name] = getattr(cfg, name)
    return out


def _overrides() -> list[str]:
    from .._env import SET_FOR_CHILDREN, TetherEnv, names

    return sorted(
        name
        for name in names()
        if name not in (TetherEnv.HOME, TetherEnv.CONFIG)
        and name not in SET_FOR_CHILDREN
        and name in os.environ
    )


@config.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def show(as_json: bool) -> None:
    """Show the settings in force: the file's, after TETHER_* overrides.

    Exits 1 when an environment variable holds a value that cannot be used (the setting
    shows the error).

    \b
    Examples:
      tether config show
      TETHER_GRACE=3 tether config show --json --pretty
    """
    from .._config import load_config

    cfg = load_config()
    settings = _settings(cfg)
    file: Path | None = cfg.looked_at
    if as_json:
        echo_json(
            {
                "path": str(file),
                "exists": cfg.source is not None,
                "overrides": _overrides(),
                "settings": settings,
            }
        )
    else:
        if cfg.source is None:
            click.echo(f"No config file at {file}; the defaults are in force.")
        else:
            click.echo(f"Settings from {file}")
        overrides = _overrides()
        if overrides:
            click.echo(f"Overridden by: {', '.join(overrides)}")
        for name, value in settings.items():
            click.echo(f"  {name} = {_shown(value)}")
    for error in cfg.invalid.values():
        click.echo(f"tether: {error}", err=True)
    if cfg.invalid:
        click.get_current_context().exit(1)


def _shown(value: Any) -> str:
    if isinstance(value, dict) and "error" in value:
        return f"(invalid: {value['error']})"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_shown(v)}" for k, v in value.items()) or "(none)"
    if isinstance(value, tuple | list):
        return ", ".join(map(str, value)) or "(none)"
    return "(not set)" if value is None else str(value)
