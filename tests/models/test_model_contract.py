"""One contract for every model: the scripted model and the `openai:` model (against the
local server) stream the same step as the same events (a tether choice: fakes pass the
real contract suite)."""

from __future__ import annotations

import json
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import pytest

from tether.models import (
    Message,
    Model,
    ModelRequest,
    Move,
    OpenAIModel,
    ScriptedModel,
    StepDone,
    TextDelta,
    ToolCall,
)
from tether.testing import ModelServer, text_reply, tool_call_reply

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

STEPS: list[tuple[str, list[str], list[tuple[str, str, dict[str, Any]]]]] = [
    ("plain text", ["Hello", ", world"], []),
    (
        "text and two calls",
        ["Looking"],
        [("c1", "Read", {"file_path": "a"}), ("c2", "Glob", {"pattern": "*"})],
    ),
    ("a call alone", [], [("c9", "Bash", {"command": "ls -la"})]),
]


@asynccontextmanager
async def scripted(
    pieces: list[str], calls: list[tuple[str, str, dict[str, Any]]]
) -> AsyncIterator[Model]:
    yield ScriptedModel(
        [
            Move(
                text="".join(pieces),
                chunks=tuple(pieces),
                tool_calls=tuple(
                    ToolCall(id=i, name=n, arguments=json.dumps(a)) for i, n, a in calls
                ),
            )
        ]
    )


@asynccontextmanager
async def openai_stub(
    pieces: list[str], calls: list[tuple[str, str, dict[str, Any]]]
) -> AsyncIterator[Model]:
    reply = (
        tool_call_reply(calls, text="".join(pieces))
        if calls
        else text_reply(pieces=pieces)
    )
    async with ModelServer.open([reply]) as server:
        model = OpenAIModel("stub", base_url=server.url, api_key="k")
        yield model
        await model.aclose()


@pytest.mark.parametrize("make", [scripted, openai_stub], ids=["scripted", "openai"])
@pytest.mark.parametrize(("name", "pieces", "calls"), STEPS, ids=[s[0] for s in STEPS])
async def test_every_model_streams_a_step_the_same_way(
    make: Any,
    name: str,
    pieces: list[str],
    calls: list[tuple[str, str, dict[str, Any]]],
) -> None:
    """Text arrives in its pieces (for the scripted model, its chunks; for the endpoint,
    its SSE deltas) and the step ends with the same whole message."""
    request = ModelRequest(messages=(Message(role="user", content="go"),))
    async with make(pieces, calls) as model, model.stream(request) as stream:
        events = [e async for e in stream]
    texts = [e.text for e in events if isinstance(e, TextDelta)]
    done = events[-1]
    assert isinstance(done, StepDone)
    if not calls:
        assert texts == pieces
    assert "".join(texts) == "".join(pieces)
    assert done.message.content == "".join(pieces)
    assert [(c.id, c.name, c.input()) for c in done.message.tool_calls] == calls
    assert done.finish_reason == ("tool_calls" if calls else "stop")
