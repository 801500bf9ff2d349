"""`session/cancel` over ACP: the prompt answers `cancelled` only once the turn settled,
every call's final status sent before the answer (spec 04), by the call's stop class."""

from __future__ import annotations

import contextlib
import json
import time
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from acp import RequestError, text_block
from tests.acp.support import (
    Editor,
    Embedded,
    alive,
    editor,
    embedded,
    progress_says,
    write_script,
)

if TYPE_CHECKING:
    from pathlib import Path

    from acp.schema import ToolCallUpdate

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ABORT_BOUND = 1.0
"""The account's default bound on `Session.abort()`, seconds."""


def _one_call(name: str, input: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"text": "On it.", "tool_calls": [{"id": "m1", "name": name, "input": input}]},
        {"text": "unreachable after a stop"},
    ]


def _start_of(ed: Editor | Embedded, title_prefix: str) -> str:
    for _, u in ed.recorder.updates:
        if u.session_update == "tool_call" and u.title.startswith(title_prefix):
            return str(u.tool_call_id)
    raise AssertionError(f"no tool call titled {title_prefix!r}")


async def _prompt_then_cancel_when(
    ed: Editor | Embedded, sid: str, ready: Any
) -> tuple[str, float, int]:
    """Prompt, cancel once `ready()` holds; return the stop reason, the seconds from
    the cancel to the answer, and the index of the answer among the frames."""
    result: dict[str, Any] = {}

    async def run() -> None:
        response = await ed.conn.prompt(session_id=sid, prompt=[text_block("go")])
        result["at"] = time.monotonic()
        result["reason"] = response.stop_reason
        result["index"] = len(ed.recorder.frames)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await ed.recorder.wait_for(ready)
        sent = time.monotonic()
        await ed.conn.cancel(session_id=sid)
    return result["reason"], result["at"] - sent, result["index"]


def _final_update_index(ed: Editor | Embedded, call_id: str) -> int:
    """Where, among the frames, the call's final status went out."""
    for n, frame in enumerate(ed.recorder.frames):
        update = frame.get("params", {}).get("update", {})
        if update.get("toolCallId") == call_id and update.get("status") in (
            "completed",
            "failed",
        ):
            return n
    raise AssertionError(f"no final status for {call_id}")


@pytest.mark.rule("acp-cancel")
async def test_cancel_during_a_hung_read_only_tool_answers_within_the_abort_bound(
    tmp_path: Path, workspace: Path
) -> None:
    """A read-only call that never returns is abandoned: `cancelled` comes within the
    abort bound, after the call's `failed` status, and the host was told (S2)."""
    model = write_script(tmp_path / "s.jsonl", _one_call("Hang", {"marker": "m.txt"}))
    async with embedded(model, tools=["tether.testing:Hang"]) as ed:
        sid = await ed.open_session(workspace)
        reason, elapsed, answered = await _prompt_then_cancel_when(
            ed, sid, lambda: progress_says(ed, "started")
        )
        assert reason == "cancelled"
        assert elapsed < ABORT_BOUND
        call = _start_of(ed, "Hang")
        assert ed.recorder.statuses(call) == ["pending", "in_progress", "failed"]
        assert _final_update_index(ed, call) < answered
        final = ed.recorder.tool_updates(call)[-1]
        assert final.raw_output["code"] == "TOOL_ABORTED"
        assert "unreachable" not in ed.recorder.text()  # S10: nothing after the stop
    # The process has exited: the host told the tool (its token was set) before then.
    assert (workspace / "m.txt").read_text(encoding="utf-8") == "cancelled"


@pytest.mark.rule("acp-cancel")
async def test_cancel_while_bash_runs_answers_only_once_the_process_tree_is_gone(
    tmp_path: Path, workspace: Path
) -> None:
    """A Bash call whose shell ignores SIGTERM and whose grandchild left the session
    (`setsid`): the answer comes only after the grace window's kill, and when it comes
    no process of the call is alive (S13)."""
    marker = f"31{time.monotonic_ns() % 10**6}.5"
    command = (
        f"trap '' TERM; setsid sleep {marker} & echo started; sleep {marker}; wait"
    )
    model = write_script(tmp_path / "s.jsonl", _one_call("Bash", {"command": command}))
    async with editor(model, env={"TETHER_GRACE": "0.5"}) as ed:
        sid = await ed.open_session(workspace)
        reason, elapsed, answered = await _prompt_then_cancel_when(
            ed, sid, lambda: progress_says(ed, "started")
        )
        still = alive(marker)
        assert reason == "cancelled"
        assert still == []
        assert elapsed >= 0.5  # the shell ignored SIGTERM: only the kill ended it
        call = _start_of(ed, "Bash")
        assert ed.recorder.statuses(call)[-1] == "failed"
        assert _final_update_index(ed, call) < answered
        final = ed.recorder.tool_updates(call)[-1]
        assert final.raw_output["code"] == "TOOL_ABORTED"
        assert "started" in final.content[0].content.text


@pytest.mark.rule("acp-cancel")
async def test_cancel_while_a_write_runs_answers_after_its_real_result_went_out(
    tmp_path: Path, workspace: Path
) -> None:
    """A started write is never abandoned: the answer `cancelled` comes only after the
    call's `completed` status with the write's real result, and the file is there."""
    model = write_script(
        tmp_path / "s.jsonl",
        _one_call("SlowWrite", {"path": "out.txt", "text": "kept", "seconds": 1.0}),
    )
    async with embedded(model, tools=["tether.testing:SlowWrite"]) as ed:
        sid = await ed.open_session(workspace)
        reason, elapsed, answered = await _prompt_then_cancel_when(
            ed, sid, lambda: progress_says(ed, "started")
        )
        assert reason == "cancelled"
        call = _start_of(ed, "SlowWrite")
        assert ed.recorder.statuses(call) == ["pending", "in_progress", "completed"]
        assert _final_update_index(ed, call) < answered
        final = ed.recorder.tool_updates(call)[-1]
        assert final.raw_output["output"] == "wrote 4 bytes to out.txt"
        assert (workspace / "out.txt").read_text(encoding="utf-8") == "kept"
        assert elapsed > 0.5  # it waited for the write, not for the abort bound


@pytest.mark.rule("acp-cancel")
@pytest.mark.parametrize("editor_answers", [True, False])
async def test_cancel_during_a_permission_request_ends_the_call_unstarted(
    tmp_path: Path, workspace: Path, editor_answers: bool
) -> None:
    """A stop while the editor shows a permission request: the call never runs and
    ends `TOOL_ABORTED` (a stop, not a refusal, S9), whether the editor answers the
    request `cancelled` (as ACP asks of it) or leaves it open, and then it is told
    the request is void (`$/cancel_request`); a late approval runs nothing."""
    model = write_script(
        tmp_path / "s.jsonl",
        _one_call("Write", {"file_path": "w.txt", "content": "never"}),
    )
    asked = anyio.Event()
    release = anyio.Event()

    async def answer(_: ToolCallUpdate) -> str | None:
        asked.set()
        await release.wait()
        return None if editor_answers else "allow_once"

    async with embedded(model, answer=answer) as ed:
        sid = await ed.open_session(workspace)
        result: dict[str, str] = {}
        answered = anyio.Event()

        async def run() -> None:
            response = await ed.conn.prompt(session_id=sid, prompt=[text_block("go")])
            result["reason"] = response.stop_reason
            answered.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            with anyio.fail_after(10):
                await asked.wait()
            with pytest.raises(RequestError, match="Invalid request"):
                # One turn at a time per session.
                await ed.conn.prompt(session_id=sid, prompt=[text_block("too")])
            await ed.conn.cancel(session_id=sid)
            if editor_answers:
                release.set()
            else:
                with anyio.fail_after(10):
                    await answered.wait()
                release.set()  # a late approval of a stopped call
        assert result["reason"] == "cancelled"
        call = _start_of(ed, "Write")
        assert ed.recorder.statuses(call) == ["pending", "failed"]
        withdrawn = [
            (method, params["toolCall"]["toolCallId"])
            for method, params in ed.recorder.withdrawn
        ]
        if editor_answers:  # void already: told only if the stop came first
            assert withdrawn in ([], [("session/request_permission", call)])
        else:
            assert withdrawn == [("session/request_permission", call)]
        final = ed.recorder.tool_updates(call)[-1]
        assert final.raw_output["code"] == "TOOL_ABORTED"
        # The session goes on; the late approval started nothing.
        second = await ed.conn.prompt(session_id=sid, prompt=[text_block("again")])
        assert second.stop_reason == "end_turn"
        assert not (workspace / "w.txt").exists()
        assert json.dumps(ed.recorder.frames).count('"status":"in_progress"') == 0


async def test_an_editor_that_quits_mid_turn_leaves_no_process_behind(
    tmp_path: Path, workspace: Path
) -> None:
    """The editor closes the pipe while Bash runs: `tether acp` stops the turn itself
    (a shutdown stop), reaps the call's whole tree, and exits 0 (S13)."""
    marker = f"32{time.monotonic_ns() % 10**6}.5"
    command = (
        f"trap '' TERM; setsid sleep {marker} & sleep {marker} & echo started; wait"
    )
    model = write_script(tmp_path / "s.jsonl", _one_call("Bash", {"command": command}))
    async with editor(model, env={"TETHER_GRACE": "0.5"}) as ed:
        sid = await ed.open_session(workspace)
        async with anyio.create_task_group() as tg:

            async def prompt() -> None:
                with contextlib.suppress(ConnectionError):
                    await ed.conn.prompt(session_id=sid, prompt=[text_block("go")])

            tg.start_soon(prompt)
            await ed.recorder.wait_for(lambda: progress_says(ed, "started"))
            # The shell and both children (forked before `started`) are alive.
            assert len(alive(marker)) >= 3
            assert ed.process.stdin is not None
            ed.process.stdin.close()
            with anyio.fail_after(15):
                code = await ed.process.wait()
            tg.cancel_scope.cancel()
        assert code == 0
        assert alive(marker) == []


@pytest.mark.rule("acp-cancel")
async def test_cancel_during_the_model_request_keeps_the_text_so_far(
    tmp_path: Path, workspace: Path
) -> None:
    """A stop while the model still streams closes its request (S11): the answer is
    `cancelled`, the text that arrived stays, and the next prompt is answered."""
    model = write_script(
        tmp_path / "s.jsonl",
        [
            {"text": "I was thinking", "hang": True},
            {"text": "Fresh start."},
        ],
    )
    async with embedded(model) as ed:
        sid = await ed.open_session(workspace)
        reason, elapsed, _ = await _prompt_then_cancel_when(
            ed, sid, lambda: ed.recorder.text() == "I was thinking"
        )
        assert reason == "cancelled"
        assert elapsed < ABORT_BOUND
        again = await ed.conn.prompt(session_id=sid, prompt=[text_block("again")])
        assert again.stop_reason == "end_turn"
        assert ed.recorder.text() == "I was thinkingFresh start."
