"""The agent event shape over the real CLIs' recorded streams (`streams/`, made by
`record_streams.py`), and over anything at all: it never raises, stays one bounded
line, and shows no control sequence."""

from __future__ import annotations

import json
import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tether.runs._events import (
    RENDER_BOUND,
    AgentError,
    AgentEvent,
    Ended,
    EventReader,
    Note,
    Other,
    Refused,
    Said,
    Started,
    ToolCall,
    ToolResult,
    Usage,
    UsageLimit,
    event_dict,
    failure_line,
    last_line,
    parse_line,
    render_line,
    render_lines,
)

STREAMS = Path(__file__).parent / "streams"


def _events(name: str) -> list[AgentEvent]:
    reader = EventReader()
    text = (STREAMS / name).read_text(encoding="utf-8")
    # Fed in uneven pieces, as a log grows.
    events = [
        e for i in range(0, len(text), 333) for e in reader.feed(text[i : i + 333])
    ]
    return events + reader.close()


def test_claude_codes_stream_is_calls_results_refusals_in_brief() -> None:
    events = _events("claude.log")
    lines = [render_line(e) for e in events]
    assert isinstance(events[1], Started)
    assert events[1].agent == "claude"
    assert Said(text="Looking at the tree first.") in events
    assert "Bash: echo hello; ls" in lines
    assert "Bash ok: hello" in lines
    assert "Bash failed (exit 1): cat: no-such-file: No such file or directory" in lines
    refusals = [e for e in events if isinstance(e, Refused)]
    assert len(refusals) == 2
    assert all(r.by_stop and r.tool == "Bash" for r in refusals)
    assert render_line(refusals[0]).startswith(
        "refused Bash call (echo later-1): the person stopped this run (run "
    )
    assert render_line(refusals[0]).endswith("so this tool call was not started.")
    assert isinstance(events[-1], Note)
    assert "JSON" not in "".join(lines)
    assert not any(x.startswith("{") for x in lines)


def test_codexs_stream_is_the_same_shape() -> None:
    events = _events("codex.log")
    lines = [render_line(e) for e in events]
    assert (
        Started(agent="codex", session="01a23bd5-18b2-74f3-be4a-1268cd4e584b") in events
    )
    assert "shell: echo hello; ls" in lines  # the `bash -lc '…'` wrapper is gone
    assert "shell ok: hello" in lines
    assert (
        "shell failed (exit 1): cat: no-such-file: No such file or directory" in lines
    )
    refusals = [e for e in events if isinstance(e, Refused)]
    assert [r.brief for r in refusals] == ["echo later-1", "echo later-2"]
    assert all(r.by_stop for r in refusals)
    assert not any(x.startswith("{") for x in lines)


def test_a_cli_that_is_not_logged_in_ends_failed_with_its_reason() -> None:
    events = _events("claude-no-key.log")
    assert AgentError(text="Not logged in · Please run /login") in events
    assert events[-1] == Ended(ok=False, text="Not logged in · Please run /login")
    assert render_line(events[-1]) == "failed: Not logged in · Please run /login"
    usage = next(e for e in events if isinstance(e, Usage))
    assert usage.cost_usd == 0
    codex = _events("codex-no-network.log")
    assert any(isinstance(e, AgentError) and "Reconnecting" in e.text for e in codex)


def test_results_name_their_tool_and_ends_usage_and_limits_are_read() -> None:
    reader = EventReader()
    call = {
        "type": "assistant",
        "message": {
            "content": [
                {
                    "type": "tool_use",
                    "id": "t1",
                    "name": "Read",
                    "input": {"file_path": "a.py"},
                }
            ]
        },
    }
    result = {
        "type": "user",
        "message": {
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": [{"type": "text", "text": "\n1 line\n2"}],
                }
            ]
        },
    }
    events = reader.feed(json.dumps(call) + "\n" + json.dumps(result) + "\n")
    assert events == [
        ToolCall(tool="Read", brief="a.py", id="t1"),
        ToolResult(ok=True, tool="Read", brief="1 line", id="t1"),
    ]
    done = {"type": "turn.completed", "usage": {"input_tokens": 7, "output_tokens": 3}}
    assert parse_line(json.dumps(done)) == (
        Usage(input_tokens=7, output_tokens=3),
        Ended(ok=True),
    )
    limited = {
        "type": "error",
        "message": "You've hit your usage limit. Try again at 5pm.",
    }
    assert parse_line(json.dumps(limited)) == (
        UsageLimit(text="You've hit your usage limit. Try again at 5pm."),
    )
    assert event_dict(Refused(reason="r", tool="Bash")) == {
        "kind": "refused",
        "reason": "r",
        "tool": "Bash",
        "brief": "",
        "by_stop": False,
        "id": "",
    }


def test_escapes_and_line_breaks_an_agent_writes_are_shown_as_text() -> None:
    said = {
        "type": "assistant",
        "message": {
            "content": [
                {"type": "text", "text": "a\x1b]52;c;aGk=\x07b\nnext\r\x9bline"}
            ]
        },
    }
    (event,) = parse_line(json.dumps(said))
    line = render_line(event)
    assert line == "says: a␛]52;c;aGk=␇b next ␛[line"
    assert parse_line("\x1b[2Jplain output") == (Other(text="\x1b[2Jplain output"),)
    assert render_line(Other(text="\x1b[2Jplain")) == "␛[2Jplain"
    assert (
        render_line(Said(text="x" * 5000)) == "says: " + "x" * (RENDER_BOUND - 7) + "…"
    )
    assert render_line(Said(text="ok\u202etxt.exe")) == "says: ok<U+202E>txt.exe"
    # A live view skips what it cannot show well: the line before it stays.
    assert last_line('{"type":"system","subtype":"task_started"}') is None
    assert last_line('{"type":"assistant","mess') is None
    assert last_line("compiling") == "compiling"
    assert render_lines('{"type":"turn.started"}\nplain\n{"type":"turn.failed"}') == [
        "plain",
        "failed",
    ]


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "type",
                    "subtype",
                    "message",
                    "content",
                    "item",
                    "text",
                    "id",
                    "name",
                    "input",
                    "is_error",
                    "usage",
                    "result",
                    "error",
                    "tool_use_id",
                    "command",
                    "exit_code",
                    "status",
                    "changes",
                    "aggregated_output",
                    "total_cost_usd",
                    "rate_limit_info",
                ]
            )
            | st.text(max_size=5),
            inner,
            max_size=6,
        )
    ),
    max_leaves=20,
)
_TYPES = st.sampled_from(
    [
        "assistant",
        "user",
        "result",
        "system",
        "item.started",
        "item.completed",
        "turn.completed",
        "turn.failed",
        "error",
        "thread.started",
        "rate_limit_event",
    ]
)


def _shown_well(line: str) -> None:
    for event in parse_line(line):
        shown = render_line(event)
        assert len(shown) <= RENDER_BOUND
        assert "\n" not in shown
        assert "\r" not in shown
        assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in shown), shown
        assert not any(0x202A <= ord(c) <= 0x202E for c in shown), shown
        assert json.dumps(event_dict(event))  # the JSON shape always dumps


@settings(max_examples=100, deadline=None)
@given(_JSON, _TYPES)
def test_any_json_event_never_raises_and_renders_one_bounded_visible_line(
    value: object, kind: str
) -> None:
    _shown_well(json.dumps(value))
    if isinstance(value, dict):
        _shown_well(json.dumps({**value, "type": kind}))
        for key in ("message", "item"):
            _shown_well(json.dumps({"type": kind, key: value}))


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_any_text_never_raises_and_renders_one_bounded_visible_line(text: str) -> None:
    _shown_well(text)
    _shown_well("{" + text)
    reader = EventReader()
    reader.feed(text)
    reader.close()


def test_why_a_stage_failed_is_the_agents_word_else_the_logs_last() -> None:
    no_key = (STREAMS / "claude-no-key.log").read_text(encoding="utf-8")
    assert failure_line(no_key) == "Not logged in · Please run /login"
    assert failure_line("building\nerror: \x1b[31mno such file\x1b[0m\n") == (
        "error: no such file"
    )
    builtin = (
        "Fixing it.\n[Bash: done]\n\n[turn ended: error]\ntether: the model is gone\n"
    )
    assert failure_line(builtin) == "the model is gone"
    assert failure_line('{"type":"turn.started"}\n') is None
    huge = parse_line(
        '{"type":"result","usage":{},"total_cost_usd":1' + "0" * 400 + "}"
    )
    assert huge[0] == Usage()


def test_a_long_adversarial_line_is_read_in_linear_time() -> None:
    """No pattern backtracks over what an agent wrote: a line of a million characters
    that starts like a refusal, a hook error or an event is read at once."""
    started = time.monotonic()
    tail = "a. B" * 250_000
    parse_line("x blocked by PreToolUse hook: tether" + tail)
    parse_line("{" + tail)
    result = {
        "type": "tool_result",
        "is_error": True,
        "content": "PreToolUse:B hook error: [" + tail,
    }
    parse_line(json.dumps({"type": "user", "message": {"content": [result]}}))
    render_line(Refused(reason=tail))
    assert time.monotonic() - started < 2.0
