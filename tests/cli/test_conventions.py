"""What every command does alike (spec 04 conventions, tether choices): NO_COLOR means no
styling at all, a closed pipe is not a failure, JSON has one style, an unknown command
suggests the nearest one, and shell completion works as documented."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from tests.cli._run import TETHER, person_env, tether, tether_in_pty

pytestmark = pytest.mark.slow


_ESC = "\x1b["


def test_no_color_turns_off_every_style_on_a_terminal() -> None:
    """On a terminal `tether status` is styled (bold, colour); with NO_COLOR=1 not even
    bold is left."""
    code, styled = tether_in_pty("status", env=person_env(TERM="xterm-256color"))
    assert code == 0, styled
    assert _ESC in styled
    code, plain = tether_in_pty(
        "status", env=person_env(TERM="xterm-256color", NO_COLOR="1")
    )
    assert code == 0, plain
    assert _ESC not in plain
    assert "CLEAR" in plain


@pytest.mark.parametrize(
    "args", [("demo", "turn", "--grace", "0.3"), ("config", "show"), ("--help",)]
)
def test_a_closed_pipe_ends_quietly_with_exit_0(args: tuple[str, ...]) -> None:
    """`tether demo | head -1`: the reader goes away before tether writes; tether exits
    0 and prints no traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first byte
    proc = subprocess.run(
        [*TETHER, *args],
        stdout=write_end,
        stderr=subprocess.PIPE,
        text=True,
        timeout=90,
        check=False,
    )
    os.close(write_end)
    assert (proc.returncode, proc.stderr) == (0, "")


def test_json_is_compact_unless_pretty() -> None:
    """`--json` prints one line; `--pretty` indents the same data."""
    compact = tether("permissions", "--json")
    pretty = tether("permissions", "--json", "--pretty")
    assert compact.returncode == pretty.returncode == 0
    assert compact.stdout.count("\n") == 1
    assert pretty.stdout.startswith("{\n  ")
    assert json.loads(compact.stdout) == json.loads(pretty.stdout)


def test_every_command_with_json_has_pretty() -> None:
    """The one JSON style reaches every read command, including those added later."""
    import click

    from tether.cli import cli
    from tether.cli._app import COMMANDS

    ctx = click.Context(cli)
    seen = 0
    stack = [cli.get_command(ctx, name) for name in COMMANDS]
    while stack:
        command = stack.pop()
        assert command is not None
        if isinstance(command, click.Group):
            stack.extend(command.commands.values())
        opts = {o for p in command.params for o in getattr(p, "opts", ())}
        if "--json" in opts:
            seen += 1
            assert "--pretty" in opts, command.name
    assert seen >= 4


def test_an_unknown_command_suggests_the_nearest() -> None:
    """`tether stauts` says `status`, exits 2 (usage)."""
    proc = tether("stauts")
    assert proc.returncode == 2
    assert "No such command 'stauts'. Did you mean 'status'?" in proc.stderr


def test_shell_completion_completes_commands() -> None:
    """`_TETHER_COMPLETE=bash_source tether` prints the script the README shows, and
    completing `tether sta` offers `status`."""
    script = tether(env={"_TETHER_COMPLETE": "bash_source"})
    assert script.returncode == 0
    assert "_tether_completion" in script.stdout
    done = tether(
        env={
            "_TETHER_COMPLETE": "bash_complete",
            "COMP_WORDS": "tether sta",
            "COMP_CWORD": "1",
        }
    )
    assert done.returncode == 0
    assert done.stdout.split() == ["plain,status"]
