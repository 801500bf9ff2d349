"""The `tether` command's click group, whose commands live one per module.

Commands are imported only when run, so `tether --help` stays fast. Exit codes: 0 ok,
1 failure, 2 refused or usage; errors are one line that says what to do.
"""

from __future__ import annotations

import difflib
import errno
import importlib
import importlib.util
import os
import sys
from typing import NoReturn

import click

from ..errors import TetherError
from ._output import pretty_option

__all__ = ("COMMANDS", "cli", "main")

# Command name -> "module:attribute" inside tether.cli. Each module defines one command.
COMMANDS: dict[str, str] = {
    "acp": "acp:acp",
    "board": "board:board",
    "chat": "chat:chat",
    "config": "config:config",
    "demo": "demo:demo",
    "fetch": "fetch:fetch",
    "guard": "guard:guard",
    "host": "host:host",
    "lanes": "lanes:lanes",
    "ledger": "ledger:ledger",
    "lift": "lift:lift",
    "logs": "logs:logs",
    "mcp": "mcp:mcp",
    "permissions": "permissions:permissions",
    "queue": "queue:queue",
    "run": "run:run",
    "runs": "runs:runs",
    "setup": "setup:setup",
    "status": "status:status",
    "tools": "tools:tools",
    "stop": "stop:stop",
    "takeover": "takeover:takeover",
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(
            name
            for name, target in COMMANDS.items()
            if importlib.util.find_spec(f"{__package__}.{target.split(':')[0]}")
            is not None
        )

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        module = importlib.import_module(f"{__package__}.{module_name}")
        command = getattr(module, attr)
        assert isinstance(command, click.Command)
        _add_pretty(command)
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and not name.startswith("-") and name not in COMMANDS:
            close = difflib.get_close_matches(name, list(COMMANDS), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            ctx.fail(f"No such command {name!r}.{hint} See 'tether --help'.")
        return super().resolve_command(ctx, args)


def _add_pretty(command: click.Command) -> None:
    """Give every command with `--json` (in groups too) the one `--pretty` option."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _add_pretty(sub)
    names = {p.name for p in command.params}
    has_json = any("--json" in getattr(p, "opts", ()) for p in command.params)
    if has_json and "pretty" not in names:
        command.params.append(pretty_option())


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tether")
def cli() -> None:
    """Run AI agents' work with a Stop that is honest and prompt.

    \b
    Examples:
      tether demo                 an unattended run stopped, halted and taken over
      tether demo turn            a turn whose tools are stopped, with the report
      tether run plan.toml        work through a plan's items in lanes
      tether stop --reason TEXT   set the stop every run of this account honours
      tether status --json        is a stop set for this account's runs?
      tether chat --model openai:MODEL
                                  talk to an agent in the terminal
      tether acp                  serve an ACP editor (Zed and others) on stdio
      tether mcp serve            serve tether's tools to any MCP client (stdio, HTTP)
    """


def _pipe_closed() -> NoReturn:
    """The reader went away (`tether demo | head -1`): not a failure, so exit 0.

    Standard output is pointed at /dev/null so the interpreter's last flush cannot
    complain either.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.__stdout__.fileno() if sys.__stdout__ else 1)
    sys.exit(0)


def main() -> None:
    """Run the `tether` command, mapping tether errors to one line and an exit code."""
    try:
        # prog_name: `_TETHER_COMPLETE` drives shell completion however tether started.
        code = cli.main(prog_name="tether", standalone_mode=False)
    except BrokenPipeError:
        _pipe_closed()
    except SystemExit:
        # click turns a closed pipe into exit 1 after wrapping stdout in its flush
        # pacifier (a class it does not export), which is how the case is told apart.
        if type(sys.stdout).__name__.endswith("PacifyFlushWrapper"):
            _pipe_closed()
        raise
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
    except BaseException as exc:  # a full disk, however deep in a task group
        if _only(exc, BrokenPipeError):
            _pipe_closed()  # the reader went away inside a task group
        full = _full_disk(exc)
        if full is None:
            raise
        click.echo(f"tether: {full}", err=True)
        sys.exit(1)
    # Without standalone mode click returns the code a command gave `ctx.exit(n)`.
    if isinstance(code, int) and code:
        sys.exit(code)


_FULL = ("No space left on device", "disk is full", "Out of diskspace", "ENOSPC")


def _only(exc: BaseException, kind: type[BaseException]) -> bool:
    """Whether `exc` is `kind`, or a group holding nothing else."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_only(inner, kind) for inner in exc.exceptions)
    return isinstance(exc, kind)


def _full_disk(exc: BaseException) -> str | None:
    """One line for an error that is (or a group that holds) a full file system."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _full_disk(inner)
            if found is not None:
                return found
        return None
    text = str(exc)
    if not (
        (isinstance(exc, OSError) and exc.errno == errno.ENOSPC)
        or any(mark in text for mark in _FULL)
    ):
        return None
    from .._config import paths

    state = paths().state_dir
    where = getattr(exc, "filename", None) or (
        str(state) if str(state) in text or "OperationalError" in repr(exc) else ""
    )
    place = f"the file system of {where}" if where else "a file system tether writes"
    return (
        f"no space left on {place}: free some space there; what was saved stays "
        "saved, and `tether runs` shows what to take over once there is room"
    )
