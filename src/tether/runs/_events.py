"""What an agent did, as typed events, each rendered as one plain line.

A lane's log holds what its agent printed: Claude Code's `stream-json` and Codex's
`exec --json` event streams (one JSON object a line), a command agent's plain output,
the built-in agent's text and `[Tool: state]` lines, and tether's own `tether: …`
lines. The one shape every view uses:

- `parse_line(line) -> tuple[AgentEvent, ...]`: the events of one log line;
- `EventReader().feed(text) / .close() -> list[AgentEvent]`: a whole stream fed in
  pieces (it remembers each call, so a result names its tool and a refusal its input);
- `render_line(event) -> str`: one line a person reads — the same line in the live
  table of `tether run`, its progress lines, `tether logs`, the published lane lines
  and the board;
- `render_lines(text) -> list[str]`: a whole log's (or log end's) lines at once;
- `last_line(line) -> str | None`: a live view's line for the log's last line (None:
  keep the one before; `tether.runs._tail.LogTail(render=last_line)` follows a log);
- `event_dict(event) -> dict`: the JSON shape; `failure_line(text)`: why a stage failed.

The events (frozen attrs classes; `event_dict` gives the JSON shape, `{"kind": …}` plus
the fields, as `tether logs --json` prints it):

| kind | class | fields | rendered |
|---|---|---|---|
| `started` | `Started` | agent, session, model | `claude session 1f2e… started (model m)` |
| `said` | `Said` | text | `says: Looking at the tree first.` |
| `call` | `ToolCall` | tool, brief, id | `Bash: echo hello; ls` |
| `result` | `ToolResult` | tool, ok, brief, exit_code, id | `Bash ok: hello` / `Bash failed (exit 1): cat: …` |
| `refused` | `Refused` | tool, brief, by_stop, reason | `refused Bash (echo hi): the person stopped this run (…), so …` |
| `usage` | `Usage` | input_tokens, output_tokens, cost_usd | `usage: 10 in, 5 out tokens, $0.0100` |
| `limit` | `UsageLimit` | text | `usage limit: …` |
| `error` | `AgentError` | text | `error: Not logged in · Please run /login` |
| `ended` | `Ended` | ok, text | `ended: done` / `failed: …` |
| `note` | `Note` | text | the line (tether's own, or the CLI's warnings) |
| `other` | `Other` | text | the line as text, or `(claude system/task_started)` |

Rules every caller may rely on:

- Nothing here raises on what an agent wrote: an unknown or malformed line, JSON of any
  shape, a line of any length, is an `Other` (or skipped, when blank).
- Every text field is the agent's (untrusted) and bounded (`TEXT_BOUND` characters);
  `render_line` folds it to one line, shows every control character and escape as text
  (`tether._term.visible`) and each direction control as `<U+202E>`, and cuts it at
  `RENDER_BOUND` characters (`…`).
- A `Refused` comes from the text the CLI reports for a hook's refusal: it shows what the
  agent's stream says, not what tether's own records prove (the hook's call record and
  the receipt are that).
"""

from __future__ import annotations

import json
import re
import shlex
from typing import TYPE_CHECKING, Final, final

import attrs

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping

__all__ = (
    "LINE_READ_BOUND",
    "RENDER_BOUND",
    "TEXT_BOUND",
    "AgentError",
    "AgentEvent",
    "Ended",
    "EventReader",
    "Note",
    "Other",
    "Refused",
    "Said",
    "Started",
    "ToolCall",
    "ToolResult",
    "Usage",
    "UsageLimit",
    "event_dict",
    "failure_line",
    "last_line",
    "parse_line",
    "render_line",
    "render_lines",
)

TEXT_BOUND: Final = 2000
"""Characters of an agent's text an event keeps."""
RENDER_BOUND: Final = 300
"""Characters of a rendered line (longer ones end in `…`)."""
LINE_READ_BOUND: Final = 1 << 20
"""Characters of a log line that are parsed; a longer one is an `Other` saying so."""


def _text(value: object, bound: int = TEXT_BOUND) -> str:
    """`value` as bounded text (none is ""; another non-string is its compact JSON)."""
    if value is None:
        return ""
    if not isinstance(value, str):
        try:
            value = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        except (TypeError, ValueError):
            value = repr(value)
    return value[:bound]


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:TEXT_BOUND]
    return ""


@final
@attrs.frozen(kw_only=True)
class Started:
    """The agent's session began."""

    agent: str
    """`claude` or `codex`."""
    session: str = ""
    model: str = ""


@final
@attrs.frozen(kw_only=True)
class Said:
    """Text the model wrote."""

    text: str


@final
@attrs.frozen(kw_only=True)
class ToolCall:
    """A tool call the agent made: its tool and its input in brief."""

    tool: str
    brief: str = ""
    """The command, the file, the pattern: the input's telling part."""
    id: str = ""


@final
@attrs.frozen(kw_only=True)
class ToolResult:
    """How a tool call ended: ok or not, and its output's first line."""

    ok: bool
    tool: str = ""
    """The call's tool when known ("" when its call was not seen)."""
    brief: str = ""
    exit_code: int | None = None
    id: str = ""


@final
@attrs.frozen(kw_only=True)
class Refused:
    """A tool call a hook refused: tether's stop, or its guard."""

    reason: str
    tool: str = ""
    brief: str = ""
    """The refused call's input in brief, when known."""
    by_stop: bool = False
    """Whether the refusal says the person stopped the run."""
    id: str = ""
    """The refused call's id, when the stream gives one."""


@final
@attrs.frozen(kw_only=True)
class Usage:
    """Tokens (and cost, when the CLI says) the agent used so far."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None


@final
@attrs.frozen(kw_only=True)
class UsageLimit:
    """The CLI says the account hit a usage limit."""

    text: str


@final
@attrs.frozen(kw_only=True)
class AgentError:
    """The CLI's own error (not logged in, a lost connection, a failed request)."""

    text: str


@final
@attrs.frozen(kw_only=True)
class Ended:
    """The agent's turn ended: ok or failed, with its final text."""

    ok: bool
    text: str = ""


@final
@attrs.frozen(kw_only=True)
class Note:
    """A line of tether's own in the log, or a warning of the CLI's."""

    text: str


@final
@attrs.frozen(kw_only=True)
class Other:
    """Anything else: plain output, or an event of a kind not known here."""

    text: str


AgentEvent = (
    Started
    | Said
    | ToolCall
    | ToolResult
    | Refused
    | Usage
    | UsageLimit
    | AgentError
    | Ended
    | Note
    | Other
)
"""One thing an agent did, as `parse_line` finds it."""

_KINDS: Final[dict[type, str]] = {
    Started: "started",
    Said: "said",
    ToolCall: "call",
    ToolResult: "result",
    Refused: "refused",
    Usage: "usage",
    UsageLimit: "limit",
    AgentError: "error",
    Ended: "ended",
    Note: "note",
    Other: "other",
}


def event_dict(event: AgentEvent) -> dict[str, object]:
    """The event's JSON shape: `{"kind": ..., <its fields>}`."""
    return {"kind": _KINDS[type(event)], **attrs.asdict(event)}


# -- rendering ---------------------------------------------------------------------


_SENTENCE = re.compile(r"(.*?\.)\s+[A-Z]", re.S)
_BIDI = re.compile("[\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""Direction controls: they would reorder what a person reads (shown as `<U+202E>`)."""


def _bidi_text(found: re.Match[str]) -> str:
    return f"<U+{ord(found.group()):04X}>"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def render_line(event: AgentEvent, *, bound: int = RENDER_BOUND) -> str:
    """The event as one plain line: no line break, no control sequence, bounded."""
    from .._term import visible

    match event:
        case Started(agent=agent, session=session, model=model):
            line = f"{agent} session {session[:8] or '?'} started" + (
                f" (model {model})" if model else ""
            )
        case Said(text=text):
            line = f"says: {text}"
        case ToolCall(tool=tool, brief=brief):
            line = f"{tool or 'tool'}: {brief}" if brief else f"{tool or 'tool'} call"
        case ToolResult(ok=ok, tool=tool, brief=brief, exit_code=code):
            how = "ok" if ok else "failed"
            if code is not None and not ok:
                how += f" (exit {code})"
            line = f"{tool + ' ' if tool else ''}{how}" + (
                f": {brief}" if brief else ""
            )
        case Refused(reason=reason, tool=tool, brief=brief):
            # The first sentence: what follows it is addressed to the agent.
            first = _SENTENCE.match(reason)
            line = f"refused {tool or 'a'} call" + (f" ({brief})" if brief else "")
            line += f": {first.group(1) if first else reason}"
        case Usage(input_tokens=inp, output_tokens=out, cost_usd=cost):
            parts = [f"{inp} in" if inp is not None else "", f"{out} out tokens"]
            line = "usage: " + ", ".join(p for p in parts if p)
            if out is None:
                line = "usage: " + (f"{inp} in tokens" if inp is not None else "?")
            if cost is not None:
                line += f", ${cost:.4f}"
        case UsageLimit(text=text):
            line = f"usage limit: {text}"
        case AgentError(text=text):
            line = f"error: {text}"
        case Ended(ok=ok, text=text):
            line = ("ended" if ok else "failed") + (f": {text}" if text else "")
        case Note(text=text) | Other(text=text):
            line = text
    line = _BIDI.sub(_bidi_text, visible(_one_line(line[: bound * 4])))
    if len(line) > bound:
        line = line[: bound - 1] + "…"
    return line


# -- parsing -----------------------------------------------------------------------

_LIMIT = re.compile(
    r"usage limit|rate.?limit|hit your limit|limit reached|quota", re.IGNORECASE
)
_CLAUDE_HOOK = re.compile(
    r"\A\s*PreToolUse:(\S*) hook error: \[.*?\]: (tether\b.*)", re.S
)
_CODEX_HOOK = "blocked by PreToolUse hook: tether"
"""Codex's log line for a call tether's hook refused: `… CODEX_HOOK…. Command: CMD`."""
_STOP_SAYS = "the person stopped this run"
_EXIT = re.compile(r"\AExit code (\d+)\s*\n?")
_SHELLS = frozenset({"bash", "sh", "zsh", "/bin/bash", "/bin/sh", "/usr/bin/bash"})


def _refused(reason: str, tool: str = "", brief: str = "") -> Refused:
    reason = reason.strip()
    return Refused(
        reason=reason.removeprefix("tether: ")[:TEXT_BOUND],
        tool=tool[:200],
        brief=brief[:500],
        by_stop=_STOP_SAYS in reason,
    )


def _float(value: object) -> float | None:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        return float(value)
    except OverflowError:  # an int too large for a float
        return None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _claude_input(tool: str, given: object) -> str:
    """The telling part of a Claude Code tool's input."""
    if not isinstance(given, dict):
        return _text(given, 500)
    for key in (
        "command",
        "file_path",
        "notebook_path",
        "pattern",
        "path",
        "url",
        "query",
        "description",
        "prompt",
    ):
        value = given.get(key)
        if isinstance(value, str) and value:
            if key == "pattern" and isinstance(given.get("path"), str):
                return f"{value} in {given['path']}"[:500]
            return value[:500]
    if tool == "TodoWrite" and isinstance(given.get("todos"), list):
        return f"{len(given['todos'])} to-dos"
    return _text(given, 500)


def _content_text(content: object) -> str:
    """A tool result's text: a string, or a list of text blocks."""
    if isinstance(content, str):
        return content[:TEXT_BOUND]
    if isinstance(content, list):
        texts = [
            block["text"]
            for block in content[:50]
            if isinstance(block, dict) and isinstance(block.get("text"), str)
        ]
        return "\n".join(texts)[:TEXT_BOUND]
    return ""


def _claude(event: Mapping[str, object]) -> list[AgentEvent]:
    kind = event.get("type")
    message = event.get("message")
    blocks = message.get("content") if isinstance(message, dict) else None
    if kind == "system" and event.get("subtype") == "init":
        return [
            Started(
                agent="claude",
                session=_text(event.get("session_id", ""), 200),
                model=_text(event.get("model", ""), 200),
            )
        ]
    if kind == "assistant" and isinstance(blocks, list):
        error = event.get("error")
        found: list[AgentEvent] = []
        for block in blocks[:50]:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                text = block["text"][:TEXT_BOUND]
                if error:
                    limited = _LIMIT.search(f"{error} {text}")
                    found.append(
                        UsageLimit(text=text) if limited else AgentError(text=text)
                    )
                elif text.strip():
                    found.append(Said(text=text))
            elif block.get("type") == "tool_use":
                tool = _text(block.get("name", ""), 200)
                found.append(
                    ToolCall(
                        tool=tool,
                        brief=_claude_input(tool, block.get("input")),
                        id=_text(block.get("id", ""), 200),
                    )
                )
        return found
    if kind == "user" and isinstance(blocks, list):
        found = []
        for block in blocks[:50]:
            if not isinstance(block, dict) or block.get("type") != "tool_result":
                continue
            text = _content_text(block.get("content"))
            ident = _text(block.get("tool_use_id", ""), 200)
            is_error = block.get("is_error") is True
            hook = _CLAUDE_HOOK.match(text) if is_error else None
            if hook is not None:
                found.append(
                    attrs.evolve(_refused(hook.group(2), hook.group(1)), id=ident)
                )
                continue
            code = None
            exited = _EXIT.match(text) if is_error else None
            if exited is not None:
                code = int(exited.group(1)[:9])
                text = text[exited.end() :]
            found.append(
                ToolResult(
                    ok=not is_error, brief=_first_line(text), exit_code=code, id=ident
                )
            )
        return found
    if kind == "result":
        found = []
        usage = event.get("usage")
        cost = event.get("total_cost_usd")
        if isinstance(usage, dict):
            found.append(
                Usage(
                    input_tokens=_int(usage.get("input_tokens")),
                    output_tokens=_int(usage.get("output_tokens")),
                    cost_usd=_float(cost),
                )
            )
        text = _text(event.get("result", ""))
        failed = event.get("is_error") is True or str(
            event.get("subtype", "")
        ).startswith("error")
        if failed and not text:
            text = _text(event.get("subtype", ""), 200)
        if failed and _LIMIT.search(text):
            found.append(UsageLimit(text=text))
        found.append(Ended(ok=not failed, text=text))
        return found
    if kind == "rate_limit_event":
        info = event.get("rate_limit_info")
        if isinstance(info, dict) and info.get("status") == "rejected":
            return [UsageLimit(text=_text(info, 500))]
    return [Other(text=f"(claude {_kind_of(event)})")]


def _codex_command(command: object) -> str:
    """A Codex command line without its `bash -lc '…'` wrapper."""
    text = _text(command, 1000)
    try:
        parts = shlex.split(text)
    except ValueError:
        return text
    if len(parts) == 3 and parts[0] in _SHELLS and parts[1] in ("-c", "-lc"):
        return parts[2]
    return text


def _codex_item(item: Mapping[str, object], done: bool) -> list[AgentEvent]:
    kind = item.get("type")
    ident = _text(item.get("id", ""), 200)
    if kind == "agent_message":
        return [Said(text=_text(item.get("text", "")))] if done else []
    if kind == "reasoning":
        return []
    if kind == "error":
        return [Note(text=f"codex: {_text(item.get('message', ''))}")]
    if kind == "command_execution":
        command = _codex_command(item.get("command", ""))
        if not done:
            return [ToolCall(tool="shell", brief=command, id=ident)]
        code = _int(item.get("exit_code"))
        return [
            ToolResult(
                tool="shell",
                ok=code == 0 and item.get("status") != "failed",
                brief=_first_line(_text(item.get("aggregated_output", ""))),
                exit_code=code,
                id=ident,
            )
        ]
    if kind == "file_change":
        changes = item.get("changes")
        brief = ""
        if isinstance(changes, list):
            brief = ", ".join(
                f"{c.get('kind', '')} {c.get('path', '')}".strip()
                for c in changes[:20]
                if isinstance(c, dict)
            )
        if not done:
            return [ToolCall(tool="patch", brief=brief[:500], id=ident)]
        ok = item.get("status") != "failed"
        return [ToolResult(tool="patch", ok=ok, brief=brief[:500], id=ident)]
    if kind == "mcp_tool_call":
        tool = (
            f"{_text(item.get('server', ''), 100)}.{_text(item.get('tool', ''), 100)}"
        )
        if not done:
            return [
                ToolCall(
                    tool=tool, brief=_text(item.get("arguments", ""), 500), id=ident
                )
            ]
        error = item.get("error")
        ok = item.get("status") != "failed" and not error
        brief = _text(error if error else item.get("result", ""))
        return [ToolResult(tool=tool, ok=ok, brief=_first_line(brief), id=ident)]
    if kind == "web_search":
        if done:
            return []
        return [
            ToolCall(
                tool="web_search", brief=_text(item.get("query", ""), 500), id=ident
            )
        ]
    if kind == "todo_list":
        return []
    return [Other(text=f"(codex item {_text(kind, 100)})")]


def _codex(event: Mapping[str, object]) -> list[AgentEvent]:
    kind = event.get("type")
    item = event.get("item")
    if kind == "thread.started":
        return [Started(agent="codex", session=_text(event.get("thread_id", ""), 200))]
    if kind in ("item.started", "item.completed") and isinstance(item, dict):
        return _codex_item(item, kind == "item.completed")
    if kind == "item.updated":
        return []
    if kind == "turn.started":
        return []
    if kind == "turn.completed":
        usage = event.get("usage")
        found: list[AgentEvent] = []
        if isinstance(usage, dict):
            found.append(
                Usage(
                    input_tokens=_int(usage.get("input_tokens")),
                    output_tokens=_int(usage.get("output_tokens")),
                )
            )
        return [*found, Ended(ok=True)]
    if kind == "turn.failed":
        error = event.get("error")
        text = _text(error.get("message", "") if isinstance(error, dict) else error)
        limit: list[AgentEvent] = [UsageLimit(text=text)] if _LIMIT.search(text) else []
        return [*limit, Ended(ok=False, text=text)]
    if kind == "error":
        text = _text(event.get("message", ""))
        return [UsageLimit(text=text) if _LIMIT.search(text) else AgentError(text=text)]
    return [Other(text=f"(codex {_kind_of(event)})")]


def _kind_of(event: Mapping[str, object]) -> str:
    kind = _text(event.get("type", "event"), 60)
    sub = event.get("subtype")
    return f"{kind}/{_text(sub, 60)}" if isinstance(sub, str) else kind


_CODEX_KINDS = frozenset(
    {"thread.started", "turn.started", "turn.completed", "turn.failed", "error"}
)


def _parse_json(event: Mapping[str, object]) -> list[AgentEvent]:
    kind = event.get("type")
    if not isinstance(kind, str):
        return [Other(text="(an event with no type)")]
    if kind in _CODEX_KINDS or kind.startswith("item."):
        return _codex(event)
    return _claude(event)


_CUT_SHORT = "(an event cut short:"
_UNFORESEEN = (ValueError, TypeError, ArithmeticError, RecursionError)
"""What reading an event of a shape not foreseen could raise: it becomes an `Other`."""
_UNSHOWN = (_CUT_SHORT, "(claude ", "(codex ")
"""How the `Other` events a live view skips begin."""


def parse_line(line: str) -> tuple[AgentEvent, ...]:
    """The events of one log line; () for a blank one. Never raises."""
    if len(line) > LINE_READ_BOUND:
        return (Other(text=f"(a line of {len(line)} characters, not read)"),)
    text = line.strip()
    if not text:
        return ()
    if text.startswith("{"):
        try:
            event = json.loads(text)
        except (ValueError, RecursionError):
            return (Other(text=f"{_CUT_SHORT} {text[:80]}"),)
        if isinstance(event, dict):
            try:
                return tuple(_parse_json(event))
            except _UNFORESEEN:  # pragma: no cover - no test found one; never raise
                return (Other(text="(claude or codex: an event not read)"),)
    if text.startswith("tether: "):
        return (Note(text=text[:TEXT_BOUND]),)
    at = text.find(_CODEX_HOOK)
    if at >= 0:
        # Split by hand, not by a pattern: the line is the agent's, of any length.
        reason, _, command = text[at + len(_CODEX_HOOK) - 6 :].rpartition(" Command: ")
        if not reason:
            reason, command = command, ""
        return (_refused(reason, "shell", command),)
    if text.startswith("Reading additional input from stdin"):
        return ()
    return (Other(text=text[:TEXT_BOUND]),)


@final
@attrs.define(eq=False)
class EventReader:
    """Events of a whole stream, fed in pieces as they come (split anywhere).

    It remembers each call by id, so a result names its tool and a refusal the
    refused call's input.
    """

    _pending: str = ""
    _calls: dict[str, ToolCall] = attrs.field(factory=dict)

    def feed(self, text: str) -> list[AgentEvent]:
        """The events of the whole lines `text` completes."""
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        if len(self._pending) > LINE_READ_BOUND:
            self._pending = self._pending[: LINE_READ_BOUND + 1]
        return [e for line in lines for e in self._named(parse_line(line))]

    def close(self) -> list[AgentEvent]:
        """The events of a last line with no line end."""
        rest, self._pending = self._pending, ""
        return list(self._named(parse_line(rest)))

    def _named(self, events: Iterable[AgentEvent]) -> Iterator[AgentEvent]:
        for event in events:
            if isinstance(event, ToolCall) and event.id:
                if len(self._calls) > 10_000:
                    self._calls.clear()
                self._calls[event.id] = event
            elif isinstance(event, ToolResult) and not event.tool:
                call = self._calls.get(event.id)
                event = attrs.evolve(event, tool=call.tool if call else "")
            elif isinstance(event, Refused) and not event.brief:
                call = self._calls.get(event.id)
                if call is not None:
                    event = attrs.evolve(event, brief=call.brief)
            yield event


def render_lines(text: str) -> list[str]:
    """Every event of a whole log text (or the end of one), rendered: one line each."""
    reader = EventReader()
    return [render_line(e) for e in reader.feed(text) + reader.close()]


def last_line(line: str) -> str | None:
    """The rendered line of a log line's last event, for a live view.

    None for a line of no event, of an event of a kind not known here (`(claude
    system/task_started)`), and for JSON cut short (a line still being written, or
    whose start a bounded read of the log's end skipped): the view keeps the line
    before it.
    """
    events = parse_line(line)
    if not events:
        return None
    last = events[-1]
    if isinstance(last, Other) and last.text.startswith(_UNSHOWN):
        return None
    return render_line(last)


def failure_line(text: str, *, bound: int = 200) -> str | None:
    """Why a stage whose agent failed failed, as one line, from its log's end.

    The agent's own word when it said one: the last failed end's text (`Not logged in
    · Please run /login`), else its last error or usage limit. Else the log's last
    word: a command agent's last line of plain output, or tether's own last line
    when it comes after it (the built-in agent's error, `the model cannot be used:
    …`). None when the log says nothing of use.
    """
    reader = EventReader()
    events = reader.feed(text) + reader.close()
    said: AgentEvent | None = None
    last: AgentEvent | None = None
    for event in events:
        failed_end = isinstance(event, Ended) and not event.ok and event.text
        if failed_end or isinstance(event, AgentError | UsageLimit):
            said = event
        elif isinstance(event, Note) or (
            isinstance(event, Other) and not event.text.startswith(("(", "["))
        ):
            last = event
    chosen = said or last
    if chosen is None:
        return None
    if isinstance(chosen, Note):
        return render_line(
            Other(text=chosen.text.removeprefix("tether: ")), bound=bound
        )
    if isinstance(chosen, Ended | AgentError | Other):
        return render_line(Other(text=chosen.text), bound=bound)
    return render_line(chosen, bound=bound)
