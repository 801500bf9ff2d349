"""The scripted model: a file of moves, played in order; also the replay of a session.

A script is JSON lines. The first line names the format and its version; every other
non-blank line is one move, that is one model step (one assistant message):

```
{"tether_script": 1}
{"text": "Reading it.", "tool_calls": [{"id": "c1", "name": "Read", "input": {"file_path": "a.txt"}}]}
{"text": "It says hello.", "chunks": ["It says ", "hello."]}
```

Fields of a move: `text` (what the model says), `chunks` (the same text in the pieces
it streams in; default: one piece), `tool_calls` (each `id`, `name`, `input`),
`pause` (seconds between pieces), `hang` (after the text, wait until stopped: a model
request in flight), `usage` (`[prompt_tokens, completion_tokens]`). Play is
deterministic: the same script and prompts give the same steps. A recorded session
becomes a script with `script_from_transcript` (`tether chat --resume` keeps the
transcript; the script replays what the model said).
"""

from __future__ import annotations

import json
from contextlib import aclosing, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, final

import anyio
import attrs

from .._fs import write_atomic
from ._types import (
    Message,
    ModelError,
    ModelRequest,
    StepDone,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    Usage,
)

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Sequence

__all__ = ("SCRIPT_VERSION", "Move", "ScriptedModel", "script_from_transcript")

SCRIPT_VERSION = 1
"""The version of the script format this tether reads and writes."""

_MOVE_FIELDS = frozenset({"text", "chunks", "tool_calls", "pause", "hang", "usage"})


@attrs.frozen(kw_only=True)
class Move:
    """One model step of a script."""

    text: str = ""
    chunks: tuple[str, ...] = ()
    """The text in the pieces it streams in (empty: the text as one piece)."""
    tool_calls: tuple[ToolCall, ...] = ()
    pause: float = 0.0
    hang: bool = False
    usage: Usage | None = None

    def pieces(self) -> tuple[str, ...]:
        """The pieces the text streams in."""
        if self.chunks:
            return self.chunks
        return (self.text,) if self.text else ()

    def to_json(self) -> dict[str, Any]:
        """The move as one script line's object."""
        data: dict[str, Any] = {"text": self.text}
        if self.chunks:
            data["chunks"] = list(self.chunks)
        if self.tool_calls:
            data["tool_calls"] = [
                {"id": c.id, "name": c.name, "input": c.input()}
                for c in self.tool_calls
            ]
        if self.pause:
            data["pause"] = self.pause
        if self.hang:
            data["hang"] = True
        if self.usage is not None:
            data["usage"] = [self.usage.prompt_tokens, self.usage.completion_tokens]
        return data


def _move(data: object, where: str, step: int) -> Move:
    if not isinstance(data, dict):
        raise ModelError(f"{where}: a move must be a JSON object")
    unknown = set(data) - _MOVE_FIELDS
    if unknown:
        raise ModelError(
            f"{where}: unknown move fields {sorted(unknown)}; use {sorted(_MOVE_FIELDS)}"
        )
    text = data.get("text", "")
    chunks = data.get("chunks", [])
    if not isinstance(text, str) or not (
        isinstance(chunks, list) and all(isinstance(c, str) for c in chunks)
    ):
        raise ModelError(f"{where}: text must be a string and chunks a list of strings")
    if chunks and not text:
        text = "".join(chunks)
    elif chunks and "".join(chunks) != text:
        raise ModelError(f"{where}: the chunks must join to the text")
    calls = []
    for n, raw in enumerate(data.get("tool_calls", [])):
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
            raise ModelError(f"{where}: each tool call needs a name")
        payload = raw.get("input", {})
        if not isinstance(payload, dict):
            raise ModelError(f"{where}: the input of {raw['name']} must be an object")
        calls.append(
            ToolCall(
                id=str(raw.get("id") or f"call_{step}_{n}"),
                name=raw["name"],
                arguments=json.dumps(payload),
            )
        )
    usage = data.get("usage")
    pause = data.get("pause", 0.0)
    if not isinstance(pause, int | float) or pause < 0:
        raise ModelError(f"{where}: pause must be a number of seconds")
    return Move(
        text=text,
        chunks=tuple(chunks),
        tool_calls=tuple(calls),
        pause=float(pause),
        hang=bool(data.get("hang", False)),
        usage=Usage(int(usage[0]), int(usage[1])) if usage else None,
    )


def read_script(path: Path) -> list[Move]:
    """Read a script file.

    Raises:
        ModelError: the file is missing, not a script, of another version, or a move
            is malformed; the message names the line.
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ModelError(f"cannot read script {path}: {exc.strerror}") from None
    moves: list[Move] = []
    header_seen = False
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ModelError(f"{where}: not JSON ({exc.msg})") from None
        if not header_seen:
            if not isinstance(data, dict) or "tether_script" not in data:
                raise ModelError(
                    f'{where}: a script starts with {{"tether_script": {SCRIPT_VERSION}}}'
                )
            if data["tether_script"] != SCRIPT_VERSION:
                raise ModelError(
                    f"{where}: script version {data['tether_script']} is not supported;"
                    f" this tether reads version {SCRIPT_VERSION}"
                )
            header_seen = True
            continue
        moves.append(_move(data, where, len(moves)))
    if not header_seen:
        raise ModelError(f"{path}: empty script; write the header line and moves")
    return moves


def write_script(path: Path, moves: Iterable[Move]) -> None:
    """Write moves as a script file (atomically)."""
    lines = [json.dumps({"tether_script": SCRIPT_VERSION})]
    lines += [json.dumps(m.to_json()) for m in moves]
    write_atomic(path, ("\n".join(lines) + "\n").encode())


def script_from_transcript(messages: Sequence[Message]) -> list[Move]:
    """The moves that replay what the model said in a recorded transcript."""
    return [
        Move(text=m.content, tool_calls=m.tool_calls)
        for m in messages
        if m.role == "assistant"
    ]


@final
class ScriptedModel:
    """A model that plays moves in order, one per step; it keeps every request it got.

    When the moves run out, the next step fails with a `ModelError` that says so.
    """

    def __init__(self, moves: Iterable[Move], *, name: str = "scripted") -> None:
        self.moves = list(moves)
        self._name = name
        self.requests: list[ModelRequest] = []
        """Every request the model was given, in order (tests assert on them)."""

    @classmethod
    def from_file(cls, path: Path | str) -> ScriptedModel:
        """Load a script file.

        Raises:
            ModelError: the file is not a valid script.
        """
        return cls(read_script(Path(path)), name=f"scripted:{path}")

    @property
    def name(self) -> str:
        """The model's spec."""
        return self._name

    @asynccontextmanager
    async def stream(
        self, request: ModelRequest
    ) -> AsyncIterator[AsyncIterator[StreamEvent]]:
        """Play the next move."""
        step = len(self.requests)
        self.requests.append(request)
        if step >= len(self.moves):
            raise ModelError(
                f"the script {self._name} has {len(self.moves)} moves and step"
                f" {step + 1} was asked for; add moves to the script"
            )
        play = self._play(self.moves[step])
        async with aclosing(play):
            yield play

    async def _play(self, move: Move) -> AsyncGenerator[StreamEvent, None]:
        for piece in move.pieces():
            if move.pause:
                await anyio.sleep(move.pause)
            yield TextDelta(piece)
        for index, call in enumerate(move.tool_calls):
            yield ToolCallDelta(index, call.id, call.name, call.arguments)
        if move.hang:
            await anyio.sleep_forever()
        yield StepDone(
            message=Message(
                role="assistant", content=move.text, tool_calls=move.tool_calls
            ),
            finish_reason="tool_calls" if move.tool_calls else "stop",
            usage=move.usage,
        )
