"""ACP v1's session methods: `session/load` of any session of the account (one open on
the same connection, one never prompted), `session/list`, `session/resume` and
`session/close` (a close stops the running turn first), and method-not-found for what
tether does not offer (spec 04). `session/delete`: test_session_delete.py."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from acp import PROTOCOL_VERSION, RequestError, text_block
from tests.acp.support import (
    Embedded,
    alive,
    details,
    editor,
    embedded,
    hang_moves,
    progress_says,
    stop_mid_call,
    stubborn_bash,
    tool_statuses,
    write_script,
)

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def _kinds(ed: Embedded, sid: str) -> list[str]:
    return [u.session_update for s, u in ed.recorder.updates if s == sid]


async def test_loading_a_session_open_on_the_connection_replays_it_and_answers(
    tmp_path: Path, workspace: Path
) -> None:
    """`session/load` of a session open on this connection is no error: its transcript
    is replayed as updates before the answer, and the session goes on."""
    model = write_script(
        tmp_path / "s.jsonl", [{"text": "First."}, {"text": "Second."}]
    )
    async with embedded(model) as ed:
        sid = await ed.open_session(workspace)
        await ed.conn.prompt(session_id=sid, prompt=[text_block("one")])
        live = len(ed.recorder.updates)
        await ed.conn.load_session(cwd=str(workspace), session_id=sid, mcp_servers=[])
        replayed = ed.recorder.updates[live:]
        assert [u.session_update for _, u in replayed] == [
            "user_message_chunk",
            "agent_message_chunk",
        ]
        assert replayed[0][1].content.text == "one"
        assert replayed[1][1].content.text == "First."
        again = await ed.conn.prompt(session_id=sid, prompt=[text_block("two")])
        assert again.stop_reason == "end_turn"
        assert ed.recorder.text().endswith("Second.")


async def test_a_session_never_prompted_is_loaded_with_an_empty_replay(
    tmp_path: Path, workspace: Path
) -> None:
    """A session opened and never prompted loads on its own connection and on a new
    `tether acp` (after a restart): nothing is replayed, the answer comes, and the
    session can be prompted."""
    model = write_script(tmp_path / "s.jsonl", [{"text": "Hello."}])
    async with embedded(model) as ed:
        sid = await ed.open_session(workspace)
        await ed.conn.load_session(cwd=str(workspace), session_id=sid, mcp_servers=[])
        assert _kinds(ed, sid) == []
    async with embedded(model) as ed:
        await ed.conn.initialize(protocol_version=PROTOCOL_VERSION)
        await ed.conn.load_session(cwd=str(workspace), session_id=sid, mcp_servers=[])
        assert _kinds(ed, sid) == []
        answer = await ed.conn.prompt(session_id=sid, prompt=[text_block("hi")])
        assert answer.stop_reason == "end_turn"
        with pytest.raises(RequestError) as unknown:
            await ed.conn.load_session(
                cwd=str(workspace), session_id="session_none", mcp_servers=[]
            )
        assert unknown.value.code == -32602
        assert "no session session_none" in details(unknown.value)


async def test_list_shows_the_accounts_sessions_with_cwd_title_and_time(
    tmp_path: Path, workspace: Path
) -> None:
    """`session/list` shows every session of the account, after a restart too: its
    `cwd`, the first prompt's first line as title (none before a prompt), when it last
    changed (latest first); `cwd` narrows the list."""
    other = tmp_path / "other"
    other.mkdir()
    model = write_script(tmp_path / "s.jsonl", [{"text": "Done."}])
    before = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=1)
    async with embedded(model) as ed:
        quiet = await ed.open_session(other)
        sid = await ed.open_session(workspace)
        await ed.conn.prompt(
            session_id=sid, prompt=[text_block("fix the build\nin detail")]
        )
        live = await ed.conn.list_sessions()
    async with embedded(model) as ed:
        await ed.conn.initialize(protocol_version=PROTOCOL_VERSION)
        listed = await ed.conn.list_sessions()
        narrowed = await ed.conn.list_sessions(cwd=str(other))
    for answer in (live, listed):
        assert [s.session_id for s in answer.sessions] == [sid, quiet]
        first, second = answer.sessions
        assert (first.cwd, first.title) == (str(workspace), "fix the build")
        assert (second.cwd, second.title) == (str(other), None)
        for info in answer.sessions:
            assert info.updated_at is not None
            assert datetime.datetime.fromisoformat(info.updated_at) >= before
    assert [s.session_id for s in narrowed.sessions] == [quiet]
    assert listed.next_cursor is None


async def test_resume_reopens_a_session_without_replaying_it(
    tmp_path: Path, workspace: Path
) -> None:
    """`session/resume` on a new connection sends no update and answers; the session
    goes on where it was (its next request carries the earlier turn)."""
    model = write_script(tmp_path / "s.jsonl", [{"text": "One."}, {"text": "Two."}])
    async with embedded(model) as ed:
        sid = await ed.open_session(workspace)
        await ed.conn.prompt(session_id=sid, prompt=[text_block("first")])
    later = write_script(tmp_path / "later.jsonl", [{"text": "Three."}])
    async with embedded(later) as ed:
        await ed.conn.initialize(protocol_version=PROTOCOL_VERSION)
        await ed.conn.resume_session(cwd=str(workspace), session_id=sid, mcp_servers=[])
        assert ed.recorder.updates == []
        await ed.conn.resume_session(cwd=str(workspace), session_id=sid, mcp_servers=[])
        assert ed.recorder.updates == []
        answer = await ed.conn.prompt(session_id=sid, prompt=[text_block("second")])
        assert answer.stop_reason == "end_turn"
        session = ed.server.sessions[sid].agent_session
        assert session is not None
        said = [m.content for m in session.messages if m.role == "user"]
        assert said == ["first", "second"]


@pytest.mark.rule("acp-cancel")
async def test_close_during_a_hung_call_answers_the_prompt_cancelled_first(
    tmp_path: Path, workspace: Path
) -> None:
    """`session/close` while a read-only call hangs stops the turn as `session/cancel`
    does: the prompt answers `cancelled` after the call's `failed` status, no update
    follows that answer, the close answers after it, and the session is gone from the
    connection (a prompt to it is refused) but kept in the account's list."""
    model = write_script(tmp_path / "s.jsonl", hang_moves())
    async with embedded(model, tools=["tether.testing:Hang"]) as ed:
        sid = await ed.open_session(workspace)
        frames = ed.recorder.frames
        answered: dict[str, int] = {}

        async def prompt() -> None:
            response = await ed.conn.prompt(session_id=sid, prompt=[text_block("go")])
            assert response.stop_reason == "cancelled"
            answered["prompt"] = len(frames)

        async with anyio.create_task_group() as tg:
            tg.start_soon(prompt)
            await ed.recorder.wait_for(lambda: progress_says(ed, "started"))
            with anyio.fail_after(10):
                await ed.conn.close_session(session_id=sid)
            answered["close"] = len(frames)
        assert answered["prompt"] <= answered["close"]
        assert tool_statuses(ed) == ["in_progress", "failed"]
        with pytest.raises(RequestError) as gone:
            await ed.conn.prompt(session_id=sid, prompt=[text_block("again")])
        assert "no session" in details(gone.value)
        listed = await ed.conn.list_sessions()
        assert sid in [s.session_id for s in listed.sessions]
        # Nothing of the session came after its prompt's answer.
        assert [
            f
            for f in frames[answered["prompt"] :]
            if f.get("method") == "session/update"
        ] == []
        assert "unreachable" not in ed.recorder.text()
        assert sid not in ed.server.sessions
    assert (workspace / "m.txt").read_text(encoding="utf-8") == "cancelled"


@pytest.mark.rule("acp-cancel")
async def test_close_during_bash_answers_once_the_process_tree_is_gone(
    tmp_path: Path, workspace: Path
) -> None:
    """`session/close` while a Bash call's shell ignores SIGTERM and a grandchild left
    its session: the prompt answers `cancelled`, then the close answers, and by then no
    process of the call is alive (the grace window's kill ended them)."""
    model, marker = stubborn_bash(tmp_path / "s.jsonl")
    async with editor(model, env={"TETHER_GRACE": "0.5"}) as ed:
        sid = await ed.open_session(workspace)
        still: list[object] = []

        async def close() -> None:
            await ed.conn.close_session(session_id=sid)
            still.extend(alive(marker))

        assert await stop_mid_call(ed, sid, close) == ["prompt cancelled", "stop"]
        assert still == []
        [final] = [
            u
            for _, u in ed.recorder.updates
            if u.session_update == "tool_call_update" and u.status == "failed"
        ]
        assert final.raw_output["code"] == "TOOL_ABORTED"


async def test_a_load_racing_a_close_reopens_the_session(
    tmp_path: Path, workspace: Path
) -> None:
    """`session/close`, `session/prompt` and `session/load` of one session arrive
    together: the close answers, the prompt is refused (the session is closing), the
    load waits for the close and opens the session again, which then works."""
    model = write_script(tmp_path / "s.jsonl", [{"text": "One."}, {"text": "Two."}])
    async with editor(model) as ed:
        sid = await ed.open_session(workspace)
        await ed.conn.prompt(session_id=sid, prompt=[text_block("first")])
        text = '[{"type": "text", "text": "lost"}]'
        frames = [
            ("c1", "session/close", f'{{"sessionId": "{sid}"}}'),
            ("p1", "session/prompt", f'{{"sessionId": "{sid}", "prompt": {text}}}'),
            (
                "l1",
                "session/load",
                f'{{"sessionId": "{sid}", "cwd": "{workspace}", "mcpServers": []}}',
            ),
        ]
        await ed.write_raw(
            "".join(
                f'{{"jsonrpc": "2.0", "id": "{i}", "method": "{m}", "params": {p}}}\n'
                for i, m, p in frames
            ).encode()
        )
        seen = ed.recorder.frames

        def answers() -> dict[str, Any]:
            return {f["id"]: f for f in seen if f.get("id") in ("c1", "p1", "l1")}

        await ed.recorder.wait_for(lambda: len(answers()) == 3)
        got = answers()
        assert got["c1"]["result"] == {}
        assert got["p1"]["error"]["code"] == -32602
        assert "result" in got["l1"]
        # The frames, not the handler's record: the SDK runs notification handlers
        # in tasks of their own, so the load's answer can be read before them.
        replayed = [
            f["params"]["update"]["content"]["text"]
            for f in seen
            if f.get("method") == "session/update"
            and f["params"]["update"].get("sessionUpdate") == "user_message_chunk"
        ]
        assert replayed == ["first"]  # "lost" never reached the transcript
        again = await ed.conn.prompt(session_id=sid, prompt=[text_block("second")])
        assert again.stop_reason == "end_turn"


async def test_capabilities_say_what_is_served_and_the_rest_is_method_not_found(
    tmp_path: Path, workspace: Path
) -> None:
    """`initialize` advertises load, list, resume, close and delete; a method tether
    does not offer (`session/fork`, `session/set_mode`, and `$/cancel_request` sent as
    a request: it is a notification) answers -32601 and the agent keeps serving."""
    model = write_script(tmp_path / "s.jsonl", [{"text": "hi"}])
    async with editor(model) as ed:
        ready = await ed.conn.initialize(protocol_version=PROTOCOL_VERSION)
        caps = ready.agent_capabilities
        assert caps is not None
        assert caps.load_session is True
        assert caps.session_capabilities is not None
        said = caps.session_capabilities.model_dump(exclude_none=True)
        assert said == {"list": {}, "resume": {}, "close": {}, "delete": {}}
        methods = ["session/fork", "$/cancel_request", "session/set_mode"]
        for n, method in enumerate(methods, start=100):
            frame = (
                f'{{"jsonrpc": "2.0", "id": {n}, "method": "{method}", "params": '
                f'{{"sessionId": "s", "cwd": "/", "requestId": 1, "modeId": "m"}}}}\n'
            )
            await ed.write_raw(frame.encode())
        frames = ed.recorder.frames

        def errors() -> dict[int, int]:
            return {f["id"]: f["error"]["code"] for f in frames if "error" in f}

        await ed.recorder.wait_for(lambda: len(errors()) == len(methods))
        assert errors() == dict.fromkeys(range(100, 100 + len(methods)), -32601)
        sid = await ed.open_session(workspace)
        answer = await ed.conn.prompt(session_id=sid, prompt=[text_block("hi")])
        assert answer.stop_reason == "end_turn"


@pytest.mark.rule("acp-cancel")
async def test_cancel_request_naming_a_running_prompt_stops_its_turn(
    tmp_path: Path, workspace: Path
) -> None:
    """`$/cancel_request` naming a pending `session/prompt` stops the turn as
    `session/cancel` does: the prompt answers `cancelled` after the call's `failed`
    status. One naming no pending request is dropped, and the agent keeps serving."""
    model = write_script(tmp_path / "s.jsonl", hang_moves())
    async with editor(model, tools=["tether.testing:Hang"]) as ed:
        sid = await ed.open_session(workspace)
        frames = ed.recorder.frames
        await ed.write_raw(
            b'{"jsonrpc": "2.0", "method": "$/cancel_request", '
            b'"params": {"requestId": "nothing-pending"}}\n'
        )
        prompt = (
            f'{{"jsonrpc": "2.0", "id": "p1", "method": "session/prompt", "params": '
            f'{{"sessionId": "{sid}", "prompt": [{{"type": "text", "text": "go"}}]}}}}\n'
        )
        await ed.write_raw(prompt.encode())
        await ed.recorder.wait_for(lambda: progress_says(ed, "started"))
        await ed.write_raw(
            b'{"jsonrpc": "2.0", "method": "$/cancel_request", '
            b'"params": {"requestId": "p1"}}\n'
        )

        def answer() -> int | None:
            found = [n for n, f in enumerate(frames) if f.get("id") == "p1"]
            return found[0] if found else None

        await ed.recorder.wait_for(lambda: answer() is not None)
        at = answer()
        assert at is not None
        assert frames[at]["result"] == {"stopReason": "cancelled"}
        failed = [
            n
            for n, f in enumerate(frames)
            if f.get("params", {}).get("update", {}).get("status") == "failed"
        ]
        assert len(failed) == 1
        assert failed[0] < at
        assert "unreachable" not in ed.recorder.text()
        assert [f for f in frames if "error" in f] == []  # the stray one: no answer
        listed = await ed.conn.list_sessions()
        assert [s.session_id for s in listed.sessions] == [sid]
