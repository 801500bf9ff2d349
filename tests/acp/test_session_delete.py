"""ACP v1's `session/delete` (spec 04): a deleted session leaves `session/list` (after a
restart too) and cannot be loaded or resumed; deleting an unknown one succeeds silently
(ACP-DELETE-002); a running turn is stopped first as `session/close` stops it, on this
connection or another of the process; one open in another process is refused."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from acp import PROTOCOL_VERSION, RequestError, text_block
from acp.schema import EnvVariable, McpServerStdio
from tests.acp.support import (
    Editor,
    Embedded,
    alive,
    details,
    embedded,
    hang_moves,
    stop_mid_call,
    stubborn_bash,
    tool_statuses,
    write_script,
)
from tests.waiting import await_until

from tether.config import paths
from tether.runtime._ledger import Ledger, read_ledger_file

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def _delete(ed: Editor | Embedded, session_id: str) -> Any:
    """Send `session/delete` (the SDK's client has no method for it) and return its
    result."""
    return await ed.conn._conn.send_request("session/delete", {"sessionId": session_id})


async def _listed(ed: Editor | Embedded) -> list[str]:
    return [s.session_id for s in (await ed.conn.list_sessions()).sessions]


async def test_a_deleted_session_leaves_the_list_and_cannot_be_opened_again(
    tmp_path: Path, workspace: Path
) -> None:
    """Delete of a listed, open session answers `{}`: it is gone from `session/list`
    (on a new `tether acp` too), `session/load` and `session/resume` answer -32602
    naming it, a prompt to it is refused; its calls stay in the ledger. The other
    session is untouched."""
    read = {"id": "m1", "name": "Read", "input": {"file_path": "notes.txt"}}
    model = write_script(
        tmp_path / "s.jsonl", [{"text": "", "tool_calls": [read]}, {"text": "Read."}]
    )
    (workspace / "notes.txt").write_text("kept\n", encoding="utf-8")
    async with embedded(model, tools=["builtin:Read"]) as ed:
        kept = await ed.open_session(workspace)
        sid = (await ed.conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
        await ed.conn.prompt(session_id=sid, prompt=[text_block("read the notes")])
        assert set(await _listed(ed)) == {kept, sid}
        assert await _delete(ed, sid) == {}
        assert await _listed(ed) == [kept]
        with pytest.raises(RequestError) as load:
            await ed.conn.load_session(
                cwd=str(workspace), session_id=sid, mcp_servers=[]
            )
        with pytest.raises(RequestError) as resume:
            await ed.conn.resume_session(
                cwd=str(workspace), session_id=sid, mcp_servers=[]
            )
        for refused in (load.value, resume.value):
            assert refused.code == -32602
            assert f"no session {sid}" in details(refused)
        with pytest.raises(RequestError) as prompt:
            await ed.conn.prompt(session_id=sid, prompt=[text_block("again")])
        assert prompt.value.code == -32602
    async with embedded(model) as ed:
        await ed.conn.initialize(protocol_version=PROTOCOL_VERSION)
        assert await _listed(ed) == [kept]
        with pytest.raises(RequestError) as later:
            await ed.conn.load_session(
                cwd=str(workspace), session_id=sid, mcp_servers=[]
            )
        assert later.value.code == -32602
    calls = read_ledger_file(paths().state_dir / "sessions.sqlite")
    assert [(c.session_id, c.tool, c.state) for c in calls] == [
        (sid, "Read", "succeeded")
    ]


async def test_deleting_an_unknown_session_succeeds_silently(
    tmp_path: Path, workspace: Path
) -> None:
    """ACP-DELETE-002: a session never created (before the account keeps any, and
    after) and one already deleted answer `{}`; the agent keeps serving."""
    model = write_script(tmp_path / "s.jsonl", [{"text": "hi"}])
    async with embedded(model) as ed:
        await ed.conn.initialize(protocol_version=PROTOCOL_VERSION)
        assert await _delete(ed, "never-created") == {}
        sid = await ed.open_session(workspace)
        assert await _delete(ed, "never-created") == {}
        assert await _delete(ed, sid) == {}
        assert await _delete(ed, sid) == {}
        with pytest.raises(RequestError) as bad:
            await ed.conn._conn.send_request("session/delete", {"sessionId": 7})
        assert bad.value.code == -32602
        assert "sessionId" in details(bad.value)
        other = await ed.open_session(workspace)
        answer = await ed.conn.prompt(session_id=other, prompt=[text_block("hi")])
        assert answer.stop_reason == "end_turn"


@pytest.mark.rule("acp-cancel")
async def test_delete_during_bash_answers_once_the_process_tree_is_gone(
    tmp_path: Path, workspace: Path
) -> None:
    """`session/delete` while a Bash call's shell ignores SIGTERM and a grandchild
    left its session: the prompt answers `cancelled` after the call's `failed`
    status, then the delete answers, and by then no process of the call is alive."""
    model, marker = stubborn_bash(tmp_path / "s.jsonl")
    async with embedded(model, tools=["builtin:Bash"], grace=0.5) as ed:
        sid = await ed.open_session(workspace)
        still: list[object] = []

        async def delete() -> None:
            await _delete(ed, sid)
            still.extend(alive(marker))

        assert await stop_mid_call(ed, sid, delete) == ["prompt cancelled", "stop"]
        assert still == []
        assert tool_statuses(ed) == ["in_progress", "failed"]
        assert await _listed(ed) == []
        assert "unreachable" not in ed.recorder.text()


@pytest.mark.rule("acp-cancel")
async def test_delete_on_another_connection_stops_the_turn_where_it_runs(
    tmp_path: Path, workspace: Path
) -> None:
    """A session prompted on one connection and deleted on another of the same
    process: its turn is stopped as `session/close` stops it (the prompt answers
    `cancelled` before the delete answers), and it is gone from both connections."""
    model = write_script(tmp_path / "s.jsonl", hang_moves())
    async with (
        embedded(model, tools=["tether.testing:Hang"]) as there,
        embedded(model) as here,
    ):
        sid = await there.open_session(workspace)
        await here.conn.initialize(protocol_version=PROTOCOL_VERSION)
        order = await stop_mid_call(there, sid, lambda: _delete(here, sid))
        assert order == ["prompt cancelled", "stop"]
        assert tool_statuses(there) == ["in_progress", "failed"]
        assert await _listed(there) == await _listed(here) == []
        with pytest.raises(RequestError) as gone:
            await there.conn.prompt(session_id=sid, prompt=[text_block("again")])
        assert "no session" in details(gone.value)
    assert (workspace / "m.txt").read_text(encoding="utf-8") == "cancelled"


async def test_a_session_open_in_another_process_is_refused_until_closed_there(
    tmp_path: Path, workspace: Path
) -> None:
    """A session another process holds open (its runtime's ledger noted it and is
    still open: here a `Ledger` of this process that no connection knows, which holds
    its lock as another process's would) is not deleted under it: the delete answers
    -32602 naming the process, and the session stays listed. Once closed there, the
    delete succeeds."""
    model = write_script(tmp_path / "s.jsonl", [{"text": "hi"}])
    async with embedded(model) as ed:
        sid = await ed.open_session(workspace)
        await ed.conn.close_session(session_id=sid)
        elsewhere = Ledger(paths().state_dir / "sessions.sqlite")
        elsewhere.note_session(sid, cwd=str(workspace))
        with pytest.raises(RequestError) as refused:
            await _delete(ed, sid)
        assert refused.value.code == -32602
        assert details(refused.value).startswith(
            f"session {sid} is open in process {os.getpid()}; close it there"
        )
        assert await _listed(ed) == [sid]
        elsewhere.close()
        assert await _delete(ed, sid) == {}
        assert await _listed(ed) == []


@pytest.mark.rule("acp-cancel")
async def test_a_load_during_a_delete_waits_for_it_and_finds_no_session(
    tmp_path: Path, workspace: Path
) -> None:
    """A delete held mid-close (its call ignores the stop until the grace window's
    kill) on one connection, and a `session/load` of the same session on another:
    the load waits for the delete and answers -32602 `no session`, the delete `{}`
    (it did not find the session reopened under it)."""
    stubborn = {"id": "m1", "name": "Stubborn", "input": {"lines": 1}}
    model = write_script(
        tmp_path / "s.jsonl",
        [{"text": "", "tool_calls": [stubborn]}, {"text": "unreachable"}],
    )
    async with (
        embedded(model, tools=["tether.testing:Stubborn"], grace=0.5) as there,
        embedded(model) as here,
    ):
        sid = await there.open_session(workspace)
        await here.conn.initialize(protocol_version=PROTOCOL_VERSION)
        answers: list[str] = []

        async def delete() -> None:
            answers.append(f"delete {await _delete(here, sid)}")

        async def load() -> None:
            with pytest.raises(RequestError) as gone:
                await here.conn.load_session(
                    cwd=str(workspace), session_id=sid, mcp_servers=[]
                )
            answers.append(f"load {gone.value.code} {details(gone.value)}")

        async def both() -> None:
            async with anyio.create_task_group() as tg:
                tg.start_soon(delete)
                session = there.server.sessions[sid]
                # the delete is closing it (a flag: no event to wait on)
                while not session.ending:  # noqa: ASYNC110
                    await anyio.sleep(0.005)
                assert not session.closed.is_set()
                tg.start_soon(load)

        assert await stop_mid_call(there, sid, both) == ["prompt cancelled", "stop"]
        assert answers[0] == "delete {}"
        assert answers[1].startswith(f"load -32602 no session {sid}")
        assert await _listed(here) == []


_GATED = """\
import os, pathlib, sys, time
started, gate = map(pathlib.Path, sys.argv[1:3])
started.touch()
while not gate.exists():
    time.sleep(0.01)
os.execv(sys.argv[3], sys.argv[3:])
"""


async def test_a_delete_during_a_load_waits_until_it_is_open_then_closes_it(
    tmp_path: Path, workspace: Path
) -> None:
    """A `session/load` whose MCP server has not started yet (the session is open on
    no connection): a delete sent then waits for it, so the load answers (the
    transcript whole, not reopened empty) before the delete, which then closes it."""
    model = write_script(tmp_path / "s.jsonl", [{"text": "hi"}])
    # In the workspace: the server's wall lets it write there only.
    started, gate = workspace / "started", workspace / "gate"
    script = tmp_path / "gated.py"
    script.write_text(_GATED, encoding="utf-8")
    time_server = Path(sys.executable).with_name("mcp-server-time")
    gated = McpServerStdio(
        name="gated",
        command=sys.executable,
        args=[str(script), str(started), str(gate), str(time_server)],
        env=[EnvVariable(name="TZ", value="UTC")],
    )
    async with embedded(model) as here, embedded(model) as there:
        sid = await here.open_session(workspace)
        await here.conn.prompt(session_id=sid, prompt=[text_block("hello")])
        await here.conn.close_session(session_id=sid)
        await there.conn.initialize(protocol_version=PROTOCOL_VERSION)
        answers: list[str] = []

        async def load() -> None:
            await there.conn.load_session(
                cwd=str(workspace), session_id=sid, mcp_servers=[gated]
            )
            answers.append("load")

        async def delete() -> None:
            answers.append(f"delete {await _delete(here, sid)}")

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(load)
                await await_until(started.exists, what="the load's MCP server")
                tg.start_soon(delete)
                gate.touch()
        assert answers == ["load", "delete {}"]
        assert there.recorder.text() == "hi"  # the transcript replayed, whole
        assert await _listed(there) == []
        with pytest.raises(RequestError) as gone:
            await there.conn.prompt(session_id=sid, prompt=[text_block("again")])
        assert "no session" in details(gone.value)
