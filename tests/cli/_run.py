"""Run `tether` as users do: a real process, its exit code, its stdout and stderr; or a
click command in this process (`invoke`), for views that need no process of their own.

The one place tests start `python -m tether`; a pseudo-terminal run (`tests/pty_run.py`)
takes `TETHER` as its command line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
from click.testing import CliRunner, Result

from tether.stop import AGENT_MARKERS

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


def invoke(command: click.Command, *args: str) -> Result:
    """Run a click `command` with `args` in this process; exceptions are raised, not
    folded into the result, so a test sees the error the user would."""
    return CliRunner().invoke(command, list(args), catch_exceptions=False)
