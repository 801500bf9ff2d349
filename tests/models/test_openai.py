"""The `openai:` model against a local OpenAI-compatible server streaming real chunks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import pytest

from tether.models import (
    Message,
    ModelError,
    ModelRequest,
    OpenAIModel,
    StepDone,
    TextDelta,
    ToolCallDelta,
    ToolSpec,
    model_from_spec,
)
from tether.testing import ModelServer, error_reply, text_reply, tool_call_reply

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio

HELLO = ModelRequest(messages=(Message(role="user", content="hi"),))


def model_for(server: ModelServer, **kw: Any) -> OpenAIModel:
    return OpenAIModel("stub-1", base_url=server.url, api_key="k", **kw)


async def step(model: OpenAIModel, request: ModelRequest = HELLO) -> list[Any]:
    async with model.stream(request) as events:
        return [e async for e in events]


async def test_text_streams_in_its_pieces_with_usage_and_rate_limits() -> None:
    """Text deltas arrive as the server sent them; the step ends with the whole
    message, the usage and the rate-limit headers."""
    reply = text_reply(
        pieces=["Hel", "lo"],
        usage=(7, 2),
        headers=[("x-ratelimit-remaining-requests", "99"), ("x-other", "no")],
    )
    async with ModelServer.open([reply]) as server:
        model = model_for(server)
        events = await step(model)
        await model.aclose()
    assert events[:2] == [TextDelta("Hel"), TextDelta("lo")]
    done = events[-1]
    assert isinstance(done, StepDone)
    assert done.message == Message(role="assistant", content="Hello")
    assert done.finish_reason == "stop"
    assert (done.usage.prompt_tokens, done.usage.completion_tokens) == (7, 2)  # type: ignore[union-attr]
    assert dict(done.rate_limits) == {"x-ratelimit-remaining-requests": "99"}
    [body] = server.requests
    assert body["model"] == "stub-1"
    assert body["stream"] is True
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert server.headers[0]["authorization"] == "Bearer k"


async def test_tool_call_deltas_split_over_chunks_are_assembled() -> None:
    """Tool-call ids, names and argument pieces spread over chunks become whole calls."""
    reply = tool_call_reply(
        [("c1", "Read", {"file_path": "a.txt"}), ("c2", "Glob", {"pattern": "*.py"})],
        split=4,
    )
    tools = (ToolSpec(name="Read", description="read", parameters={"type": "object"}),)
    async with ModelServer.open([reply]) as server:
        model = model_for(server)
        events = await step(model, ModelRequest(messages=HELLO.messages, tools=tools))
        await model.aclose()
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert len(deltas) > 4
    done = events[-1]
    assert isinstance(done, StepDone)
    assert done.finish_reason == "tool_calls"
    assert [(c.id, c.name, c.input()) for c in done.message.tool_calls] == [
        ("c1", "Read", {"file_path": "a.txt"}),
        ("c2", "Glob", {"pattern": "*.py"}),
    ]
    assert server.requests[0]["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "Read",
                "description": "read",
                "parameters": {"type": "object"},
            },
        }
    ]


@pytest.mark.parametrize("status", [429, 503])
async def test_a_busy_endpoint_is_retried_with_backoff(status: int) -> None:
    """429 and 5xx answers are retried (honouring retry-after) and the step succeeds."""
    replies = [error_reply(status, "busy", retry_after_ms=10), text_reply("ok")]
    async with ModelServer.open(replies) as server:
        model = model_for(server)
        events = await step(model)
        await model.aclose()
    assert events[-1].message.content == "ok"
    assert len(server.requests) == 2


async def test_each_retry_is_told_to_the_request_with_its_reason() -> None:
    """A screen shows when the SDK retries: `on_retry` hears each
    resend, with the status that caused it and the count; the first send is not one."""
    replies = [
        error_reply(503, "busy", retry_after_ms=10),
        error_reply(429, "slow down", retry_after_ms=10),
        text_reply("ok"),
        error_reply(503, "busy", retry_after_ms=10),
        text_reply("again"),
    ]
    told: list[str] = []
    request = ModelRequest(messages=HELLO.messages, on_retry=told.append)
    async with ModelServer.open(replies) as server:
        model = model_for(server)
        events = await step(model, request)
        again = await step(model, HELLO)  # retried too, with nobody to tell
        await model.aclose()
    assert events[-1].message.content == "ok"
    assert again[-1].message.content == "again"
    assert told == [
        "the endpoint answered 503 Service Unavailable; retry 1 of 2",
        "the endpoint answered 429 Too Many Requests; retry 2 of 2",
    ]


async def test_an_endpoint_that_refuses_gives_one_line_that_names_it() -> None:
    """A refusal that retries do not cure becomes one `ModelError` line with the status."""
    async with ModelServer.open([error_reply(401, "bad key\nreally")] * 3) as server:
        model = model_for(server)
        with pytest.raises(ModelError) as caught:
            await step(model)
        await model.aclose()
    message = str(caught.value)
    assert "\n" not in message
    assert f"the model endpoint {server.url} refused the request: 401" in message


async def test_an_unreachable_endpoint_gives_one_line_that_says_what_to_do() -> None:
    """Nothing listening: one line naming the URL and `TETHER_MODEL_URL`."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    await listener.aclose()
    model = OpenAIModel(
        "m", base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=0
    )
    with pytest.raises(
        ModelError, match=r"cannot reach the model endpoint.*TETHER_MODEL_URL"
    ):
        await step(model)
    await model.aclose()


def test_no_endpoint_or_no_key_is_refused_at_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without an endpoint, or without a key, the model is refused with one line."""
    for name in ("TETHER_MODEL_URL", "TETHER_MODEL_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ModelError, match="no model endpoint: set TETHER_MODEL_URL"):
        model_from_spec("openai:gpt-x")
    monkeypatch.setenv("TETHER_MODEL_URL", "http://127.0.0.1:9/v1")
    with pytest.raises(ModelError, match="no key for the model endpoint"):
        model_from_spec("openai:gpt-x")
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    assert model_from_spec("openai:gpt-x").name == "openai:gpt-x"


def test_the_config_file_names_the_endpoint(
    monkeypatch: pytest.MonkeyPatch, tether_home: Path
) -> None:
    """`url` in the `[model]` table of the config file is the endpoint."""
    monkeypatch.delenv("TETHER_MODEL_URL", raising=False)
    monkeypatch.setenv("TETHER_MODEL_KEY", "k")
    (tether_home / "config").mkdir()
    (tether_home / "config" / "config.toml").write_text(
        '[model]\nurl = "http://127.0.0.1:9/v1"\n'
    )
    model = model_from_spec("openai:gpt-x")
    assert isinstance(model, OpenAIModel)
    assert model.base_url == "http://127.0.0.1:9/v1"
