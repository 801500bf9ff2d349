"""A stdio runtime refuses at start the tools its host process could not import (a tether
choice): one line naming the tool and the fix, instead of a lost host later."""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from tether import Runtime, ToolContext, tool
from tether.errors import UsageError
from tether.testing import Echo

if TYPE_CHECKING:
    from pathlib import Path


pytestmark = pytest.mark.slow


def _run(script: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


_TOOL = """\
from tether import StopClass, ToolContext, tool

@tool(stop_class=StopClass.READ_ONLY)
async def Lookup(ctx: ToolContext, key: str) -> str:
    return key
"""

_MAIN = """\
import anyio
from tether import Runtime, ToolContext, tool
{define}

async def main() -> None:
    try:
        async with Runtime(workspace=".", tools=[Lookup], host="stdio") as runtime:
            async with runtime.session().turn() as turn:
                print((await turn.call("Lookup", {{"key": "k"}})).output)
    except Exception as exc:
        print("refused:", exc)

anyio.run(main)
"""


def test_a_tool_defined_in_the_script_is_refused_at_start_with_the_fix(
    tmp_path: Path,
) -> None:
    """A tool in `__main__` cannot be imported by the host: refused, naming the tool,
    `__main__` and what to do."""
    script = tmp_path / "main.py"
    script.write_text(_MAIN.format(define=_TOOL), encoding="utf-8")
    proc = _run(script, tmp_path)
    assert proc.returncode == 0, proc.stderr
    line = proc.stdout.strip()
    assert line.startswith("refused: tool Lookup is defined in the script being run")
    assert "move it into a module of its own" in line
    assert "host unreachable" not in proc.stdout + proc.stderr


def test_a_tool_beside_a_script_run_from_elsewhere_is_refused(tmp_path: Path) -> None:
    """`python app/main.py` run from another folder: the host cannot import `lookup`
    from app/, so the runtime says to run from app/ or set PYTHONPATH."""
    app = tmp_path / "app"
    app.mkdir()
    (app / "lookup.py").write_text(_TOOL, encoding="utf-8")
    script = app / "main.py"
    script.write_text(_MAIN.format(define="from lookup import Lookup"), "utf-8")
    proc = _run(script, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"refused: tool Lookup comes from {app}")
    assert "PYTHONPATH" in proc.stdout


def test_a_tool_in_an_importable_module_runs_on_the_stdio_host(tmp_path: Path) -> None:
    """Run from the tool's folder, the same program works on the stdio host."""
    (tmp_path / "lookup.py").write_text(_TOOL, encoding="utf-8")
    script = tmp_path / "main.py"
    script.write_text(_MAIN.format(define="from lookup import Lookup"), "utf-8")
    proc = _run(script, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "k"


@pytest.mark.anyio
async def test_installed_tools_pass_the_check(tmp_path: Path) -> None:
    """Tools of an installed package (tether.testing) pass the check, and the host
    process imports and runs them."""
    async with Runtime(workspace=tmp_path, tools=[Echo], host="stdio") as rt:
        session = rt.session()
        async with session.turn() as turn:
            result = await turn.call("Echo", {"text": "imported"})
    assert result.output == "imported"


def test_a_tool_made_inside_a_function_is_refused(tmp_path: Path) -> None:
    """A tool that is not at module level cannot be found by import at all."""

    @tool
    async def Local(ctx: ToolContext) -> str:
        return ""

    with pytest.raises(UsageError, match="Local cannot run in the stdio host"):
        Runtime(workspace=tmp_path, tools=[Local], host="stdio")
