"""Requirements of the ACP conformance kit (acp-tck, v1) that no other test pins.

The kit's ids are named in each test; docs/acp.md lists every v1 requirement and the
test that holds it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from acp import (
    PROTOCOL_VERSION,
    RequestError,
    embedded_text_resource,
    resource_block,
    resource_link_block,
    text_block,
)
from tests.acp.support import (
    embedded,
    hang_moves,
    stop_mid_call,
    tool_statuses,
    write_script,
)

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def test_versions_prompts_meta_custom_methods_and_an_empty_list(
    tmp_path: Path, workspace: Path
) -> None:
    """ACP-INIT-003: a client asking for version 65535 is answered 1, the version a v1
    request gets. ACP-INIT-004: `agentInfo` names tether and its version.
    ACP-SESSION-002: two sessions get two ids. ACP-PROMPT-003, ACP-PROMPTCAP-003: a
    prompt with a `resource_link`, or an embedded resource, beside its text is
    answered. ACP-META-001: so is a prompt carrying
    `_meta` (a `traceparent`). ACP-EXT-001: an unknown `_`-prefixed request gets an
    answer (-32601). ACP-LIST-002: `session/list` for a `cwd` no session uses is
    `sessions: []`."""
    model = write_script(
        tmp_path / "s.jsonl", [{"text": "One."}, {"text": "Two."}, {"text": "Three."}]
    )
    async with embedded(model) as ed:
        future = await ed.conn.initialize(protocol_version=65535)
        first = await ed.conn.initialize(protocol_version=PROTOCOL_VERSION)
        assert future.protocol_version == first.protocol_version == 1
        assert first.agent_info is not None
        assert first.agent_info.name == "tether"
        assert first.agent_info.version
        sid = await ed.open_session(workspace)
        assert await ed.open_session(workspace) != sid
        uri = (workspace / "notes.txt").as_uri()
        link = resource_link_block("notes.txt", uri)
        embedded_notes = resource_block(embedded_text_resource(uri, "the notes"))
        for block in (link, embedded_notes):
            answer = await ed.conn.prompt(
                session_id=sid, prompt=[text_block("read this"), block]
            )
            assert answer.stop_reason == "end_turn"
        traced = await ed.conn.prompt(
            session_id=sid,
            prompt=[text_block("again")],
            traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        )
        assert traced.stop_reason == "end_turn"
        with pytest.raises(RequestError) as info:
            await ed.conn.ext_method("tck/unknown", {})
        assert info.value.code == -32601
        nowhere = await ed.conn.list_sessions(cwd=str(tmp_path / "nowhere"))
        assert nowhere.sessions == []


async def test_a_cancel_carrying_meta_stops_the_turn(
    tmp_path: Path, workspace: Path
) -> None:
    """The v2 kit's ACP-CANCEL-206 and 205 in v1: a `session/cancel` carrying `_meta`
    (a `traceparent`) beside its `sessionId` is taken, the prompt answers `cancelled`
    after the call's `failed` status, and the notification itself gets no answer."""
    model = write_script(tmp_path / "s.jsonl", hang_moves())
    async with embedded(model, tools=["tether.testing:Hang"]) as ed:
        sid = await ed.open_session(workspace)

        async def cancel() -> None:
            await ed.conn.cancel(
                session_id=sid,
                traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            )

        # A notification has no answer: "stop" is its sending.
        assert await stop_mid_call(ed, sid, cancel) == ["stop", "prompt cancelled"]
        assert tool_statuses(ed) == ["in_progress", "failed"]
        answers = [f for f in ed.recorder.frames if "method" not in f]
        assert all(isinstance(f["id"], int) and "result" in f for f in answers)
