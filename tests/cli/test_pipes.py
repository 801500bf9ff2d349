"""A reader that goes away early (`tether … | head -1`) ends every command quietly:
exit 0, no traceback, whatever the command was doing (the demo's task group included)."""

from __future__ import annotations

import shlex
import subprocess
from typing import TYPE_CHECKING

import pytest
from tests.cli._run import TETHER

from tether.cli._app import COMMANDS

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow


PRINTING = [
    ["demo"],
    ["--help"],
    ["runs"],
    ["runs", "--json"],
    ["queue", "list"],
    ["ledger", "--json"],
    ["status"],
    ["lanes", "prune"],
    *([name, "--help"] for name in sorted(COMMANDS)),
]


@pytest.mark.parametrize("args", PRINTING, ids=lambda a: " ".join(a))
def test_a_pipe_closed_early_ends_the_command_quietly(
    args: list[str], tmp_path: Path
) -> None:
    command = shlex.join([*TETHER, *args])
    done = subprocess.run(
        [
            "bash",
            "-c",
            f"{command} 2>err | head -1 >/dev/null; echo ${{PIPESTATUS[0]}}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    status = done.stdout.strip().splitlines()[-1]
    err = (tmp_path / "err").read_text(encoding="utf-8")
    assert status == "0", (status, err)
    assert "Traceback" not in err
