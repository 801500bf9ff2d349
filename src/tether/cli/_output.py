"""How every command prints JSON: one style, compact unless `--pretty`.

The root group gives each command that has `--json` a `--pretty` option (see
`cli/__init__.py`); commands print with `echo_json()` and never choose a style themselves.
"""

from __future__ import annotations

import json
from typing import Any

import click

__all__ = ("PRETTY", "echo_json", "pretty_option")

PRETTY = "tether.pretty"
"""Key in the click context's meta: whether `--pretty` was given."""


def echo_json(data: Any) -> None:
    """Print `data` as JSON: one line, or indented with `--pretty`."""
    ctx = click.get_current_context(silent=True)
    pretty = bool(ctx is not None and ctx.meta.get(PRETTY))
    click.echo(json.dumps(data, indent=2 if pretty else None, ensure_ascii=False))


def _remember(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    ctx.meta[PRETTY] = value


def pretty_option() -> click.Option:
    """The `--pretty` option; it sets the style for `echo_json()` and is not passed on."""
    return click.Option(
        ["--pretty"],
        is_flag=True,
        expose_value=False,
        callback=_remember,
        help="Indent the JSON output (with --json).",
    )
