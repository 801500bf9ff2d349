"""Every agent tool call passes the stop guard before permission is asked (spec 02), on
both hosts: a call that would touch a stop ends GUARD_REFUSED and never runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tether import ErrorCode, Runtime
from tether.host.tools import default_tools
from tether.stop import protected_paths

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.mark.rule("guard-table")
async def test_guard_refuses_tool_calls_that_touch_the_stop_before_permission(
    host_kind: str, workspace: Path
) -> None:
    """Write into the stop directory and Bash `tether stop` are refused even when allowed."""
    stop_dir = next(p for p in protected_paths() if p.name != "stop-setup.json")
    tools = [t for t in default_tools() if t.name in ("Write", "Bash", "Read")]
    async with Runtime(
        workspace=workspace,
        tools=tools,
        permissions={"allow": ["Write", "Bash", "Write(/**)"]},
        host=host_kind,  # type: ignore[arg-type]
        grace=0.3,
    ) as rt:
        session = rt.session()
        async with session.turn() as turn:
            write = await turn.call(
                "Write", {"file_path": str(stop_dir / "stop"), "content": "x"}
            )
            bash = await turn.call("Bash", {"command": "tether lift"})
            fine = await turn.call("Bash", {"command": "echo fine"})
    assert write.code is ErrorCode.GUARD_REFUSED
    assert str(stop_dir) in write.output
    assert bash.code is ErrorCode.GUARD_REFUSED
    assert not fine.is_error
    assert "fine" in fine.output
    assert not (stop_dir / "stop").exists()
