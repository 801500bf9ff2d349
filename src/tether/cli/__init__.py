"""The `tether` command: a click group whose commands live one per module.

Commands are imported only when run, so `tether --help` stays fast. Exit codes: 0 ok,
1 failure, 2 refused or usage; errors are one line that says what to do.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

import click

from ..errors import TetherError

__all__ = ("cli", "main")

# Command name -> "module:attribute" inside tether.cli. Each module defines one command.
_COMMANDS: dict[str, str] = {
    "chat": "chat:chat",
    "demo": "demo:demo",
    "guard": "guard:guard",
    "host": "host:host",
    "lift": "lift:lift",
    "permissions": "permissions:permissions",
    "queue": "queue:queue",
    "run": "run:run",
    "runs": "runs:runs",
    "setup": "setup:setup",
    "status": "status:status",
    "stop": "stop:stop",
    "takeover": "takeover:takeover",
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(
            name
            for name, target in _COMMANDS.items()
            if importlib.util.find_spec(f"{__name__}.{target.split(':')[0]}")
            is not None
        )

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = _COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        module = importlib.import_module(f"{__name__}.{module_name}")
        command = getattr(module, attr)
        assert isinstance(command, click.Command)
        return command


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tether")
def cli() -> None:
    """Run AI agents' work with a Stop that is honest and prompt.

    \b
    Examples:
      tether demo                 a turn whose tools are stopped, with the report
      tether status --json        is a stop set for this account's runs?
      tether host --stdio         serve tools over JSON-RPC on stdin/stdout
    """


def main() -> None:
    """Run the `tether` command, mapping tether errors to one line and an exit code."""
    try:
        code = cli.main(standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(1)
    except TetherError as exc:
        click.echo(f"tether: {exc}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    # Without standalone mode click returns the code a command gave `ctx.exit(n)`.
    if isinstance(code, int) and code:
        sys.exit(code)
