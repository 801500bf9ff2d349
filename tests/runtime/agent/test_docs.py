"""The examples of docs/agent.md run as printed (docs are code: a tether choice)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


DOC = Path(__file__).resolve().parents[3] / "docs" / "agent.md"


def test_the_agent_example_runs_as_printed(tmp_path: Path) -> None:
    """The first Python block of docs/agent.md runs a scripted turn to `end_turn`."""
    block = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert block is not None
    done = subprocess.run(
        [sys.executable, "-c", block.group(1)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ.copy(),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "Looking.",
        "[Glob: succeeded]",
        "There is one file of notes.",
        "end_turn",
    ]
