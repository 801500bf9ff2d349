"""S13b on both hosts: a tool's failure, whatever it raises, ends that call only; odd
inputs get the same answer on both hosts; and the host survives both."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import pytest
from tests.runtime.misbehaving import MISBEHAVING
from tests.runtime.support import ALLOW_ALL, TEST_TOOLS

from tether import ErrorCode, Runtime
from tether.runtime import CallState
from tether.testing import event_log

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TOOLS = [*TEST_TOOLS, *MISBEHAVING]
PERMISSIONS = {"allow": [*ALLOW_ALL["allow"], *(t.name for t in MISBEHAVING)]}
KINDS = [
    "asyncio-cancelled",
    "anyio-cancelled",
    "system-exit",
    "keyboard-interrupt",
    "base-exception",
]


@pytest.fixture
def runtime(make_runtime: Callable[..., Runtime]) -> Runtime:
    return make_runtime(tools=TOOLS, permissions=PERMISSIONS)


@pytest.mark.rule("S13b")
@pytest.mark.parametrize("kind", KINDS)
async def test_a_tool_raising_any_base_exception_fails_that_call_only(
    runtime: Runtime, kind: str
) -> None:
    """S13b: a tool raising CancelledError, SystemExit, KeyboardInterrupt or a bare
    BaseException ends TOOL_FAILED with a message; a call beside it is unharmed and the
    host keeps serving."""
    async with runtime as rt:
        session = rt.session()
        results: dict[str, Any] = {}
        with anyio.fail_after(10):
            async with session.turn() as turn, anyio.create_task_group() as tg:

                async def call(name: str, args: dict[str, Any]) -> None:
                    results[name] = await turn.call(name, args)

                tg.start_soon(call, "SlowExtension", {"seconds": 0.3})
                tg.start_soon(call, "Raise", {"kind": kind})
            await session.settled()
        failed = results["Raise"]
        assert failed.code is ErrorCode.TOOL_FAILED
        assert "raised" in failed.output
        assert results["SlowExtension"].output == "extension done"
        async with session.turn() as turn:
            assert (await turn.call("Echo", {"text": "still here"})).output == (
                "still here"
            )
        states = {r.tool: r.state for r in session.ledger_calls()}
        assert states["Raise"] is CallState.FAILED
        assert states["SlowExtension"] is CallState.SUCCEEDED


@pytest.mark.rule("S13b")
@pytest.mark.parametrize("kind", ["system-exit", "asyncio-cancelled"])
async def test_a_write_that_raises_after_its_work_is_recorded_as_failed_not_aborted(
    runtime: Runtime, workspace: Path, kind: str
) -> None:
    """S13b: with a stop in flight, a mutating call whose tool raises after writing is
    recorded as what happened (FAILED), never ABORTED ("never started")."""
    async with runtime as rt, event_log(rt) as events:
        session = rt.session()
        outcome: list[Any] = []
        with anyio.fail_after(10):
            async with session.turn() as turn, anyio.create_task_group() as tg:

                async def call() -> None:
                    outcome.append(
                        await turn.call(
                            "RaiseAfterWrite", {"path": "w.txt", "kind": kind}
                        )
                    )

                tg.start_soon(call)
                await events.wait_started()
                await session.abort()
            await session.settled()
        assert (workspace / "w.txt").read_text() == "whole"
        (record,) = session.ledger_calls()
        assert record.state is CallState.FAILED
        assert outcome[0].code is ErrorCode.TOOL_FAILED


@pytest.mark.parametrize(
    "bad_input",
    [
        pytest.param(["not", "an", "object"], id="list"),
        pytest.param(b'{"text": "bytes"}', id="bytes"),
        pytest.param("text", id="str"),
    ],
)
async def test_an_input_that_is_not_an_object_is_invalid_on_both_hosts(
    runtime: Runtime, bad_input: Any
) -> None:
    """Regression: an input that is not a JSON object is INVALID_INPUT on both hosts
    (over stdio it was TOOL_FAILED "host unreachable"), and the host keeps serving."""
    async with runtime as rt:
        session = rt.session()
        async with session.turn() as turn:
            result = await turn.call("Echo", bad_input)
            assert result.code is ErrorCode.INVALID_INPUT
            assert "JSON object" in result.output
            assert (await turn.call("Echo", {"text": "ok"})).output == "ok"


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    ("bad_input", "words"),
    [
        pytest.param({"text": _nested(50_000)}, "nested", id="nested-50000"),
        pytest.param({"text": {1, 2}}, "JSON", id="not-json"),
        pytest.param({"text": float("nan")}, "JSON", id="nan"),
    ],
)
async def test_an_input_json_cannot_carry_is_invalid_on_both_hosts(
    runtime: Runtime, bad_input: Any, words: str
) -> None:
    """Regression: input nested 50,000 deep, or holding what JSON cannot carry, is
    INVALID_INPUT on both hosts, with the field named; the host survives it."""
    async with runtime as rt:
        session = rt.session()
        async with session.turn() as turn:
            result = await turn.call("Echo", bad_input)
            assert result.code is ErrorCode.INVALID_INPUT, result.output
            assert words in result.output
            assert (await turn.call("Echo", {"text": "ok"})).output == "ok"
