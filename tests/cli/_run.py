"""Run `tether` as users do: a real process, its exit code, its stdout and stderr."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def tether(
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 60,
    cwd: Path | None = None,
    stdin: int | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `python -m tether ARGS` with the test's environment plus `env`."""
    return subprocess.run(
        [sys.executable, "-m", "tether", *args],
        cwd=cwd,
        stdin=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )
