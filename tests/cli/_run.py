"""Run `tether` as users do: a real process, its exit code, its stdout and stderr; or a
click command in this process (`invoke`), for views that need no process of their own.

The one place tests start `python -m tether`: to its end (`tether`), on a pseudo-terminal
as a person types it (`tether_in_pty`), or from `TETHER`, its command line, where a test
needs the process itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import TYPE_CHECKING

from click.testing import CliRunner, Result
from tests.pty_run import run_in_pty

from tether.stop import AGENT_MARKERS

if TYPE_CHECKING:
    from pathlib import Path

    import click

TETHER = (sys.executable, "-m", "tether")
"""The command line of `tether` with the interpreter running the tests."""


def person_env(**extra: str) -> dict[str, str]:
    """The test's environment as a person's shell has it: no agent session's markers
    (the verbs refuse a caller under one), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in AGENT_MARKERS}
    env.update(extra)
    return env


def tether(
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 60,
    cwd: Path | None = None,
    stdin: int | None = None,
    person: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run `python -m tether ARGS` with the test's environment plus `env`; with
    `person`, as a person's shell runs it (`person_env`)."""
    base = person_env() if person else dict(os.environ)
    return subprocess.run(
        [*TETHER, *args],
        cwd=cwd,
        stdin=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**base, **(env or {})},
        check=False,
    )


def tether_in_pty(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run `python -m tether ARGS` on a pseudo-terminal (stdin, stdout and stderr) in
    `env`, by default a person's (`person_env`); return its exit code and output."""
    return run_in_pty([*TETHER, *args], env=env if env is not None else person_env())


def invoke(command: click.Command, *args: str) -> Result:
    """Run a click `command` with `args` in this process; exceptions are raised, not
    folded into the result, so a test sees the error the user would."""
    return CliRunner().invoke(command, list(args), catch_exceptions=False)
