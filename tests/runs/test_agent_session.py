"""The `agent-session` record a take-over resumes from: one writer, one reader."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.runs._values import AgentSession


@pytest.mark.parametrize(
    "session",
    [
        AgentSession("implement", "7f3c9a"),
        AgentSession("write tests", "7f3c9a"),
        AgentSession("write tests", "s-1", Path("/state/lanes/r/l.transcript")),
        AgentSession("review", "s-1", Path("/state/my lanes/l.transcript")),
        AgentSession('it\'s "quoted"', "s-1", Path("/t")),
    ],
)
def test_a_session_reads_back_as_it_was_written(session: AgentSession) -> None:
    assert AgentSession.from_detail(session.detail()) == session


@pytest.mark.parametrize(
    ("line", "read"),
    [
        ("implement 7f3c9a", AgentSession("implement", "7f3c9a")),
        (
            "implement s-1 /state/lanes/r/l.transcript",
            AgentSession("implement", "s-1", Path("/state/lanes/r/l.transcript")),
        ),
        # Before the words were quoted, a stage of two words read as stage `write`.
        (
            "write tests s-1 /state/lanes/r/l.transcript",
            AgentSession("write tests", "s-1", Path("/state/lanes/r/l.transcript")),
        ),
        ("write tests 7f3c9a", AgentSession("write tests", "7f3c9a")),
        ("", None),
        ("implement", None),
        ("implement 'unclosed", AgentSession("implement", "'unclosed")),
    ],
)
def test_lines_recorded_before_the_quoting_read_the_same(
    line: str, read: AgentSession | None
) -> None:
    assert AgentSession.from_detail(line) == read
