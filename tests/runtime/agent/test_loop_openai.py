"""The agent loop with the `openai:` model against a local OpenAI-compatible server."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from tether.models import OpenAIModel
from tether.runtime import MessageChunk
from tether.testing import ModelServer, text_reply, tool_call_reply

if TYPE_CHECKING:
    from collections.abc import Callable

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def model_for(server: ModelServer) -> OpenAIModel:
    return OpenAIModel("stub-1", base_url=server.url, api_key="k")


@pytest.mark.rule("S11")
async def test_s11_a_stop_closes_the_stream_and_the_server_sees_the_close(
    harness: Callable[..., Any],
) -> None:
    """S11: a stop while the endpoint streams closes the HTTP connection at once (the
    server sees it); the text so far is kept, marked cut, and sent back next turn."""
    replies = [text_reply(pieces=["Hel", "lo"], hold=True), text_reply("fine")]
    async with ModelServer.open(replies) as server:
        model = model_for(server)
        async with harness(model=model) as h:
            stamps: list[float] = []

            def stop() -> None:
                stamps.append(time.perf_counter())
                h.abort_soon()

            h.rec.when(lambda e: isinstance(e, MessageChunk) and e.text == "lo", stop)
            ended = await h.session.prompt("go")
            with anyio.fail_after(5):
                await server.closed.wait()
            assert ended.stop_reason == "cancelled"
            assert ended.text == "Hello"
            assert server.closed_at is not None
            assert server.closed_at - stamps[0] < 1.0
            await h.session.prompt("again")
        await model.aclose()
    assert server.requests[1]["messages"] == [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "again"},
    ]


async def test_the_loop_gives_the_endpoint_every_tool_result_in_wire_form(
    harness: Callable[..., Any],
) -> None:
    """A tool call streamed in pieces runs, and the next request carries the assistant
    message with its call and the tool result, as Chat Completions takes them."""
    replies = [
        tool_call_reply([("c1", "Echo", {"text": "pong"})], text="checking"),
        text_reply("done"),
    ]
    async with ModelServer.open(replies) as server:
        model = model_for(server)
        async with harness(model=model) as h:
            ended = await h.session.prompt("ping")
        await model.aclose()
    assert ended.stop_reason == "end_turn"
    assert (ended.prompt_tokens, ended.completion_tokens) == (20, 10)
    assert server.requests[1]["messages"] == [
        {"role": "user", "content": "ping"},
        {
            "role": "assistant",
            "content": "checking",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "Echo", "arguments": '{"text": "pong"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "pong"},
    ]


async def test_an_answer_cut_by_the_endpoint_ends_the_turn_and_keeps_its_text(
    harness: Callable[..., Any],
) -> None:
    """An endpoint that drops the connection mid-answer ends the turn with `error`
    (one line); the text it sent stays in the transcript, marked cut."""
    import attrs

    dropped = attrs.evolve(
        text_reply(pieces=["Half ", "an answer"], hold=True), hold=False, drop=True
    )
    async with ModelServer.open([dropped]) as server:
        model = OpenAIModel("stub-1", base_url=server.url, api_key="k", max_retries=0)
        async with harness(model=model) as h:
            ended = await h.session.prompt("go")
        await model.aclose()
    assert ended.stop_reason == "error"
    assert ended.error is not None
    assert "\n" not in ended.error
    assert f"the model endpoint {server.url}" in ended.error
    assert h.session.messages[-1].to_json() == {
        "role": "assistant",
        "content": "Half an answer",
        "cut": True,
    }


async def test_a_content_filter_stop_ends_the_turn_as_a_refusal(
    harness: Callable[..., Any],
) -> None:
    """An answer the endpoint ends with `content_filter` ends the turn as `refusal`."""
    from tether.testing import Reply

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "stub",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    refused = Reply(
        chunks=(
            chunk({"role": "assistant", "content": "I can"}),
            chunk({}, "content_filter"),
        )
    )
    async with ModelServer.open([refused]) as server:
        model = model_for(server)
        async with harness(model=model) as h:
            ended = await h.session.prompt("go")
        await model.aclose()
    assert ended.stop_reason == "refusal"
    assert ended.text == "I can"
