"""The scripted model's file: versioned, checked line by line, and a session's replay."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tether.models import (
    Message,
    ModelError,
    ModelRequest,
    Move,
    ScriptedModel,
    StepDone,
    ToolCall,
    model_from_spec,
    read_script,
    script_from_transcript,
    write_script,
)

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("", "empty script"),
        ('{"text": "hi"}\n', 'a script starts with {"tether_script": 1}'),
        ('{"tether_script": 2}\n', "script version 2 is not supported"),
        ('{"tether_script": 1}\nnot json\n', ":2: not JSON"),
        ('{"tether_script": 1}\n{"txt": "hi"}\n', "unknown move fields ['txt']"),
        (
            '{"tether_script": 1}\n{"tool_calls": [{"input": {}}]}\n',
            "each tool call needs a name",
        ),
        (
            '{"tether_script": 1}\n{"text": "ab", "chunks": ["a"]}\n',
            "the chunks must join to the text",
        ),
    ],
)
def test_a_bad_script_is_refused_with_the_line_and_what_to_do(
    tmp_path: Path, text: str, error: str
) -> None:
    """Each defect is one `ModelError` line naming the file (and line)."""
    path = tmp_path / "moves.jsonl"
    path.write_text(text)
    with pytest.raises(ModelError) as caught:
        read_script(path)
    assert error in str(caught.value)
    assert str(path) in str(caught.value)


def test_unknown_model_kinds_and_missing_files_are_refused(tmp_path: Path) -> None:
    """`model_from_spec` names the kinds it knows; a missing script says so."""
    with pytest.raises(ModelError, match="use scripted:<file> or openai:<model>"):
        model_from_spec("claude:x")
    with pytest.raises(ModelError, match="cannot read script"):
        model_from_spec(f"scripted:{tmp_path / 'none.jsonl'}")


async def test_a_recorded_session_replays_as_a_script(tmp_path: Path) -> None:
    """The assistant messages of a transcript become moves; written and read back, the
    script says the same things in the same order."""
    transcript = [
        Message(role="user", content="go"),
        Message(
            role="assistant",
            content="reading",
            tool_calls=(
                ToolCall(id="c1", name="Read", arguments='{"file_path": "a"}'),
            ),
        ),
        Message(role="tool", content="hello", tool_call_id="c1"),
        Message(role="assistant", content="it says hello"),
    ]
    path = tmp_path / "replay.jsonl"
    write_script(path, script_from_transcript(transcript))
    model = ScriptedModel.from_file(path)
    said = []
    for _ in range(2):
        request = ModelRequest(messages=(Message(role="user", content="x"),))
        async with model.stream(request) as stream:
            last = [e async for e in stream][-1]
            assert isinstance(last, StepDone)
            said.append(last.message)
    assert said == [m for m in transcript if m.role == "assistant"]
    assert model.moves == read_script(path)
    assert model.name == f"scripted:{path}"


def test_moves_round_trip_through_their_json() -> None:
    """Every field of a move survives the script file."""
    from tether.models import Usage

    move = Move(
        text="ab",
        chunks=("a", "b"),
        tool_calls=(ToolCall(id="c", name="Echo", arguments='{"text": "x"}'),),
        pause=0.5,
        hang=True,
        usage=Usage(3, 4),
    )
    assert move.to_json() == {
        "text": "ab",
        "chunks": ["a", "b"],
        "tool_calls": [{"id": "c", "name": "Echo", "input": {"text": "x"}}],
        "pause": 0.5,
        "hang": True,
        "usage": [3, 4],
    }
